'use strict'
// Loads the napi addon. Only index.js uses it. Two places, first found wins:
//   1. polylock.<platform>-<arch>.node next to this file: the addon built from
//      source by scripts/build-native.mjs (`npm run build`, needs Rust);
//   2. the prebuilt platform package @polylock/<platform>-<arch>[-<libc>]
//      (napi-rs layout), an optional dependency of the published `polylock`
//      of which npm installs only the one whose os/cpu/libc fit.
const { existsSync } = require('node:fs')
const { join } = require('node:path')

/** glibc or musl: a glibc Node reports the glibc it runs on, a musl Node does not. */
function linuxLibc() {
  const header = process.report?.getReport?.().header
  return header?.glibcVersionRuntime ? 'gnu' : 'musl'
}

/** The platform package's suffix, as scripts/package names them, e.g. `linux-x64-gnu`. */
function platformTriple() {
  const base = `${process.platform}-${process.arch}`
  return process.platform === 'linux' ? `${base}-${linuxLibc()}` : base
}

function load() {
  const local = join(__dirname, `polylock.${process.platform}-${process.arch}.node`)
  if (existsSync(local)) {
    try {
      return require(local)
    } catch (e) {
      throw new Error(`polylock: cannot load the native addon ${local} (${e.message}); rebuild it with \`npm run build\``, {
        cause: e,
      })
    }
  }
  const triple = platformTriple()
  const pkg = `@polylock/${triple}`
  try {
    return require(pkg)
  } catch (e) {
    if (e?.code !== 'MODULE_NOT_FOUND' || !String(e.message).includes(pkg)) {
      throw new Error(`polylock: the native addon of ${pkg} does not load on ${triple} (${e.message})`, {
        cause: e,
      })
    }
    throw new Error(
      `polylock: no native addon for ${triple}: the platform package ${pkg} is not installed. ` +
        'npm installs it with polylock unless optional dependencies are omitted (--omit=optional, ' +
        '--no-optional) or the lockfile was made on another platform: run `npm install ' +
        `${pkg}\`. Prebuilt packages exist for linux-x64-gnu, linux-arm64-gnu, linux-x64-musl ` +
        'and linux-arm64-musl; elsewhere build from source (bindings-node: `npm run build`, needs Rust).',
      { cause: e },
    )
  }
}

module.exports = load()
