// `await using` (TypeScript >= 5.2 compiles it for Node 20), typed against index.d.ts.
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'

import { connect, LockTimeoutError, type Guard } from 'polylock'
import { backends, unique } from '../helpers.mjs'

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
