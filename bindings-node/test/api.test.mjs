// Every line of the API, on both backends.
import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import { createRequire } from 'node:module'

import * as polylock from 'polylock'
import { connect, LockTimeoutError, NotHeldError, ClientClosedError, LockError } from 'polylock'
import { backends, unique, serverIsClean } from './helpers.mjs'

describe('module', () => {
  it('CommonJS and ESM give the same classes', () => {
    // POLYLOCK_NODE_ENTRY: the entry this run tests (polylock/wasm, see test/wasm/as-polylock.mjs).
    const cjs = createRequire(import.meta.url)(process.env.POLYLOCK_NODE_ENTRY ?? 'polylock')
    assert.equal(cjs.connect, polylock.connect)
    assert.equal(cjs.LockTimeoutError, LockTimeoutError)
    assert.equal(polylock.default.Guard, polylock.Guard)
    assert.ok(new LockTimeoutError('x') instanceof LockError)
    assert.ok(new LockTimeoutError('x') instanceof Error)
  })
})

for (const [backend, url] of backends()) {
  describe(`API on ${backend}`, () => {
    let client
    let other
    before(async () => {
      client = await connect(url)
      other = await connect(url)
    })
    after(async () => {
      await client?.close()
      await other?.close()
    })

    it('connects and describes itself', () => {
      assert.equal(client.backend, backend)
      assert.match(client.id, /^[0-9a-f-]{36}$/)
      assert.notEqual(client.id, other.id)
    })

    it('acquire gives a guard with a bigint fencing token and a live signal; release frees the lock', async () => {
      const name = unique('basic')
      const lock = client.lock(name, { leaseMs: 30_000 })
      assert.equal(lock.name, name)
      assert.equal(lock.client, client)
      const guard = await lock.acquire({ timeoutMs: 1500 })
      assert.equal(typeof guard.fencingToken, 'bigint')
      assert.ok(guard.fencingToken > 0n)
      assert.ok(guard.signal instanceof AbortSignal)
      assert.equal(guard.signal.aborted, false)
      assert.equal(guard.lock, lock)
      assert.equal(lock.isHeldLocally, true)
      const s = await client.status(name)
      assert.equal(s.held, true)
      assert.equal(s.fencingToken, guard.fencingToken)
      await assert.rejects(other.lock(name).acquire({ timeoutMs: 0 }), LockTimeoutError)
      await guard.release()
      assert.equal(lock.isHeldLocally, false)
      assert.equal(guard.signal.aborted, false, 'a release is not a loss')
      const g2 = await other.lock(name).acquire({ timeoutMs: 5000 })
      assert.ok(g2.fencingToken > guard.fencingToken, 'tokens increase across grants')
      await g2.release()
      assert.ok(await serverIsClean(client, backend, url, name))
    })

    it('withLock runs the callback under the lock, returns its value, and releases', async () => {
      const name = unique('withlock')
      const lock = client.lock(name)
      const result = await lock.withLock(async (guard) => {
        assert.equal(typeof guard.fencingToken, 'bigint')
        assert.equal((await client.status(name)).held, true)
        assert.equal(lock.holdCount, 1)
        return 42
      })
      assert.equal(result, 42)
      assert.equal(lock.isHeldLocally, false)
      assert.equal(lock.holdCount, 0)
      assert.equal((await client.status(name)).held, false)
    })

    it('withLock releases when the callback throws and rethrows its error', async () => {
      const name = unique('withlock-throw')
      const lock = client.lock(name)
      const boom = new Error('boom')
      await assert.rejects(
        lock.withLock(async () => {
          await sleep(5)
          throw boom
        }),
        (e) => e === boom,
      )
      const g = await other.lock(name).acquire({ timeoutMs: 0 })
      await g.release()
      // A synchronous throw too.
      await assert.rejects(
        lock.withLock(() => {
          throw boom
        }),
        (e) => e === boom,
      )
      assert.equal(lock.isHeldLocally, false)
    })

    it('nested withLock and acquire in the same async chain re-enter; n holds need n releases', async () => {
      const name = unique('reentry')
      const lock = client.lock(name)
      const theirs = other.lock(name)
      await lock.withLock(async (outer) => {
        await lock.withLock(async (inner) => {
          assert.equal(inner.fencingToken, outer.fencingToken, 're-entry is the same grant')
          assert.equal(lock.holdCount, 2)
          const third = await lock.acquire({ timeoutMs: 0 })
          assert.equal(lock.holdCount, 3)
          await third.release()
        })
        assert.equal(lock.holdCount, 1)
        await assert.rejects(theirs.acquire({ timeoutMs: 0 }), LockTimeoutError, 'still held by the outer hold')
        // A nested call on another Lock object for the same name and client re-enters too.
        await client.lock(name).withLock(async () => {
          assert.equal(lock.holdCount, 2)
        })
      })
      const g = await theirs.acquire({ timeoutMs: 5000 })
      await g.release()
    })

    it('concurrent async chains exclude each other', async () => {
      const name = unique('chains')
      const lock = client.lock(name)
      let inside = 0
      let maxInside = 0
      await Promise.all(
        [1, 2, 3].map(() =>
          lock.withLock(async () => {
            inside += 1
            maxInside = Math.max(maxInside, inside)
            await sleep(20)
            inside -= 1
          }),
        ),
      )
      assert.equal(maxInside, 1)
      // Two top-level acquires are two owners: the second waits.
      const first = await lock.acquire()
      await assert.rejects(lock.acquire({ timeoutMs: 0 }), LockTimeoutError)
      await first.release()
    })

    it('timeoutMs rejects with LockTimeoutError naming the lock and leaves nothing behind', async () => {
      const name = unique('timeout')
      const holder = await client.lock(name).acquire()
      const started = Date.now()
      const err = await other
        .lock(name)
        .acquire({ timeoutMs: 200 })
        .then(
          () => null,
          (e) => e,
        )
      assert.ok(err instanceof LockTimeoutError, String(err))
      assert.ok(err instanceof LockError)
      assert.equal(err.code, 'POLYLOCK_TIMEOUT')
      assert.equal(err.lockName, name)
      assert.ok(err.message.includes(name), err.message)
      assert.ok(Date.now() - started >= 190, 'gave up early')
      await holder.release()
      assert.ok(await serverIsClean(client, backend, url, name))
    })

    it('releasing a guard twice rejects with NotHeldError and keeps the lock as it was', async () => {
      const name = unique('twice')
      const lock = client.lock(name)
      await lock.withLock(async () => {
        const inner = await lock.acquire()
        await inner.release()
        await assert.rejects(inner.release(), NotHeldError)
        assert.equal(lock.holdCount, 1, 'the outer hold is untouched')
      })
      assert.equal(lock.isHeldLocally, false)
    })

    it('close releases held locks, fails pending acquires, and later calls reject ClientClosedError', async () => {
      const name = unique('close')
      const c = await connect(url)
      const lock = c.lock(name)
      await lock.acquire()
      const blocker = await other.lock(unique('close-other')).acquire()
      const pendingFails = assert.rejects(c.lock(blocker.lock.name).acquire(), ClientClosedError)
      await sleep(50)
      await c.close()
      await pendingFails
      assert.throws(() => c.lock(name), ClientClosedError)
      await assert.rejects(lock.acquire(), ClientClosedError)
      await c.close() // idempotent
      await blocker.release()
      assert.ok(await serverIsClean(client, backend, url, name), 'close released the held lock')
    })

    it('_debugExpireSession is ZooKeeper-only', async () => {
      if (backend === 'redis') await assert.rejects(client._debugExpireSession(), RangeError)
    })
  })
}
