// polylock/wasm loads and locks in a Node process that has no native addon:
// a fresh directory holding only the package's JavaScript, polylock.wasm and
// ioredis (with its dependencies), no `*.node` file anywhere, and a child
// process in which process.dlopen throws if anything calls it.
import assert from 'node:assert/strict'
import { execFileSync } from 'node:child_process'
import { cpSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, it } from 'node:test'
import { fileURLToPath } from 'node:url'

const url = process.env.POLYLOCK_TEST_REDIS
if (!url) throw new Error('POLYLOCK_TEST_REDIS is not set: eval "$(scripts/services env)" first')
const pkg = fileURLToPath(new URL('../../', import.meta.url))
const WASM_FILES = ['package.json', 'api.js', 'errors.js', 'validate.js', 'wasm.js', 'wasm.mjs', 'wasm.d.ts', 'wasm-native.js', 'wasm-clock.js', 'polylock.wasm']

/** ioredis and everything it depends on, as installed in the package's node_modules. */
function withDependencies(name, seen = new Set()) {
  if (seen.has(name)) return seen
  seen.add(name)
  const manifest = JSON.parse(readFileSync(join(pkg, 'node_modules', name, 'package.json'), 'utf8'))
  for (const dep of Object.keys(manifest.dependencies ?? {})) withDependencies(dep, seen)
  return seen
}

function filesUnder(dir) {
  return readdirSync(dir, { recursive: true }).map(String)
}

const child = `
const loaded = []
process.dlopen = (m, file) => { loaded.push(file); throw new Error('process.dlopen called for ' + file) }
const { connect } = await import('polylock/wasm')
const client = await connect(process.env.URL)
const guard = await client.lock(process.env.NAME).acquire({ timeoutMs: 5000 })
const token = guard.fencingToken
await guard.release()
await client.close()
if (loaded.length) throw new Error('native code loaded: ' + loaded.join(', '))
console.log(JSON.stringify({ token: String(token) }))
`

describe('polylock/wasm without a native addon', () => {
  it('loads and locks from a directory with no .node file, never calling process.dlopen', { timeout: 30_000 }, () => {
    const dir = mkdtempSync(join(tmpdir(), 'polylock-wasm-'))
    try {
      for (const f of WASM_FILES) cpSync(join(pkg, f), join(dir, 'node_modules', 'polylock', f))
      for (const dep of withDependencies('ioredis')) {
        cpSync(join(pkg, 'node_modules', dep), join(dir, 'node_modules', dep), { recursive: true })
      }
      writeFileSync(join(dir, 'main.mjs'), child)
      const natives = filesUnder(dir).filter((f) => f.endsWith('.node'))
      assert.deepEqual(natives, [], 'no native addon in the directory')
      const out = execFileSync(process.execPath, ['main.mjs'], {
        cwd: dir,
        env: { PATH: process.env.PATH, URL: url, NAME: `/polylock-test/wasm-standalone-${process.pid}` },
        encoding: 'utf8',
      })
      assert.ok(BigInt(JSON.parse(out).token) > 0n, out)
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  })
})
