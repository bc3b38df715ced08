// Read-write locks through the Node API, on both backends: readers share,
// a writer excludes, a waiting writer blocks new readers, upgrade inside a
// read's withLock is refused, downgrade inside a write's withLock is granted.
import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'

import { connect, LockTimeoutError, UpgradeRefusedError, LockError } from 'polylock'
import { backends, unique, serverIsClean } from './helpers.mjs'

const wasm = process.env.POLYLOCK_NODE_ENTRY === 'polylock/wasm'

for (const [backend, url] of backends()) {
  describe(`read-write lock on ${backend}`, { skip: wasm && 'polylock/wasm runs the mutex only' }, () => {
    let a
    let b
    before(async () => {
      a = await connect(url)
      b = await connect(url)
    })
    after(async () => {
      await a.close()
      await b.close()
    })

    it('readers share; a writer excludes them and they it', async () => {
      const name = unique('node-rw-share')
      const [ra, rb] = [a.rwLock(name), b.rwLock(name)]
      const g1 = await ra.read.acquire({ timeoutMs: 0 })
      const g2 = await rb.read.acquire({ timeoutMs: 0 })
      await assert.rejects(rb.write.acquire({ timeoutMs: 0 }), LockTimeoutError)
      await g1.release()
      await g2.release()
      const w = await ra.write.acquire({ timeoutMs: 0 })
      assert.ok(w.fencingToken > g2.fencingToken, 'one token sequence for both halves')
      await assert.rejects(rb.read.acquire({ timeoutMs: 0 }), LockTimeoutError)
      await w.release()
      assert.ok(await serverIsClean(b, backend, url, name))
    })

    it('a waiting writer blocks new readers', async () => {
      const name = unique('node-rw-starve')
      const first = await a.rwLock(name).read.acquire()
      const writer = b.rwLock(name).write.acquire()
      await sleep(200)
      await assert.rejects(a.rwLock(name).read.acquire({ timeoutMs: 0 }), LockTimeoutError)
      await first.release()
      const w = await writer
      assert.ok(w.fencingToken > first.fencingToken)
      await w.release()
    })

    it('upgrade is refused at once inside the read; downgrade is granted inside the write', async () => {
      const name = unique('node-rw-rules')
      const rw = a.rwLock(name)
      await rw.read.withLock(async () => {
        const t0 = Date.now()
        await assert.rejects(rw.write.acquire(), (e) => {
          assert.ok(e instanceof UpgradeRefusedError && e instanceof LockError)
          assert.equal(e.code, 'POLYLOCK_UPGRADE_REFUSED')
          assert.equal(e.lockName, name)
          return true
        })
        assert.ok(Date.now() - t0 < 200, 'refused at once')
        assert.equal(rw.read.holdCount, 1)
      })
      let kept
      await rw.write.withLock(async () => {
        kept = await rw.read.acquire({ timeoutMs: 0 })
      })
      // The write hold is gone, the downgraded read is still held: writers stay out.
      await assert.rejects(b.rwLock(name).write.acquire({ timeoutMs: 0 }), LockTimeoutError)
      await kept.release()
      await (await b.rwLock(name).write.acquire({ timeoutMs: 2000 })).release()
    })
  })
}

describe('read-write lock in polylock/wasm', { skip: !wasm && 'only in the polylock/wasm run' }, () => {
  it('is refused with a RangeError naming the package to use', async () => {
    const [[, url]] = backends()
    const c = await connect(url)
    try {
      assert.throws(() => c.rwLock('x'), (e) => e instanceof RangeError && /polylock\/wasm/.test(e.message))
    } finally {
      await c.close()
    }
  })
})
