// Where a lone call after quiet wakes the event loop's thread
// (polylock::blocking::near_caller::EventLoopCall): on the CPU it began the
// call on, confined only from the outcome's hand-over until it has taken
// the outcome; then it has its own CPUs back, and so has a thread it started
// in that moment. Read from /proc, not timed.
import assert from 'node:assert/strict'
import { readFileSync, readdirSync } from 'node:fs'
import { createRequire } from 'node:module'
import { describe, it } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import { Worker } from 'node:worker_threads'

import { backends, unique } from './helpers.mjs'

const require = createRequire(import.meta.url)
const wasm = process.env.POLYLOCK_NODE_ENTRY === 'polylock/wasm'
const addon = wasm ? null : require('../native.js')
const build = require('../api.js')

/** A thread's allowed CPUs, as /proc lists them (e.g. `0-1`). */
const cpusOf = (tid) =>
  readFileSync(`/proc/self/task/${tid}/status`, 'utf8').match(/^Cpus_allowed_list:\s*(\S+)$/m)[1]
const mainThread = process.pid
const own = process.platform === 'linux' ? cpusOf(mainThread) : ''
const skip =
  (wasm && 'the napi addon only') ||
  (process.platform !== 'linux' && 'Linux only') ||
  (process.env.POLYLOCK_SPIN !== undefined && 'POLYLOCK_SPIN is set') ||
  (!/[-,]/.test(own) && 'one CPU: nothing to place')

/** Longer than a busy spell (1 ms): the next call is a quiet one. */
const quiet = () => sleep(20)

for (const [backend, url] of backends()) {
  describe(`the event loop's thread around a lone call on ${backend}`, { skip }, () => {
    it('is kept on its CPU for the wake-up only, and gets its own CPUs back', async (t) => {
      const client = await build(addon).connect(url)
      t.after(() => client.close())
      const lock = client.lock(unique('placement'))
      await (await lock.acquire()).release() // warm-up
      await quiet()
      const placed = addon.loopWakeupsPlaced()
      const pending = lock.acquire()
      assert.equal(cpusOf(mainThread), own, 'confined while its call is out')
      const guard = await pending
      assert.equal(cpusOf(mainThread), own, 'still confined after taking the outcome')
      await guard.release()
      assert.equal(cpusOf(mainThread), own)
      // The acquire after quiet and the release right after it.
      assert.equal(addon.loopWakeupsPlaced() - placed, 2)
    })

    it('gives a thread started while it was confined its CPUs back', async (t) => {
      const client = await build(addon).connect(url)
      t.after(() => client.close())
      const lock = client.lock(unique('placement-worker'))
      await (await lock.acquire()).release()
      await quiet()
      const pending = lock.acquire()
      // Hold the loop until the outcome is handed over: the runtime's
      // thread has confined this one by then.
      const until = Date.now() + 5000
      while (!/^\d+$/.test(cpusOf(mainThread)) && Date.now() < until);
      const confinedTo = cpusOf(mainThread)
      assert.match(confinedTo, /^\d+$/, 'not confined for the wake-up')
      const before = new Set(readdirSync('/proc/self/task'))
      const worker = new Worker('require("node:worker_threads").parentPort.once("message", () => {})', { eval: true })
      try {
        const started = readdirSync('/proc/self/task').filter((tid) => !before.has(tid))
        assert.ok(started.length > 0, 'no thread started')
        assert.ok(started.some((tid) => cpusOf(tid) === confinedTo), 'the new threads did not inherit the one CPU')
        const guard = await pending
        assert.equal(cpusOf(mainThread), own)
        for (const tid of started) assert.equal(cpusOf(tid), own, `thread ${tid}, started while confined, kept the one CPU`)
        await guard.release()
      } finally {
        await worker.terminate()
      }
    })
  })
}
