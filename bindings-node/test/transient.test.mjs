// A server that keeps refusing (a busy script on the second Redis) until the
// timeout passes rejects with LockUnavailableError naming the server's reply.
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'

import { connect, LockTimeoutError, LockUnavailableError } from 'polylock'
import { rawRedis, unique } from './helpers.mjs'

const url = process.env.POLYLOCK_TEST_REDIS2

/** Starts a script spinning on the server; resolves once the server answers BUSY. */
async function makeBusy() {
  const admin = await rawRedis(url)
  await admin.command('CONFIG', 'SET', 'busy-reply-threshold', '100')
  admin.close()
  const spinner = await rawRedis(url)
  spinner.command('EVAL', 'while true do end', '0').catch(() => {}) // killed at the end
  for (;;) {
    const probe = await rawRedis(url)
    try {
      await probe.command('PING')
    } catch (e) {
      if (/^BUSY/.test(e.message)) return spinner
    } finally {
      probe.close()
    }
    await sleep(10)
  }
}

async function kill(spinner) {
  for (;;) {
    const admin = await rawRedis(url)
    try {
      await admin.command('SCRIPT', 'KILL')
      break
    } catch (e) {
      if (/^NOTBUSY/.test(e.message)) break
    } finally {
      admin.close()
    }
    await sleep(10)
  }
  spinner.close()
}

describe('a refusing server', { skip: url ? false : 'POLYLOCK_TEST_REDIS2 not set' }, () => {
  it('rejects at the timeout with LockUnavailableError naming BUSY', async () => {
    const client = await connect(url)
    const name = unique('busy')
    const spinner = await makeBusy()
    const started = performance.now()
    let error
    try {
      await client.lock(name).acquire({ timeoutMs: 1000 })
    } catch (e) {
      error = e
    } finally {
      await kill(spinner)
    }
    const waited = performance.now() - started
    assert.ok(error instanceof LockUnavailableError, `expected LockUnavailableError, got ${error}`)
    assert.ok(error instanceof LockTimeoutError)
    assert.equal(error.code, 'POLYLOCK_UNAVAILABLE')
    assert.equal(error.lockName, name)
    assert.match(error.reply, /^BUSY /)
    assert.ok(waited >= 950, `rejected at once (${waited} ms), not at the timeout`)
    await client.close()
  })
})
