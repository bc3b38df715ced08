'use strict'
// Loads the napi addon built by scripts/build-native.mjs. Only index.js uses it.
const { join } = require('node:path')

const file = join(__dirname, `polylock.${process.platform}-${process.arch}.node`)
try {
  module.exports = require(file)
} catch (e) {
  throw new Error(
    `polylock: cannot load the native addon ${file} (${e.message}); ` +
      'build it with `npm run build` (needs the Rust toolchain)',
    { cause: e },
  )
}
