// polylock/wasm: the subscriber connection dropping and coming back is
// reported to the table (Disconnected, then Connected once resubscribed),
// so a waiter whose wake-up message was published while it was gone is
// still granted at once, not at its next queue refresh (a third of the
// 30 s waiter TTL).
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'

import { connect } from 'polylock/wasm'
import { eventually, rawRedis, unique } from '../helpers.mjs'

const url = process.env.POLYLOCK_TEST_REDIS
if (!url) throw new Error('POLYLOCK_TEST_REDIS is not set: eval "$(scripts/services env)" first')

async function redis(...args) {
  const raw = await rawRedis(url)
  try {
    return await raw.command(...args)
  } finally {
    raw.close()
  }
}

describe('polylock/wasm: pub/sub connection lost', () => {
  it('a waiter whose wake-up was missed while its subscriber reconnected is granted at once', { timeout: 30_000 }, async () => {
    const holder = await connect(url)
    const waiter = await connect(url)
    const name = unique('wasm-resubscribe')
    const held = await holder.lock(name).acquire()
    const waiting = waiter.lock(name).acquire({ timeoutMs: 20_000 })
    assert.ok(await eventually(async () => (await redis('ZCARD', `polylock_queue:{${name}}`)) === 1), 'the waiter queued')
    // Drop every pub/sub connection (only the waiter's is subscribed), and
    // release before it can have resubscribed: the wake-up goes to nobody.
    assert.ok((await redis('CLIENT', 'KILL', 'TYPE', 'pubsub')) >= 1, 'a subscriber connection was dropped')
    const releasedAt = performance.now()
    await held.release()
    const guard = await waiting
    const waited = performance.now() - releasedAt
    assert.ok(waited < 3000, `granted ${Math.round(waited)} ms after the release: the reconnection was not reported`)
    assert.ok(guard.fencingToken > held.fencingToken)
    await guard.release()
    await Promise.all([holder.close(), waiter.close()])
  })
})
