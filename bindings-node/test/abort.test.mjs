// An AbortSignal cancels a waiting acquire: AbortError once nothing of it is left on the server.
import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'

import { connect } from 'polylock'
import { backends, eventually, unique, serverIsClean } from './helpers.mjs'

function isAbortError(e) {
  return e instanceof DOMException && e.name === 'AbortError'
}

for (const [backend, url] of backends()) {
  describe(`abort on ${backend}`, () => {
    let holder
    let waiter
    before(async () => {
      holder = await connect(url)
      waiter = await connect(url)
    })
    after(async () => {
      await holder?.close()
      await waiter?.close()
    })

    it('aborting a waiting acquire rejects with AbortError and leaves nothing behind', async () => {
      const name = unique('abort')
      const held = await holder.lock(name).acquire()
      const ac = new AbortController()
      const waiting = waiter.lock(name).acquire({ signal: ac.signal })
      // Let the waiter reach the server (queued on Redis, a node on ZooKeeper).
      await sleep(200)
      const reason = new Error('user gave up')
      ac.abort(reason)
      const err = await waiting.then(
        () => null,
        (e) => e,
      )
      assert.ok(isAbortError(err), String(err))
      assert.equal(err.cause, reason)
      // Withdrawn before the promise settled: looked at at once, only the holder is there.
      const status = await holder.status(name)
      assert.equal(status.waiters, 0, `the aborted waiter is still queued (${status.waiters} waiting)`)
      await held.release()
      assert.ok(await serverIsClean(holder, backend, url, name), 'the aborted waiter left something on the server')
      // And the lock is usable: the aborted owner does not hold it.
      const g = await holder.lock(name).acquire({ timeoutMs: 5000 })
      await g.release()
    })

    it('an aborted acquire settles only once it has left the server', async () => {
      // Looked at at once over the holder's connection, ten times: a
      // withdrawal left to the background loses that race now and then.
      const name = unique('abort-at-once')
      const held = await holder.lock(name).acquire()
      const waiters = async () => (await holder.status(name)).waiters
      for (let round = 0; round < 10; round++) {
        const ac = new AbortController()
        const waiting = waiter
          .lock(name)
          .acquire({ signal: ac.signal })
          .then(
            () => null,
            (e) => e,
          )
        assert.ok(await eventually(async () => (await waiters()) > 0), 'the waiter never queued')
        ac.abort()
        assert.ok(isAbortError(await waiting))
        assert.equal(await waiters(), 0, `round ${round}: the aborted waiter is still queued`)
      }
      await held.release()
      assert.ok(await serverIsClean(holder, backend, url, name))
    })

    it('AbortSignal.timeout works and an already-aborted signal rejects at once', async () => {
      const name = unique('abort-timeout')
      const held = await holder.lock(name).acquire()
      const err = await waiter
        .lock(name)
        .acquire({ signal: AbortSignal.timeout(100) })
        .then(
          () => null,
          (e) => e,
        )
      assert.ok(isAbortError(err), String(err))
      assert.equal(err.cause?.name, 'TimeoutError')
      await assert.rejects(waiter.lock(name).withLock(async () => {}, { signal: AbortSignal.abort() }), isAbortError)
      await held.release()
      assert.ok(await serverIsClean(holder, backend, url, name))
    })

    it('a signal that never aborts does not disturb the grant', async () => {
      const name = unique('abort-never')
      const ac = new AbortController()
      const g = await waiter.lock(name).acquire({ signal: ac.signal })
      ac.abort() // after the grant: nothing happens to the hold
      assert.equal(g.signal.aborted, false)
      assert.equal((await holder.status(name)).held, true)
      await g.release()
    })
  })
}
