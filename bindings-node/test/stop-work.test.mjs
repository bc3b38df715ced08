// Stopping work when a hold is lost: every hold's `signal` (a lock's guard,
// each half of a read-write lock, a semaphore's permits) aborts when the hold
// is lost, so work given the signal (here an AbortSignal-aware sleep) rejects,
// and it does so before a second client waiting for the hold is granted; a
// release aborts nothing. The holder talks to the server through a relay that
// goes silent (a stalled network), so its lease (Redis) or its session
// (ZooKeeper) runs out on the server. Run through polylock/wasm too
// (scripts/test-wasm.sh): there, Redis and the mutex only.
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'

import { connect, LockLostError } from 'polylock'
import { backends, freezableRelay, unique } from './helpers.mjs'

const wasm = process.env.POLYLOCK_NODE_ENTRY === 'polylock/wasm'

/**
 * Each primitive: how to hold it, and what a second client waits for while
 * it is held (what it excludes: a writer, when a reader holds).
 */
const KINDS = {
  mutex: {
    hold: (client, name, options) => client.lock(name).acquire(options),
    excluded: (client, name, options) => client.lock(name).acquire(options),
  },
  'read half': {
    hold: (client, name, options) => client.rwLock(name).read.acquire(options),
    excluded: (client, name, options) => client.rwLock(name).write.acquire(options),
  },
  'write half': {
    hold: (client, name, options) => client.rwLock(name).write.acquire(options),
    excluded: (client, name, options) => client.rwLock(name).write.acquire(options),
  },
  semaphore: {
    hold: (client, name, options) => client.semaphore(name, { permits: 1 }).acquire(options),
    excluded: (client, name, options) => client.semaphore(name, { permits: 1 }).acquire(options),
  },
}

/** Short enough for the test: a 1 s lease, a 2 s session, requests given up after 300 ms. */
const HOLDER_OPTIONS = { leaseMs: 1000, sessionTimeoutMs: 2000, requestTimeoutMs: 300 }

for (const [backend, url] of backends()) {
  describe(`stop work on loss, ${backend}`, () => {
    for (const [kind, { hold, excluded }] of Object.entries(KINDS)) {
      const skip = wasm && kind !== 'mutex' && 'polylock/wasm runs the mutex only'

      it(`${kind}: the signal stops the work before the next holder is granted`, { timeout: 30_000, skip }, async () => {
        const relay = await freezableRelay(url)
        const holder = await connect(relay.url, HOLDER_OPTIONS)
        const other = await connect(url)
        const name = unique(`stop-work-${kind.replace(' ', '-')}`)
        const events = []
        try {
          const held = await hold(holder, name)
          const waiting = excluded(other, name, { timeoutMs: 20_000 }).then((next) => {
            events.push('next holder granted')
            return next
          })
          // The work: as long as it takes, unless the hold is lost.
          const work = sleep(60_000, undefined, { signal: held.signal }).then(
            () => events.push('work finished'),
            (e) => {
              events.push('work stopped')
              return e
            },
          )
          // No renewal or ping reaches the server from now on.
          relay.freeze()
          const stopped = await work
          const next = await waiting
          assert.deepEqual(events, ['work stopped', 'next holder granted'], 'the lost holder must stop before anyone else holds')
          assert.equal(stopped?.name, 'AbortError', String(stopped))
          assert.equal(stopped.cause, held.signal.reason, 'the work rejects with the signal reason as its cause')
          assert.ok(held.signal.reason instanceof LockLostError, String(held.signal.reason))
          assert.equal(held.signal.reason.lockName, name)
          assert.ok(next.fencingToken > held.fencingToken, `${next.fencingToken} > ${held.fencingToken}`)
          await next.release()
          await assert.rejects(held.release(), LockLostError)
        } finally {
          await other.close()
          relay.close()
          // Not awaited: the holder's close waits (at most 5 s) for a cleanup
          // that cannot reach the server through the closed relay, and nothing
          // here depends on it (its keys or nodes run out with the lease or session).
          void holder.close()
        }
      })

      it(`${kind}: a release aborts nothing`, { timeout: 30_000, skip }, async () => {
        const client = await connect(url)
        const held = await hold(client, unique(`stop-work-released-${kind.replace(' ', '-')}`))
        const { signal } = held
        assert.equal(await sleep(10, 'done', { signal }), 'done')
        await held.release()
        assert.equal(signal.aborted, false, 'a release is not a loss')
        assert.equal(await sleep(10, 'after', { signal }), 'after', 'work given the signal after the release runs')
        await client.close()
        assert.equal(signal.aborted, false, 'closing the client aborted a hold released before')
      })
    }
  })
}
