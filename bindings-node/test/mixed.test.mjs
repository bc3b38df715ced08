// Three drivers of the same core on one Redis lock: the native addon
// (polylock) holds, a polylock/wasm client waits, then a Rust process (the
// polylock CLI) waits. They are granted in the order they queued, each with
// a larger fencing token.
import assert from 'node:assert/strict'
import { execFileSync, spawn } from 'node:child_process'
import { once } from 'node:events'
import { existsSync, mkdtempSync, readFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { before, describe, it } from 'node:test'
import { fileURLToPath } from 'node:url'

import * as native from 'polylock'
import * as wasm from 'polylock/wasm'
import { eventually, rawRedis, unique } from './helpers.mjs'

const url = process.env.POLYLOCK_TEST_REDIS
const repo = fileURLToPath(new URL('../../', import.meta.url))
const cli = join(process.env.CARGO_TARGET_DIR || join(repo, 'target'), 'release', 'polylock')

async function serverWaiters(name) {
  const raw = await rawRedis(url)
  try {
    return await raw.command('ZCARD', `polylock_queue:{${name}}`)
  } finally {
    raw.close()
  }
}

describe('native Node, wasm Node and Rust on one lock', () => {
  before(() => execFileSync('cargo', ['build', '--release', '-q', '-p', 'polylock-cli'], { cwd: repo, stdio: 'inherit' }))

  it('hand off in the order they queued, with increasing fencing tokens', { timeout: 60_000 }, async () => {
    const name = unique('mixed')
    const holderClient = await native.connect(url)
    const waiterClient = await wasm.connect(url)
    const held = await holderClient.lock(name).acquire()

    const wasmGrant = waiterClient.lock(name).acquire({ timeoutMs: 30_000 })
    assert.ok(await eventually(async () => (await serverWaiters(name)) === 1), 'the wasm waiter queued')

    const out = join(mkdtempSync(join(tmpdir(), 'polylock-mixed-')), 'token')
    const rust = spawn(cli, ['run', name, '--url', url, '--timeout', '30', '--', 'sh', '-c', `echo "$POLYLOCK_FENCING_TOKEN" > ${out}`], { stdio: 'inherit' })
    const rustExit = once(rust, 'exit')
    assert.ok(await eventually(async () => (await serverWaiters(name)) === 2), 'the Rust waiter queued behind it')

    await held.release()
    const wasmGuard = await wasmGrant
    assert.ok(wasmGuard.fencingToken > held.fencingToken, `wasm ${wasmGuard.fencingToken} > native ${held.fencingToken}`)
    // The Rust waiter is still waiting behind the wasm holder.
    assert.equal(await serverWaiters(name), 1)
    assert.equal(existsSync(out), false, 'the Rust waiter ran while the wasm client held the lock')
    await wasmGuard.release()

    const [code] = await rustExit
    assert.equal(code, 0)
    const rustToken = BigInt(readFileSync(out, 'utf8').trim())
    assert.ok(rustToken > wasmGuard.fencingToken, `rust ${rustToken} > wasm ${wasmGuard.fencingToken}`)
    await Promise.all([holderClient.close(), waiterClient.close()])
  })
})
