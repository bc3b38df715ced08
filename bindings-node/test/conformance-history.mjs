// The operation history of the conformance scenarios' lock steps, for
// tests/history's histcheck (a Porcupine check of mutual exclusion). With
// POLYLOCK_HISTORY_DIR set, every acquire (call, and return with the token
// or the outcome's name), release (call, and return ok, or ok false when
// told Lost) and reported loss goes as one JSON line (tests/history/events.go)
// into `<lang>-conformance-<pid>.jsonl` there (lang: node, or wasm for the
// polylock/wasm pass), stamped with process.hrtime.bigint() (CLOCK_MONOTONIC
// on Linux, the clock every language's recorder reads). A call is stamped
// before the step calls the API and its return after the step has the
// answer, so the interval holds the operation. Nothing is recorded when the
// variable is unset.
import { openSync, writeSync } from 'node:fs'
import { join } from 'node:path'

const dir = process.env.POLYLOCK_HISTORY_DIR
let fd = null
let runs = 0

/** One line per event, each one synchronous write; tokens and times (BigInts) as exact integers. */
function write(line) {
  fd ??= openSync(join(dir, `${line.lang}-conformance-${process.pid}.jsonl`), 'a')
  delete line.lang
  const json = Object.entries(line)
    .map(([k, v]) => `"${k}": ${typeof v === 'bigint' ? v : JSON.stringify(v)}`)
    .join(', ')
  writeSync(fd, `{${json}}\n`)
}

/**
 * One scenario run's history: its lock name is unique to the run, so the
 * checker sees each scenario on each backend as a history of its own.
 */
export class History {
  constructor(lang, backend, lock) {
    this.lang = lang
    this.backend = backend
    this.lock = `${lang}:${lock}`
    this.run = `${lang}-${process.pid}-${runs++}`
  }

  #record(step, op, kind, fields = {}) {
    if (!dir) return
    const line = {
      lang: this.lang,
      client: `${this.run}/c${step.client}.o${step.owner}`,
      backend: this.backend,
      lock: this.lock,
      resource: '',
      op,
      kind,
      t_ns: process.hrtime.bigint(),
    }
    if (step.mode === 'read' || step.mode === 'write') line.mode = step.mode
    write({ ...line, ...fields })
  }

  /** An acquire is called; `permits`: the semaphore's number, for a semaphore's. */
  acquireCall(step, permits) {
    const fields = step.mode === 'permits' ? { permits: step.permits ?? permits, count: step.count ?? 1 } : {}
    this.#record(step, 'acquire', 'call', fields)
  }

  /** The acquire returned a grant's token, or else `outcome`. */
  acquireReturn(step, token, outcome) {
    this.#record(step, 'acquire', 'return', token !== undefined ? { token } : { error: outcome })
  }

  releaseCall(step) {
    this.#record(step, 'release', 'call')
  }

  /** The release returned `outcome`: ok, lost (told Lost: ok false), or another error. */
  releaseReturn(step, outcome) {
    const fields = outcome === 'ok' ? { ok: true } : outcome === 'lost' ? { ok: false } : { error: outcome }
    this.#record(step, 'release', 'return', fields)
  }

  /** The step's owner was told it lost its hold. */
  lost(step) {
    this.#record(step, 'lost', 'event')
  }
}
