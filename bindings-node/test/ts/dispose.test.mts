// `await using` (TypeScript >= 5.2 compiles it for Node 20), typed against index.d.ts.
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'

import { connect, LockTimeoutError, PermitsMismatchError, type Guard, type Permits, type Semaphore } from 'polylock'
import { backends, redisPermitsHeld, unique } from '../helpers.mjs'

for (const [backend, url] of backends()) {
  describe(`await using on ${backend}`, () => {
    it('releases the guard and closes the client at the end of the block', async () => {
      const name = unique('using')
      await using other = await connect(url)
      let token: bigint
      {
        await using client = await connect(url)
        {
          await using g: Guard = await client.lock(name).acquire()
          token = g.fencingToken
          await assert.rejects(other.lock(name).acquire({ timeoutMs: 0 }), LockTimeoutError)
        }
        // Released at the end of the inner block, before the client closes.
        const g2 = await other.lock(name).acquire({ timeoutMs: 5000 })
        assert.ok(g2.fencingToken > token)
        await g2.release()
        await using held = await client.lock(name).acquire()
        void held
      }
      // The client closed (releasing `held` if it was still there).
      const g3 = await other.lock(name).acquire({ timeoutMs: 5000 })
      await g3.release()
    })

    it('releases when the block throws', async () => {
      const name = unique('using-throw')
      await using client = await connect(url)
      await assert.rejects(async () => {
        await using g = await client.lock(name).acquire()
        void g
        throw new Error('inside')
      }, /inside/)
      assert.equal((await client.status(name)).held, false)
    })
  })
}

const wasm = process.env.POLYLOCK_NODE_ENTRY === 'polylock/wasm'
for (const [backend, url] of backends().filter(([b]) => b === 'redis')) {
  describe(`await using of permits on ${backend}`, { skip: wasm && 'polylock/wasm runs the mutex only' }, () => {
    it('gives the permits back at the end of the block', async () => {
      const name = unique('using-sem')
      await using client = await connect(url)
      const sem: Semaphore = client.semaphore(name, { permits: 3, leaseMs: 5000 })
      {
        await using p: Permits = await sem.acquire({ count: 2, timeoutMs: 1000 })
        const count: number = p.count
        const token: bigint = p.fencingToken
        assert.equal(count, 2)
        assert.ok(token > 0n)
        assert.equal(await redisPermitsHeld(url, name), 2)
      }
      assert.equal(await redisPermitsHeld(url, name), 0)
      const n: number = await sem.withPermits(async (p) => p.count, { count: 3 })
      assert.equal(n, 3)
      await assert.rejects(client.semaphore(name, { permits: 4 }).acquire(), (e) => {
        const m = e as PermitsMismatchError
        return m instanceof PermitsMismatchError && m.server === 3 && m.ours === 4
      })
    })
  })
}
