// Counting semaphores through the Node API, on the real Redis (Redisson's
// RPermitExpirableSemaphore layout) and ZooKeeper (Curator's
// InterProcessSemaphoreV2 layout): permits counted, k at a time, timeouts,
// AbortSignal, a PermitsMismatchError with its fields, bad counts, loss, and
// what close and garbage collection do. The server is read directly: on
// Redis `{NAME}:timeout` holds one member per held permit and the waiters
// queue in polylock_semqueue:{NAME}; on ZooKeeper NAME/leases has one child
// per held permit and the waiters queue in Curator's mutex at NAME/locks.
import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import { setFlagsFromString } from 'node:v8'
import { runInNewContext } from 'node:vm'

import {
  connect,
  LockError,
  LockLostError,
  LockTimeoutError,
  NotHeldError,
  Permits,
  PermitsMismatchError,
  Semaphore,
} from 'polylock'
import {
  backends,
  eventually,
  expireRedisPermits,
  redisPermitsHeld,
  semaphoreLeftovers,
  unique,
  zkChildren,
} from './helpers.mjs'

const wasm = process.env.POLYLOCK_NODE_ENTRY === 'polylock/wasm'

function isAbortError(e) {
  return e instanceof DOMException && e.name === 'AbortError'
}

function isInvalidOption(e) {
  return e instanceof RangeError && e.code === 'ERR_POLYLOCK_INVALID_OPTION'
}

/**
 * How the suite reads a backend's server: `held(name)`, the permits held;
 * `queued(name)`, what waiters leave (Redis: the polylock_semqueue keys;
 * ZooKeeper: Curator's mutex nodes under NAME/locks); `clean(name)`, true
 * once neither is left (the free-permit counter, or the NAME/polylock_permits
 * record of N, stays).
 */
function serverOf(backend, url) {
  if (backend === 'zookeeper') {
    const held = async (name) => (await zkChildren(url, `${name}/leases`)).length
    const queued = (name) => zkChildren(url, `${name}/locks`)
    const clean = (name) => eventually(async () => (await held(name)) === 0 && (await queued(name)).length === 0, 3000)
    return { held, queued, clean }
  }
  const held = (name) => redisPermitsHeld(url, name)
  const queued = async (name) => (await semaphoreLeftovers(url, name)).filter((k) => !k.endsWith('permit ids)'))
  const clean = (name) => eventually(async () => (await semaphoreLeftovers(url, name)).length === 0, 3000)
  return { held, queued, clean }
}

for (const [backend, url] of backends()) {
  const { held: heldOnServer, queued, clean } = serverOf(backend, url)
  const redisOnly = backend !== 'redis' && "Redis only: forces the loss through Redisson's permit expiries"
  describe(`semaphore on ${backend}`, { skip: wasm && 'polylock/wasm runs the mutex only' }, () => {
    let a
    let b
    before(async () => {
      a = await connect(url)
      b = await connect(url)
    })
    after(async () => {
      await a?.close()
      await b?.close()
    })

    it('counts permits across clients; each grant has a larger token', async () => {
      const name = unique('sem-count')
      const [sa, sb] = [a.semaphore(name, { permits: 2 }), b.semaphore(name, { permits: 2 })]
      assert.ok(sa instanceof Semaphore)
      assert.equal(sa.name, name)
      assert.equal(sa.permits, 2)
      assert.equal(sa.client, a)
      const p1 = await sa.acquire()
      const p2 = await sb.acquire({ timeoutMs: 0 })
      assert.ok(p1 instanceof Permits)
      assert.equal(p1.count, 1)
      assert.equal(p1.semaphore, sa)
      assert.equal(typeof p1.fencingToken, 'bigint')
      assert.ok(p2.fencingToken > p1.fencingToken)
      assert.equal(await heldOnServer(name), 2)
      // Both permits are taken, also for another grant of the same client.
      await assert.rejects(sa.acquire({ timeoutMs: 0 }), LockTimeoutError)
      await p1.release()
      assert.equal(await heldOnServer(name), 1)
      const p3 = await sa.acquire({ timeoutMs: 0 })
      assert.ok(p3.fencingToken > p2.fencingToken)
      await p2.release()
      await p3.release()
      assert.ok(await clean(name))
    })

    it('takes k permits at once, and waits until k are free', async () => {
      const name = unique('sem-k')
      const [sa, sb] = [a.semaphore(name, { permits: 3 }), b.semaphore(name, { permits: 3 })]
      const two = await sa.acquire({ count: 2 })
      assert.equal(two.count, 2)
      assert.equal(await heldOnServer(name), 2)
      await assert.rejects(sb.acquire({ count: 2, timeoutMs: 0 }), LockTimeoutError)
      const waiting = sb.acquire({ count: 2, timeoutMs: 5000 })
      await sleep(200)
      await two.release()
      const granted = await waiting
      assert.equal(granted.count, 2)
      assert.ok(granted.fencingToken > two.fencingToken)
      const one = await sa.acquire({ count: 1, timeoutMs: 0 })
      await assert.rejects(sa.acquire({ timeoutMs: 0 }), LockTimeoutError)
      await granted.release()
      await one.release()
      const all = await sb.acquire({ count: 3, timeoutMs: 0 })
      assert.equal(await heldOnServer(name), 3)
      await all.release()
      assert.ok(await clean(name))
    })

    it('times out after timeoutMs and leaves no waiter behind', async () => {
      const name = unique('sem-timeout')
      const held = await a.semaphore(name, { permits: 1 }).acquire()
      const t0 = Date.now()
      await assert.rejects(b.semaphore(name, { permits: 1 }).acquire({ timeoutMs: 300 }), (e) => {
        assert.ok(e instanceof LockTimeoutError, String(e))
        assert.equal(e.code, 'POLYLOCK_TIMEOUT')
        assert.equal(e.lockName, name)
        return true
      })
      assert.ok(Date.now() - t0 >= 250, `returned after ${Date.now() - t0} ms`)
      assert.equal(await heldOnServer(name), 1)
      await held.release()
      assert.ok(await clean(name))
    })

    it('an aborted wait rejects with AbortError and takes nothing, then or later', async () => {
      const name = unique('sem-abort')
      const held = await a.semaphore(name, { permits: 2 }).acquire({ count: 2 })
      const sb = b.semaphore(name, { permits: 2 })
      const ac = new AbortController()
      const waiting = sb.acquire({ signal: ac.signal })
      await sleep(200)
      const reason = new Error('gave up')
      ac.abort(reason)
      const err = await waiting.then(
        () => null,
        (e) => e,
      )
      assert.ok(isAbortError(err), String(err))
      assert.equal(err.cause, reason)
      // The waiter's queue entry is gone, and the permits freed next are not given to it.
      assert.equal(await heldOnServer(name), 2)
      assert.deepEqual(await queued(name), [])
      await held.release()
      await sleep(200)
      assert.ok(await clean(name))
      const all = await sb.acquire({ count: 2, timeoutMs: 0 })
      await all.release()
      // An already aborted signal rejects at once, without asking the server.
      const gone = AbortSignal.abort()
      await assert.rejects(sb.acquire({ signal: gone }), isAbortError)
      assert.ok(await clean(name))
    })

    it('another number of permits is a PermitsMismatchError with its fields, and takes nothing', async () => {
      const name = unique('sem-mismatch')
      const held = await a.semaphore(name, { permits: 3 }).acquire()
      const other = b.semaphore(name, { permits: 4 })
      await assert.rejects(other.acquire({ timeoutMs: 1000 }), (e) => {
        assert.ok(e instanceof PermitsMismatchError && e instanceof LockError, String(e))
        assert.equal(e.name, 'PermitsMismatchError')
        assert.equal(e.code, 'POLYLOCK_PERMITS_MISMATCH')
        assert.equal(e.lockName, name)
        assert.equal(e.server, 3)
        assert.equal(e.ours, 4)
        return true
      })
      assert.equal(await heldOnServer(name), 1)
      // The two free permits are still there for a client that agrees.
      const two = await b.semaphore(name, { permits: 3 }).acquire({ count: 2, timeoutMs: 0 })
      await two.release()
      await held.release()
      assert.ok(await clean(name))
    })

    it('a bad count or number of permits is the invalid-option RangeError, and touches nothing', async () => {
      const name = unique('sem-bad')
      const sem = a.semaphore(name, { permits: 3 })
      for (const count of [0, 4, 1.5, -1, NaN, Infinity, 2 ** 32]) {
        await assert.rejects(sem.acquire({ count }), (e) => isInvalidOption(e) && e.message.length > 0, `count ${count}`)
        await assert.rejects(sem.acquire({ count, timeoutMs: 0, signal: new AbortController().signal }), isInvalidOption)
      }
      await assert.rejects(sem.acquire({ count: '1' }), TypeError)
      await assert.rejects(sem.acquire({ timeoutMs: -1 }), RangeError)
      await assert.rejects(sem.withPermits(() => {}, { count: 0 }), isInvalidOption)
      assert.throws(() => a.semaphore(name, { permits: 0 }), isInvalidOption)
      assert.throws(() => a.semaphore(name, { permits: 2.5 }), isInvalidOption)
      assert.throws(() => a.semaphore(name, { permits: -3 }), isInvalidOption)
      assert.throws(() => a.semaphore(name, { permits: 3, leaseMs: 10 }), RangeError)
      assert.throws(() => a.semaphore(name), TypeError)
      assert.throws(() => a.semaphore(name, { permits: '3' }), TypeError)
      assert.throws(() => a.semaphore('', { permits: 3 }), (e) => e instanceof TypeError && e.code === 'ERR_POLYLOCK_INVALID_NAME')
      assert.equal(await heldOnServer(name), 0)
      assert.ok(await clean(name))
      // The semaphore still works: all three at once.
      await (await sem.acquire({ count: 3, timeoutMs: 0 })).release()
    })

    it('withPermits releases after the callback, also when it throws; asyncDispose releases', async () => {
      const name = unique('sem-with')
      const sem = a.semaphore(name, { permits: 2 })
      const got = await sem.withPermits(
        async (p) => {
          assert.equal(p.count, 2)
          assert.equal(await heldOnServer(name), 2)
          return 'result'
        },
        { count: 2 },
      )
      assert.equal(got, 'result')
      assert.equal(await heldOnServer(name), 0)
      await assert.rejects(
        sem.withPermits(async () => {
          assert.equal(await heldOnServer(name), 1)
          throw new Error('inside')
        }),
        /inside/,
      )
      assert.equal(await heldOnServer(name), 0)
      const p = await sem.acquire()
      await p[Symbol.asyncDispose]()
      assert.equal(await heldOnServer(name), 0)
      await p[Symbol.asyncDispose]() // already released: nothing to do
      await assert.rejects(p.release(), NotHeldError)
      assert.ok(await clean(name))
    })

    it('a second release is a NotHeldError', async () => {
      const name = unique('sem-twice')
      const p = await a.semaphore(name, { permits: 1 }).acquire()
      await p.release()
      await assert.rejects(p.release(), (e) => e instanceof NotHeldError && e.lockName === name)
    })

    it('permits ended on the server abort the signal with LockLostError and free the permit', { skip: redisOnly }, async () => {
      const name = unique('sem-lost')
      const short = await connect(url, { leaseMs: 1000 })
      try {
        const p = await short.semaphore(name, { permits: 1 }).acquire()
        assert.equal(p.signal.aborted, false)
        assert.equal(await expireRedisPermits(url, name), 1)
        assert.ok(await eventually(() => p.signal.aborted, 5000), 'not told of the loss')
        assert.ok(p.signal.reason instanceof LockLostError)
        assert.equal(p.signal.reason.lockName, name)
        assert.match(p.signal.reason.message, /permits of semaphore/)
        const next = await b.semaphore(name, { permits: 1 }).acquire({ timeoutMs: 5000 })
        assert.ok(next.fencingToken > p.fencingToken)
        await assert.rejects(p.release(), LockLostError)
        await next.release()
        assert.ok(await clean(name))
      } finally {
        await short.close()
      }
    })

    it('close releases the permits still held; a release after it is ClientClosedError', async () => {
      const name = unique('sem-close')
      const c = await connect(url)
      const p = await c.semaphore(name, { permits: 2 }).acquire({ count: 2 })
      assert.equal(await heldOnServer(name), 2)
      await c.close()
      assert.ok(await clean(name))
      await assert.rejects(p.release(), (e) => e.code === 'POLYLOCK_CLOSED')
      assert.throws(() => c.semaphore(name, { permits: 2 }), (e) => e.code === 'POLYLOCK_CLOSED')
      await (await b.semaphore(name, { permits: 2 }).acquire({ count: 2, timeoutMs: 0 })).release()
    })

    it('a guard that is garbage-collected unreleased keeps its permits until close', async () => {
      setFlagsFromString('--expose-gc')
      const gc = runInNewContext('gc')
      const name = unique('sem-gc')
      const c = await connect(url)
      try {
        // Only a weak reference survives this function.
        const weak = await (async () => new WeakRef(await c.semaphore(name, { permits: 1 }).acquire()))()
        // A deref keeps its target alive until the end of the job: collect in the next one.
        for (let i = 0; i < 20; i++) {
          await sleep(10)
          gc()
          await sleep(10)
          if (weak.deref() === undefined) break
        }
        assert.equal(weak.deref(), undefined, 'the guard was not collected: the test proves nothing')
        await sleep(300)
        assert.equal(await heldOnServer(name), 1, 'the collected guard gave its permit back')
      } finally {
        await c.close()
      }
      assert.ok(await clean(name))
    })
  })
}

describe('semaphore in polylock/wasm', { skip: !wasm && 'only in the polylock/wasm run' }, () => {
  it('is refused with a RangeError naming the package to use', async () => {
    const [[, wasmUrl]] = backends()
    const c = await connect(wasmUrl)
    try {
      assert.throws(() => c.semaphore('x', { permits: 2 }), (e) => e instanceof RangeError && /polylock\/wasm/.test(e.message))
    } finally {
      await c.close()
    }
  })
})
