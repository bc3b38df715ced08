// Leader elections through the Node API on the real servers, both backends:
// one leader at a time, the next leads after a resign, the term (a bigint)
// grows, leader() agrees with the leadership, a campaign whose signal aborts
// leaves nothing on the server, a lost leadership aborts its signal and its
// resign rejects with LockLostError, and close() resigns what is left. On
// ZooKeeper the participants are Curator LeaderLatch nodes; on Redis the
// leader holds the name's mutex keys.
import assert from 'node:assert/strict'
import { once } from 'node:events'
import { describe, it } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'

import { connect, Election, Leadership, LockLostError, LockTimeoutError, NotHeldError } from 'polylock'
import { backends, eventually, rawRedis, redisLeftovers, unique, zkChildren } from './helpers.mjs'

const wasm = process.env.POLYLOCK_NODE_ENTRY === 'polylock/wasm'

function isAbortError(e) {
  return e instanceof DOMException && e.name === 'AbortError'
}

/** What the server still has of election `name`: Redis keys, or ZooKeeper participant nodes. */
function leftovers(backend, url, name) {
  return backend === 'zookeeper' ? zkChildren(url, name) : redisLeftovers(url, name)
}

for (const [backend, url] of backends()) {
  describe(`election on ${backend}`, { skip: wasm && 'polylock/wasm runs the mutex only' }, () => {
    it('one leader at a time; the next leads after a resign, with a larger term', { timeout: 30_000 }, async () => {
      const [a, b] = [await connect(url), await connect(url)]
      try {
        const name = unique('election')
        const [ours, theirs] = [a.election(name), b.election(name)]
        assert.ok(ours instanceof Election)
        assert.equal(await ours.leader(), null, 'a leader before any campaign')

        const first = await ours.campaign()
        assert.ok(first instanceof Leadership)
        assert.equal(typeof first.term, 'bigint')
        const leader = await theirs.leader()
        assert.equal(leader.participant, first.participant)
        if (backend === 'zookeeper') {
          assert.equal(leader.term, first.term, 'the term as the server records it')
          const children = await zkChildren(url, name)
          assert.ok(children.length === 1 && children[0].includes('-latch-'), `not a LeaderLatch node: ${children}`)
        }
        await assert.rejects(theirs.campaign({ timeoutMs: 0 }), LockTimeoutError)

        let secondLed = false
        const waiting = theirs.campaign({ timeoutMs: 20_000 }).then((l) => ((secondLed = true), l))
        await sleep(300)
        assert.equal(secondLed, false, 'a second leader while the first leads')
        await first.resign()
        await assert.rejects(first.resign(), NotHeldError)

        const second = await waiting
        assert.ok(second.term > first.term, 'the term did not grow')
        const now = await ours.leader()
        assert.equal(now.participant, second.participant)
        assert.notEqual(now.participant, first.participant)
        await second.resign()
        assert.equal(await ours.leader(), null, 'a leader after every resign')
        assert.deepEqual(await leftovers(backend, url, name), [], 'left behind on the server')
      } finally {
        await a.close()
        await b.close()
      }
    })

    it('withLeadership resigns after the callback; two campaigns of one client are two participants', async () => {
      const client = await connect(url)
      try {
        const election = client.election(unique('election-with'))
        const term = await election.withLeadership(async (lead) => {
          await assert.rejects(election.campaign({ timeoutMs: 200 }), LockTimeoutError)
          return lead.term
        })
        const next = await election.campaign({ timeoutMs: 5000 })
        assert.ok(next.term > term)
        await next[Symbol.asyncDispose]()
        await next[Symbol.asyncDispose]() // resigned once: a no-op
        assert.equal(await election.leader(), null)
      } finally {
        await client.close()
      }
    })

    it('aborting the signal of a waiting campaign leaves nothing on the server', { timeout: 30_000 }, async () => {
      const [a, b] = [await connect(url), await connect(url)]
      try {
        const name = unique('election-abort')
        const leading = await a.election(name).campaign()
        const controller = new AbortController()
        const waiting = b.election(name).campaign({ signal: controller.signal })
        await sleep(300)
        controller.abort(new Error('shutting down'))
        const err = await waiting.then(
          () => null,
          (e) => e,
        )
        assert.ok(isAbortError(err), String(err))
        await leading.resign()
        assert.ok(
          await eventually(async () => (await leftovers(backend, url, name)).length === 0),
          `the withdrawn participant left ${await leftovers(backend, url, name)}`,
        )
        assert.equal(await b.election(name).leader(), null, 'the withdrawn participant led')
        await assert.rejects(b.election(name).campaign({ signal: AbortSignal.abort() }), isAbortError)
      } finally {
        await a.close()
        await b.close()
      }
    })

    it('a lost leadership aborts its signal and its resign rejects with LockLostError', { timeout: 30_000 }, async () => {
      const client = await connect(url, { _debugFaults: true, sessionTimeoutMs: 4000 })
      try {
        const name = unique('election-lost')
        const lead = await client.election(name, { leaseMs: 1000 }).campaign()
        const { signal } = lead
        if (backend === 'redis') {
          const raw = await rawRedis(url)
          assert.equal(await raw.command('DEL', name), 1, 'the leader holds the mutex key at its name')
          raw.close()
        } else {
          await client._debugExpireSession()
        }
        if (!signal.aborted) await once(signal, 'abort')
        assert.ok(signal.reason instanceof LockLostError, String(signal.reason))
        assert.equal(signal.reason.lockName, name)
        assert.match(signal.reason.message, /^leadership of election ".*" was lost: /)
        await assert.rejects(lead.resign(), LockLostError)
        const next = await client.election(name).campaign({ timeoutMs: 15_000 })
        assert.ok(next.term > lead.term)
        await next.resign()
      } finally {
        await client.close()
      }
    })

    it('close() resigns the leaderships left, and a resign after it rejects', async () => {
      const [a, b] = [await connect(url), await connect(url)]
      const name = unique('election-close')
      const lead = await a.election(name).campaign()
      await a.close()
      await assert.rejects(lead.resign(), (e) => e.code === 'POLYLOCK_CLOSED')
      const next = await b.election(name).campaign({ timeoutMs: 5000 })
      await next.resign()
      await b.close()
    })
  })
}

describe('election in polylock/wasm', { skip: !wasm && 'only in the polylock/wasm run' }, () => {
  it('is refused with a RangeError naming polylock/wasm', async () => {
    const [[, wasmUrl]] = backends()
    const c = await connect(wasmUrl)
    try {
      assert.throws(() => c.election('x'), (e) => e instanceof RangeError && /polylock\/wasm/.test(e.message))
    } finally {
      await c.close()
    }
  })
})
