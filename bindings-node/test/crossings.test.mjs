// Hot-path cost guard (issue 16), counted and not timed: how often an
// uncontended acquire+release crosses between JavaScript and the napi addon.
// The API (api.js) is built here over a counting proxy of the addon, so
// every call into it, every getter of its objects, every promise it settles
// and every callback it calls is counted. The settlements are the costly
// crossings: each is a hop from a runtime thread back to the event loop.
//
// The bounds are today's counts; a change that adds a crossing to the hot
// path fails here and must say why.
import assert from 'node:assert/strict'
import { createRequire } from 'node:module'
import { describe, it } from 'node:test'

import { backends, unique } from './helpers.mjs'

const require = createRequire(import.meta.url)
const build = require('../api.js')
// The napi addon's crossings; polylock/wasm's run (test-wasm.sh) has no
// addon, and its JS driver calls into the module on the event loop itself.
const wasm = process.env.POLYLOCK_NODE_ENTRY === 'polylock/wasm'
const addon = wasm ? null : require('../native.js')
const skip = wasm && 'the napi addon only; polylock/wasm crosses no thread'

/** The addon behind a proxy that counts crossings in `counts`. */
function counted(native, counts) {
  const proxies = new WeakMap() // native object -> its proxy
  const targets = new WeakMap() // proxy -> native object
  const unwrap = (v) => targets.get(v) ?? v
  const back = (f) => (...xs) => {
    counts.callbacks++
    return f(...xs)
  }
  const args = (xs) => xs.map((x) => (typeof x === 'function' ? back(x) : unwrap(x)))
  const result = (v) =>
    v instanceof Promise
      ? v.then(
          (x) => {
            counts.settled++
            return wrap(x)
          },
          (e) => {
            counts.settled++
            throw e
          },
        )
      : wrap(v)
  const getter = (t, prop) => {
    for (let o = t; o; o = Object.getPrototypeOf(o)) {
      const d = Object.getOwnPropertyDescriptor(o, prop)
      if (d) return d.get
    }
    return undefined
  }
  function wrap(v) {
    if (v === null || (typeof v !== 'object' && typeof v !== 'function')) return v
    if (proxies.has(v)) return proxies.get(v)
    const p = new Proxy(v, {
      get(t, prop) {
        if (typeof prop !== 'symbol' && getter(t, prop)) counts.calls++
        const x = Reflect.get(t, prop, t)
        return typeof x === 'function' && typeof prop !== 'symbol' ? wrap(x) : x
      },
      apply(t, self, xs) {
        counts.calls++
        return result(Reflect.apply(t, unwrap(self), args(xs)))
      },
      construct(t, xs) {
        counts.calls++
        return wrap(Reflect.construct(t, args(xs)))
      },
    })
    proxies.set(v, p)
    targets.set(p, v)
    return p
  }
  return wrap(native)
}

/** Crossings of `op`, measured after a warm-up run of it. */
async function crossingsOf(counts, op) {
  await op()
  const before = { ...counts }
  await op()
  return Object.fromEntries(Object.keys(counts).map((k) => [k, counts[k] - before[k]]))
}

for (const [backend, url] of backends()) {
  describe(`JS <-> native crossings on ${backend}`, { skip }, () => {
    it('an uncontended acquire+release crosses 4 times in and settles 2 promises', async () => {
      const counts = { calls: 0, settled: 0, callbacks: 0 }
      const polylock = build(counted(addon, counts))
      const client = await polylock.connect(url)
      const lock = client.lock(unique('crossings'))
      const got = await crossingsOf(counts, async () => {
        const g = await lock.acquire()
        await g.release()
      })
      await client.close()
      // In: nextOwnerId, acquire, the guard's fencingToken getter, release.
      // Out: the acquire's and the release's promises; no callback (nobody
      // read guard.signal, so no loss listener was registered).
      assert.deepEqual(got, { calls: 4, settled: 2, callbacks: 0 }, JSON.stringify(got))
    })

    it('withLock crosses no more than acquire+release', async () => {
      const counts = { calls: 0, settled: 0, callbacks: 0 }
      const polylock = build(counted(addon, counts))
      const client = await polylock.connect(url)
      const lock = client.lock(unique('crossings-with'))
      const got = await crossingsOf(counts, () => lock.withLock(async () => {}))
      await client.close()
      assert.deepEqual(got, { calls: 4, settled: 2, callbacks: 0 }, JSON.stringify(got))
    })
  })
}

// The runtime's thread, kept awake in a busy spell (polylock::blocking::
// hot_worker), takes each call and its reply without waking: counted as the
// thread's sleeps and wake-ups (tokio's park/unpark count) per call.
const PAIRS = 200
// What is counted is an uncontended machine's. Another process taking the
// cores pauses spinning for a while (polylock::blocking::spin::yield_core:
// a batch with a contended yield), and a slow spell of the machine may miss
// many spins (after 8 misses only one spell in 32 spins): batches run until
// one keeps the thread awake, for up to QUIET_WINDOW_MS, with a pause after
// a contended one. Five uncontended batches that all fail it fail the
// test; a machine busy with other processes throughout skips it.
const QUIET_WINDOW_MS = 20_000
const QUIET_NEEDED = 5
async function untilQuiet(batch, kept) {
  const end = Date.now() + QUIET_WINDOW_MS
  let quiet = 0
  let got
  while (Date.now() < end) {
    got = await batch()
    if (got.contended === 0) quiet++
    if (kept(got)) return { got, quiet, verdict: 'kept' }
    if (got.contended === 0 && quiet >= QUIET_NEEDED) return { got, quiet, verdict: 'not kept' }
    if (got.contended > 0) await new Promise((resolve) => setTimeout(resolve, 200))
  }
  return { got, quiet, verdict: 'busy' }
}

for (const [backend, url] of backends()) {
  describe(`the runtime's thread between calls on ${backend}`, { skip }, () => {
    const busyLoop = async (lock) => {
      const [wakes, hot] = [addon.runtimeWakes(), addon.hotCounts()]
      for (let i = 0; i < PAIRS; i++) await (await lock.acquire()).release()
      const now = addon.hotCounts()
      return {
        wakes: addon.runtimeWakes() - wakes,
        endedWhileSpinning: now.endedWhileSpinning - hot.endedWhileSpinning,
        missed: now.missed - hot.missed,
        contended: now.contendedYields - hot.contendedYields,
      }
    }

    it('a busy loop of acquire+release does not put it to sleep between calls', async (t) => {
      const client = await build(addon).connect(url)
      const lock = client.lock(unique('hot'))
      await busyLoop(lock) // warm-up
      // Without the spinner each of the 2 * PAIRS calls sleeps and wakes
      // the thread about once (Redis); a ZooKeeper write waits for the
      // disk, longer than a spin, and spells that miss soon stop spinning.
      const kept = (got) =>
        backend === 'redis' ? got.wakes < PAIRS / 2 && got.endedWhileSpinning > PAIRS : got.missed <= PAIRS / 4
      const { got, quiet, verdict } = await untilQuiet(() => busyLoop(lock), kept)
      await client.close()
      if (verdict === 'busy') {
        t.skip(`other processes had the cores for ${QUIET_WINDOW_MS / 1000} s: ${quiet} uncontended batches; ${JSON.stringify(got)}`)
        return
      }
      assert.equal(verdict, 'kept', `not kept awake in ${quiet} uncontended batches of ${2 * PAIRS} calls: ${JSON.stringify(got)}`)
    })
  })
}
