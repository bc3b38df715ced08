// `await using` of a leadership (TypeScript >= 5.2 compiles it for Node 20), typed against index.d.ts.
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'

import { connect, type Election, type Leader, type Leadership } from 'polylock'
import { backends, unique } from '../helpers.mjs'

const wasm = process.env.POLYLOCK_NODE_ENTRY === 'polylock/wasm'
for (const [backend, url] of backends()) {
  describe(`await using of a leadership on ${backend}`, { skip: wasm && 'polylock/wasm runs the mutex only' }, () => {
    it('resigns at the end of the block, and the next participant leads', async () => {
      await using client = await connect(url)
      const election: Election = client.election(unique('using-election'))
      let term: bigint
      {
        await using lead: Leadership = await election.campaign({ timeoutMs: 5000 })
        term = lead.term
        const leader: Leader | null = await election.leader()
        assert.equal(leader?.participant, lead.participant)
        assert.equal(lead.signal.aborted, false)
      }
      assert.equal(await election.leader(), null, 'still led after the block')
      await using next = await election.campaign({ timeoutMs: 5000 })
      assert.ok(next.term > term)
    })
  })
}
