// The conformance runner itself (conformance-runner.mjs): a scenario whose
// step fails, or never settles, inside an owner's withLock fails at once
// with that step's error and cleans up (every withLock callback returns,
// the clients close), instead of leaving its test to run into its timeout.
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'

import { runScenario } from './conformance-runner.mjs'

/** A scenario of `steps` on one Redis server, with two clients. */
const scenario = (name, steps) => ({ name, backends: ['redis'], clients: 2, steps })

describe('conformance runner', () => {
  it('a step failing inside an owner\'s withLock fails the scenario with that step\'s error', { timeout: 20_000 }, async () => {
    const started = performance.now()
    await assert.rejects(
      runScenario(
        scenario('runner-step-fails-inside-withlock', [
          { op: 'acquire', client: 0, owner: 1, expect: 'granted' },
          // Run inside owner 1's withLock callback; the count is 1, not 5.
          { op: 'hold_count', client: 0, owner: 1, expect_count: 5 },
          { op: 'release', client: 0, owner: 1, expect: 'ok' },
        ]),
        'redis',
      ),
      (e) => {
        assert.match(e.message, /^step 1 \(hold_count\)/)
        return true
      },
    )
    assert.ok(performance.now() - started < 10_000, `failed after ${performance.now() - started} ms`)
  })

  it('a step that never settles fails at its deadline, naming the step, and the scenario cleans up', { timeout: 20_000 }, async () => {
    const started = performance.now()
    await assert.rejects(
      runScenario(
        scenario('runner-step-never-settles', [
          { op: 'acquire', client: 0, owner: 1, expect: 'granted' },
          { op: 'start_acquire', client: 1, owner: 2, id: 'blocked' },
          // Owner 1 never releases: this waits ten minutes unless cut short.
          { op: 'await', id: 'blocked', within_ms: 600_000, expect: 'granted' },
        ]),
        'redis',
        { stepDeadlineMs: 1500 },
      ),
      (e) => {
        assert.equal(e.message, 'step 2 (await): did not settle within 1500 ms')
        return true
      },
    )
    assert.ok(performance.now() - started < 10_000, `failed after ${performance.now() - started} ms`)
  })
})
