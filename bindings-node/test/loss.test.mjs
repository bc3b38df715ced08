// Loss: the server ends the hold behind the holder's back; guard.signal
// aborts with a LockLostError and release() rejects with one.
import assert from 'node:assert/strict'
import { once } from 'node:events'
import { describe, it } from 'node:test'

import { connect, LockLostError } from 'polylock'
import { backends, rawRedis, unique } from './helpers.mjs'

/** Waits for `signal` to abort (the test's own timeout bounds the wait). */
async function aborted(signal) {
  if (!signal.aborted) await once(signal, 'abort')
  return signal.reason
}

for (const [backend, url] of backends()) {
  describe(`loss on ${backend}`, () => {
    it('guard.signal aborts with LockLostError and release rejects with it', { timeout: 30_000 }, async () => {
      const client = await connect(url, { _debugFaults: true, sessionTimeoutMs: 4000 })
      const name = unique('loss')
      const lock = client.lock(name, { leaseMs: 1000 })
      const guard = await lock.acquire()
      if (backend === 'redis') {
        const raw = await rawRedis(url)
        assert.equal(await raw.command('DEL', name), 1, 'the lock is a key at its name')
        raw.close()
      } else {
        await client._debugExpireSession()
      }
      const reason = await aborted(guard.signal)
      assert.ok(reason instanceof LockLostError, String(reason))
      assert.equal(reason.lockName, name)
      assert.equal(reason.code, 'POLYLOCK_LOST')
      assert.ok(reason.reason, 'the runtime says why')
      // release() rejects with the same loss, its fields carried by the native layer.
      const released = await guard.release().then(
        () => null,
        (e) => e,
      )
      assert.ok(released instanceof LockLostError, String(released))
      assert.equal(released.lockName, name)
      assert.equal(released.reason, reason.reason)
      assert.equal(released.message, `lock ${JSON.stringify(name)} was lost: ${reason.reason}`)
      // The lock can be taken again afterwards.
      const other = await connect(url)
      const g = await other.lock(name).acquire({ timeoutMs: 15_000 })
      await g.release()
      await other.close()
      await client.close()
    })

    it('withLock rejects with LockLostError when the lock is lost under the callback', { timeout: 30_000 }, async () => {
      const client = await connect(url, { _debugFaults: true, sessionTimeoutMs: 4000 })
      const name = unique('loss-withlock')
      const lock = client.lock(name, { leaseMs: 1000 })
      await assert.rejects(
        lock.withLock(async (guard) => {
          if (backend === 'redis') {
            const raw = await rawRedis(url)
            await raw.command('DEL', name)
            raw.close()
          } else {
            await client._debugExpireSession()
          }
          await aborted(guard.signal)
        }),
        LockLostError,
      )
      await client.close()
    })
  })
}
