// 200 concurrent promises on one lock keep a read-modify-write counter exact.
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { setImmediate as yieldToLoop } from 'node:timers/promises'

import { connect } from 'polylock'
import { backends, unique } from './helpers.mjs'

for (const [backend, url] of backends()) {
  describe(`counter on ${backend}`, () => {
    it('200 concurrent withLock calls over 2 clients lose no update', async () => {
      const clients = [await connect(url), await connect(url)]
      const name = unique('counter')
      let counter = 0
      const tokens = []
      await Promise.all(
        Array.from({ length: 200 }, (_, i) =>
          clients[i % 2].lock(name).withLock(async (guard) => {
            // Loses updates unless the lock excludes the other promises.
            const v = counter
            await yieldToLoop()
            counter = v + 1
            tokens.push(guard.fencingToken)
          }),
        ),
      )
      assert.equal(counter, 200)
      assert.equal(new Set(tokens).size, 200, 'each grant has its own token')
      for (const c of clients) await c.close()
    })

    it('200 concurrent acquire/release pairs lose no update', async () => {
      const client = await connect(url)
      const lock = client.lock(unique('counter-acquire'))
      let counter = 0
      await Promise.all(
        Array.from({ length: 200 }, async () => {
          const g = await lock.acquire()
          const v = counter
          await yieldToLoop()
          counter = v + 1
          await g.release()
        }),
      )
      assert.equal(counter, 200)
      await client.close()
    })
  })
}
