// polylock leaves the host process alone: while thousands of calls run, no
// thread of the process (the event loop's, polylock's, libuv's, V8's) has
// its CPU affinity changed; an idle client holding locks burns next to no CPU.
import assert from 'node:assert/strict'
import { execFile } from 'node:child_process'
import { readdirSync, readFileSync } from 'node:fs'
import { describe, it } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import { promisify } from 'node:util'
import { Worker } from 'node:worker_threads'

import { connect } from 'polylock'
import { backends, unique } from './helpers.mjs'

const run = promisify(execFile)

function masks() {
  const out = {}
  for (const tid of readdirSync('/proc/self/task')) {
    try {
      const line = readFileSync(`/proc/self/task/${tid}/status`, 'utf8')
        .split('\n')
        .find((l) => l.startsWith('Cpus_allowed_list:'))
      if (line) out[tid] = line.split(':')[1].trim()
    } catch {
      // the thread ended meanwhile
    }
  }
  return out
}

// A worker thread samples every thread's mask until told to stop, off the
// event loop, so it sees the masks while calls are in flight.
const SAMPLER = `
const { parentPort, workerData } = require('node:worker_threads')
const { readdirSync, readFileSync } = require('node:fs')
const stop = new Int32Array(workerData.stop)
let samples = 0
const changed = {}
while (Atomics.load(stop, 0) === 0) {
  for (const tid of readdirSync('/proc/self/task')) {
    let text
    try { text = readFileSync('/proc/self/task/' + tid + '/status', 'utf8') } catch { continue }
    const line = text.split('\\n').find((l) => l.startsWith('Cpus_allowed_list:'))
    const mask = line && line.split(':')[1].trim()
    if (mask && mask !== workerData.expected) changed[tid] = mask
  }
  samples++
  Atomics.wait(stop, 0, 0, 1)
}
parentPort.postMessage({ samples, changed })
`

for (const [backend, url] of backends()) {
  describe(`the host process on ${backend}`, () => {
    it('no thread affinity changes while thousands of calls run', async () => {
      const expected = masks()[String(process.pid)]
      const stop = new SharedArrayBuffer(4)
      const sampler = new Worker(SAMPLER, { eval: true, workerData: { stop, expected } })
      const report = new Promise((resolve) => sampler.once('message', resolve))
      const client = await connect(url)
      try {
        const lock = client.lock(unique('affinity'))
        // Back to back, then paced as a service's calls come (2 ms, 10 ms).
        for (const [pause, calls] of [[0, 1600], [2, 500], [10, 300]]) {
          for (let i = 0; i < calls; i++) {
            const guard = await lock.acquire()
            await guard.release()
            if (pause) await sleep(pause)
          }
        }
      } finally {
        Atomics.store(new Int32Array(stop), 0, 1)
        await client.close()
      }
      const { samples, changed } = await report
      await sampler.terminate()
      assert.ok(samples > 100, `the sampler ran ${samples} times only`)
      assert.deepEqual(changed, {}, `threads whose CPUs changed from ${expected}`)
    })

    it('an idle client holding 100 locks uses almost no CPU', { timeout: 60_000 }, async () => {
      // In a process of its own, as the Python and Java tests do: this
      // process's test runner (and, for polylock/wasm, its module hooks)
      // keep V8 busy for seconds after a burst, which is not the client's.
      const fixture = new URL('./fixtures/idle-client.mjs', import.meta.url).pathname
      const { stdout } = await run(process.execPath, [fixture, url, unique('idle')], { timeout: 50_000 })
      const total = Number(stdout.trim())
      assert.ok(Number.isFinite(total), `the idle client printed ${JSON.stringify(stdout)}`)
      // µs of user + system CPU in 2 s: 0.5% of one core, as in Python, Java and Rust.
      assert.ok(total < 10_000, `an idle client used ${total} µs of CPU in 2 s`)
    })
  })
}
