'use strict'
// The clock `polylock/wasm` gives its lock table: one that keeps counting
// while the host is suspended, as the native runtime's does
// (runtime/src/clock.rs, CLOCK_BOOTTIME).
//
// performance.now() is CLOCK_MONOTONIC on Linux, which stops while a laptop
// sleeps or a VM is suspended: a holder's deadline measured on it alone
// would not have passed after a resume although its lease ran out on the
// server meanwhile, and release() would report a success for a lock that
// may be someone else's by then. JavaScript has no boot-time clock, but the
// wall clock (Date.now()) keeps going through a suspend. So the time elapsed
// is the larger of the two clocks' elapsed times:
// - suspended: the wall clock's is larger, by the time asleep;
// - the wall clock stepped back (NTP, an operator): the monotonic one's is
//   larger, and time does not stand still meanwhile; should the larger one
//   still go back (a step back after a suspend was counted), the table
//   absorbs it (it never lets its time go backwards);
// - the wall clock stepped forward: time runs ahead by the step, so
//   deadlines come early (a lease is given up or reported lost sooner than
//   needed), never late.

/** The longest the timer sleeps (as the native timer task's longest nap). */
const TIMER_CAP_MS = 1000

class SuspendAwareClock {
  #readMonotonic
  #readWall
  #monotonicStart
  #wallStart

  /** The readers are the platform's clocks; tests pass their own. */
  constructor(readMonotonic = () => performance.now(), readWall = () => Date.now()) {
    this.#readMonotonic = readMonotonic
    this.#readWall = readWall
    this.#monotonicStart = readMonotonic()
    this.#wallStart = readWall()
  }

  /**
   * Milliseconds on the table's time line, counting suspend. It starts at
   * the monotonic clock's reading when the clock was made (any origin does:
   * the table only compares its own instants).
   */
  now() {
    const monotonic = this.#readMonotonic() - this.#monotonicStart
    const wall = this.#readWall() - this.#wallStart
    return this.#monotonicStart + Math.max(monotonic, wall)
  }
}

/**
 * How long to sleep until the table's instant `at`, read at `now`. Never
 * longer than a second: the timer itself runs on the monotonic clock (libuv's
 * timers), which stops during a suspend, so a long sleep would oversleep a
 * resume by the time asleep. Capped, the table is asked at most a second
 * after a resume and tells of every deadline that passed meanwhile; firing
 * early is harmless, the table announces the instant again.
 */
function timerDelay(at, now) {
  return Math.min(TIMER_CAP_MS, Math.max(0, Math.ceil(at - now)))
}

module.exports = { SuspendAwareClock, timerDelay, TIMER_CAP_MS }
