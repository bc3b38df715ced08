// The language-neutral conformance scenarios (tests/conformance/*.json), run
// through the public API by conformance-runner.mjs (which says how steps map
// onto the API), once per backend the scenario names.
import { describe, it } from 'node:test'

import { NOT_IN_WASM, REDIS_VARIANTS, runScenario, scenarios, wasm } from './conformance-runner.mjs'

describe('conformance scenarios', { concurrency: true }, () => {
  for (const sc of scenarios) {
    const backends = sc.backends.includes('redis') ? [...sc.backends, ...Object.keys(REDIS_VARIANTS)] : sc.backends
    for (const backend of backends) {
      const variant = REDIS_VARIANTS[backend]
      const unset = variant !== undefined && !variant.url && variant.unset
      const rwInWasm =
        wasm && sc.steps.some((s) => s.mode) && 'polylock/wasm runs the mutex only (no read-write lock or semaphore yet)'
      const skip = (wasm && (NOT_IN_WASM[backend] ?? NOT_IN_WASM[sc.name])) || rwInWasm || unset || false
      it(`${sc.name} on ${backend}`, { timeout: 60_000, skip }, async (t) => {
        const findings = await runScenario(sc, backend)
        for (const f of findings) t.diagnostic(`finding: ${f}`)
      })
    }
  }
})
