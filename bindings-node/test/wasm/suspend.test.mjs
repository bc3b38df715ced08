// polylock/wasm counts the time the host spends suspended: a holder whose
// lease ran out on the server while the host slept learns of the loss when
// it resumes, and release() rejects with LockLostError instead of reporting
// a success.
//
// A suspend is simulated in this process: the event loop is blocked (no
// timer, no reply, no renewal runs, as in a suspended process) while the
// wall clock goes on, and performance.now() is made to skip the blocked
// time, as CLOCK_MONOTONIC (which performance.now() reads on Linux) skips
// a real suspend. The clock's own rules (wasm-clock.js) are checked with
// injected readings.
import assert from 'node:assert/strict'
import { createRequire } from 'node:module'
import { describe, it } from 'node:test'

import { connect, LockLostError } from 'polylock/wasm'
import { unique } from '../helpers.mjs'

const { SuspendAwareClock, timerDelay, TIMER_CAP_MS } = createRequire(import.meta.url)('../../wasm-clock.js')

const url = process.env.POLYLOCK_TEST_REDIS
if (!url) throw new Error('POLYLOCK_TEST_REDIS is not set: eval "$(scripts/services env)" first')

/** performance.now() from now on skips the time spent in suspend(). */
function monotonicSkippingSuspends() {
  const real = performance.now.bind(performance)
  let skipped = 0
  performance.now = () => real() - skipped
  return {
    /** Blocks the whole process for `ms`; the monotonic clock does not count it. */
    suspend(ms) {
      const start = real()
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms)
      skipped += real() - start
    },
    restore: () => delete performance.now,
  }
}

describe('polylock/wasm: suspend', () => {
  it('a release after a resume past the lease rejects with LockLostError', { timeout: 30_000 }, async () => {
    const host = monotonicSkippingSuspends()
    const client = await connect(url)
    try {
      const name = unique('wasm-suspend')
      const guard = await client.lock(name, { leaseMs: 1000 }).acquire()
      // Asleep for twice the lease: the key expires on the server meanwhile.
      host.suspend(2000)
      await assert.rejects(guard.release(), (e) => {
        assert.ok(e instanceof LockLostError, `release() after the resume: ${e}`)
        assert.equal(e.lockName, name)
        return true
      })
      assert.ok(guard.signal.aborted, 'the guard was not told of the loss')
    } finally {
      host.restore()
      await client.close()
    }
  })

  it('the clock counts what the wall clock saw while the monotonic clock stood still', () => {
    let mono = 5000
    let wall = 1_700_000_000_000
    const clock = new SuspendAwareClock(
      () => mono,
      () => wall,
    )
    assert.equal(clock.now(), 5000)
    mono += 100
    wall += 100
    assert.equal(clock.now(), 5100, 'both clocks agree: either')
    wall += 60_000 // suspended a minute: CLOCK_MONOTONIC did not count it
    assert.equal(clock.now(), 65_100)
    mono += 10
    wall -= 3_600_000 // the wall clock stepped back an hour: the monotonic clock goes on
    assert.equal(clock.now(), 5110)
  })

  it('the timer sleeps at most a second, however far the next deadline is', () => {
    assert.equal(TIMER_CAP_MS, 1000)
    assert.equal(timerDelay(10_000 + 20_000, 10_000), 1000, 'a renewal 20 s away: woken after 1 s')
    assert.equal(timerDelay(10_250.2, 10_000), 251)
    assert.equal(timerDelay(9_000, 10_000), 0, 'already due')
  })
})
