// Hot-path cost guard of polylock/wasm (issue 16), counted and not timed:
// what one uncontended acquire+release costs its JavaScript driver. Counted
// here: calls into the module (each one is a JSON request in and an answer
// out), Redis commands sent, and draws from the OS's random generator.
//
// The bounds are today's counts; a change that adds to the hot path fails
// here and must say why.
import assert from 'node:assert/strict'
import { createRequire } from 'node:module'
import { describe, it } from 'node:test'

import { unique } from '../helpers.mjs'

const url = process.env.POLYLOCK_TEST_REDIS
if (!url) throw new Error('POLYLOCK_TEST_REDIS is not set: eval "$(scripts/services env)" first')

const counts = { moduleCalls: 0, commands: 0, sources: 0, randomDraws: 0 }

// Counting wrappers, in place before the package loads its module and its
// connections (this file runs in a process of its own under `node --test`).
const instantiate = WebAssembly.instantiate
WebAssembly.instantiate = async (...args) => {
  const { module, instance } = await instantiate(...args)
  const exports = { ...instance.exports }
  const tableCall = exports.table_call
  exports.table_call = (...xs) => {
    counts.moduleCalls++
    return tableCall(...xs)
  }
  return { module, instance: { exports } }
}
const getRandomValues = crypto.getRandomValues.bind(crypto)
crypto.getRandomValues = (array) => {
  counts.randomDraws++
  return getRandomValues(array)
}
const require = createRequire(import.meta.url)
const Redis = require('ioredis')
const sendCommand = Redis.prototype.sendCommand
Redis.prototype.sendCommand = function (...xs) {
  counts.commands++
  if (xs[0]?.name?.toLowerCase() === 'eval') counts.sources++ // a script sent with its source
  return sendCommand.apply(this, xs)
}

const { connect } = await import('polylock/wasm')

/** What `op` costs, counted over `n` runs after a warm-up run. */
async function costOf(op, n = 1) {
  await op()
  const before = { ...counts }
  for (let i = 0; i < n; i++) await op()
  return Object.fromEntries(Object.keys(counts).map((k) => [k, counts[k] - before[k]]))
}

describe('polylock/wasm hot path', () => {
  it('an uncontended acquire+release is 4 module calls and 2 Redis commands, by SHA1', async () => {
    const client = await connect(url)
    const lock = client.lock(unique('wasm-hotpath'))
    const got = await costOf(async () => (await lock.acquire()).release())
    await client.close()
    // The acquire, its reply, the release, its reply; the acquire script and
    // the leave script.
    assert.equal(got.moduleCalls, 4, JSON.stringify(got))
    assert.equal(got.commands, 2, JSON.stringify(got))
    // Warm (the warm-up run loaded the scripts if the server lacked them):
    // EVALSHA, no source on the wire.
    assert.equal(got.sources, 0, JSON.stringify(got))
  })

  it('nonces are drawn from the OS 256 at a time, not one draw per acquire', async () => {
    const client = await connect(url)
    const lock = client.lock(unique('wasm-nonces'))
    const got = await costOf(async () => (await lock.acquire()).release(), 300)
    await client.close()
    // 300 acquires need 300 nonces: two draws at most (one if the warm-up's
    // draw still has 255 left and the next has the rest).
    assert.ok(got.randomDraws >= 1 && got.randomDraws <= 2, JSON.stringify(got))
  })
})
