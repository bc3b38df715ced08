//! Spinning before sleeping, for a caller of [`super::Sliced`].
//!
//! Before it sleeps, a caller spins for [`SPIN`]: a Redis answer on the
//! same network comes within that, and a caller that never slept needs no
//! wake-up (a futex wake and a cold start of the thread, about 50 µs a call
//! on the 2-core benchmark machine: bench/REPORT.md). Only a caller alone:
//! while other calls of the process are in flight, the runtime's thread
//! has work for every core, and a spinner would take one from it (16
//! Python threads on 2 cores fell from 29k to 12k acquire+release/s with
//! one spinner at a time). And only
//! while spinning pays: after [`MAX_MISSES`] spins in a row ended without
//! the outcome (a ZooKeeper write waits for the disk, a lock for its
//! holder), one wait in [`PROBE_EVERY`] spins, to notice when it pays again.
//!
//! And only in a busy spell: when the process's last outcome came less than
//! [`BUSY_SPELL`] before the call. A call after a quiet spell wakes
//! sleeping threads in the runtime, the server and whoever it hands to, so
//! its answer comes later than a busy loop's, and a spinner takes a core
//! from exactly those threads: with the holder's release spinning, a
//! Python handoff after 20 ms of quiet took 546–590 µs at p50; without,
//! 463–485 µs (2 cores).
//!
//! A spinner yields its core between polls. Polling without yielding, it
//! kept the runtime's thread waiting for a core whenever that thread woke
//! where the spinner ran and the other core was busy (the server, another
//! process): on the 2-core benchmark machine, once other clients were
//! active, every spin missed and a Python acquire+release took 235 µs at
//! p50; yielding, 125 µs.

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, TryRecvError};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Whether this process may spin at all: `POLYLOCK_SPIN=0` (or `off`,
/// `false`, `no`) in its environment turns off both the callers' spin and
/// the runtime thread's ([`super::hot_worker`]), for a process whose CPU is
/// scarcer than its latency (a container with a small CPU quota). Read once.
pub fn spinning_allowed() -> bool {
    static ALLOWED: OnceLock<bool> = OnceLock::new();
    *ALLOWED.get_or_init(|| allowed_by(std::env::var("POLYLOCK_SPIN").ok().as_deref()))
}

/// What `POLYLOCK_SPIN` set to `value` (unset: `None`) allows.
fn allowed_by(value: Option<&str>) -> bool {
    !matches!(value.map(|v| v.trim().to_ascii_lowercase()).as_deref(), Some("0" | "off" | "false" | "no"))
}

/// How long a caller spins for its outcome before it sleeps.
pub const SPIN: Duration = Duration::from_micros(200);

/// A call spins only if the process's last outcome came less than this
/// before it (see the module docs). Longer than a caller's own work between
/// calls in a busy loop; shorter than the quiet spells after which threads
/// sleep deeply enough that an answer comes late.
pub const BUSY_SPELL: Duration = Duration::from_millis(1);

/// Spins in a row that ended without the outcome, after which waits only
/// probe (see the module docs).
pub(super) const MAX_MISSES: u32 = 8;
/// While spins miss, one wait in this many spins.
const PROBE_EVERY: u32 = 32;

/// Calls of this process whose callers wait for them now.
static IN_FLIGHT: AtomicUsize = AtomicUsize::new(0);

/// One call counted in IN_FLIGHT while it lives.
pub(super) struct InFlight;

impl InFlight {
    pub(super) fn new() -> Self {
        IN_FLIGHT.fetch_add(1, Ordering::Relaxed);
        InFlight
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        IN_FLIGHT.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A probe that hits starts spinning again: probes are one wait in
/// PROBE_EVERY, so a hit among them is evidence enough.
static POLICY: SpinPolicy = SpinPolicy::new(1);

/// When the process's last outcome was taken, in ns since [`epoch`] (0: never).
static LAST_OUTCOME: AtomicU64 = AtomicU64::new(0);

fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

pub(super) fn nanos_since_epoch() -> u64 {
    // Never 0 (that means "never"): the epoch is set before the first read.
    u64::try_from(epoch().elapsed().as_nanos()).unwrap_or(u64::MAX).max(1)
}

/// A spinner's yield that got its core back only after this long, while
/// the process's own threads ran for less than half of that time, gave the
/// core to another process for a time slice: the cores are contended.
pub const CONTENDED_YIELD: Duration = Duration::from_micros(500);

/// How long after a contended yield nothing spins and nothing is placed.
/// Short: a burst of other work (a child process starting) should cost a
/// moment of spinning, not a second of it; beside processes that stay busy
/// it costs one stalled poll in each such spell.
pub const CONTENDED_FOR: Duration = Duration::from_millis(100);

/// When a spinner's yield last found its core contended (ns since the epoch; 0: never).
static CONTENDED_AT: AtomicU64 = AtomicU64::new(0);
static CONTENDED_YIELDS: AtomicU64 = AtomicU64::new(0);

/// Yields the core between two polls of a spinner. `false` if the core
/// was contended ([`CONTENDED_YIELD`]): the spinner stops, and for
/// [`CONTENDED_FOR`] nothing spins or is placed ([`cores_free`]). Where
/// other processes keep the cores busy, a yield hands the core to one of
/// them for a whole time slice, and a spinner confined to one CPU
/// ([`super::near_caller`]) waits out a slice per poll: with a busy, niced
/// process on each of 2 cores, a Python acquire+release in a busy loop took
/// 3.86 ms at p50 (redis-py: 90 µs); without placement 55 µs, without
/// yields 52. The process's own threads running meanwhile (Node's event
/// loop collecting garbage beside the runtime's thread) do not count: the
/// spinner waits for them anyway.
pub(super) fn yield_core() -> bool {
    let (start, ours) = (Instant::now(), process_cpu());
    std::thread::yield_now();
    let took = start.elapsed();
    took < CONTENDED_YIELD || note_yield(took, process_cpu().saturating_sub(ours))
}

/// Takes note of a yield that took `took` while the process's threads ran
/// for `ours`; `false` if other processes had the core.
fn note_yield(took: Duration, ours: Duration) -> bool {
    if took < CONTENDED_YIELD || ours * 2 >= took {
        return true;
    }
    CONTENDED_AT.store(nanos_since_epoch(), Ordering::Relaxed);
    CONTENDED_YIELDS.fetch_add(1, Ordering::Relaxed);
    false
}

/// The CPU time of the whole process so far.
fn process_cpu() -> Duration {
    #[cfg(unix)]
    {
        // SAFETY: writes a timespec of ours.
        let mut t: libc::timespec = unsafe { std::mem::zeroed() };
        if unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut t) } == 0 {
            return Duration::new(t.tv_sec as u64, t.tv_nsec as u32);
        }
    }
    Duration::ZERO
}

/// Whether no spinner's yield found its core contended for [`CONTENDED_FOR`].
pub(super) fn cores_free() -> bool {
    cores_free_at(nanos_since_epoch())
}

/// [`cores_free`] at `now` (ns since the epoch).
fn cores_free_at(now: u64) -> bool {
    let at = CONTENDED_AT.load(Ordering::Relaxed);
    at == 0 || now.saturating_sub(at) >= CONTENDED_FOR.as_nanos() as u64
}

/// How many spinners' yields found their core contended so far (tests).
pub fn contended_yields() -> u64 {
    CONTENDED_YIELDS.load(Ordering::Relaxed)
}

/// Records that a caller took its outcome now.
pub(super) fn outcome_taken() {
    LAST_OUTCOME.store(nanos_since_epoch(), Ordering::Relaxed);
}

/// Whether a call starting at `now` (ns) is in a busy spell: an outcome
/// was taken at `last` (ns, 0 for never), less than BUSY_SPELL before.
pub(super) fn in_busy_spell(last: u64, now: u64) -> bool {
    last != 0 && now.saturating_sub(last) < BUSY_SPELL.as_nanos() as u64
}

/// Whether spinning pays lately: it stops after MAX_MISSES misses in a row,
/// probes once in PROBE_EVERY waits while stopped, and starts again after
/// `rearm_after` hits in a row.
pub(super) struct SpinPolicy {
    /// Spins in a row that missed (saturating at MAX_MISSES).
    misses: AtomicU32,
    /// Waits begun while spins miss: every PROBE_EVERY-th of them spins.
    probes: AtomicU32,
    /// Hits in a row while stopped.
    hits: AtomicU32,
    rearm_after: u32,
}

impl SpinPolicy {
    pub(super) const fn new(rearm_after: u32) -> Self {
        SpinPolicy { misses: AtomicU32::new(0), probes: AtomicU32::new(0), hits: AtomicU32::new(0), rearm_after }
    }

    pub(super) fn may_spin(&self) -> bool {
        self.misses.load(Ordering::Relaxed) < MAX_MISSES
            || self.probes.fetch_add(1, Ordering::Relaxed) % PROBE_EVERY == 0
    }

    /// Whether spins paid lately: fewer than MAX_MISSES misses in a row.
    pub(super) fn pays(&self) -> bool {
        self.misses.load(Ordering::Relaxed) < MAX_MISSES
    }

    pub(super) fn hit(&self) {
        if self.pays() {
            // Hits count only while stopped: none are pending here.
            self.misses.store(0, Ordering::Relaxed);
        } else if self.hits.fetch_add(1, Ordering::Relaxed) + 1 >= self.rearm_after {
            self.hits.store(0, Ordering::Relaxed);
            self.misses.store(0, Ordering::Relaxed);
        }
    }

    pub(super) fn missed(&self) {
        self.hits.store(0, Ordering::Relaxed);
        let _ = self.misses.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |m| Some((m + 1).min(MAX_MISSES)));
    }
}

static SPUN: AtomicU64 = AtomicU64::new(0);
static MISSED: AtomicU64 = AtomicU64::new(0);
static SLEPT: AtomicU64 = AtomicU64::new(0);

/// How blocked callers of this process waited so far: the bindings'
/// hot-path tests count these.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WaitCounts {
    /// Outcomes taken while spinning: the caller never slept.
    pub spun: u64,
    /// Spins that ended without the outcome (CPU spent for nothing).
    pub missed: u64,
    /// Waits that went to sleep.
    pub slept: u64,
}

/// How blocked callers of this process waited so far.
pub fn wait_counts() -> WaitCounts {
    WaitCounts {
        spun: SPUN.load(Ordering::Relaxed),
        missed: MISSED.load(Ordering::Relaxed),
        slept: SLEPT.load(Ordering::Relaxed),
    }
}

/// What a spinner's poll found.
pub(super) enum Polled<T> {
    Ready(T),
    NotYet,
    /// It will never come (the sender is gone): stop spinning.
    Never,
}

/// The outcome if it comes within `budget`, polled without sleeping
/// (yielding between polls: see the module docs);
/// `None` at once if the caller's call is not the only one in flight, the
/// process is not in a busy spell, or spinning has not paid lately (and
/// this wait does not probe).
pub(super) fn spin<T>(outcome: &Receiver<T>, budget: Duration) -> Option<T> {
    spin_for(
        || match outcome.try_recv() {
            Ok(value) => Polled::Ready(value),
            Err(TryRecvError::Empty) => Polled::NotYet,
            Err(TryRecvError::Disconnected) => Polled::Never,
        },
        budget,
    )
}

/// [`spin`] for an outcome that `poll` looks for.
pub(super) fn spin_for<T>(mut poll: impl FnMut() -> Polled<T>, budget: Duration) -> Option<T> {
    if !spinning_allowed()
        || !cores_free()
        || IN_FLIGHT.load(Ordering::Relaxed) > 1
        || !in_busy_spell(LAST_OUTCOME.load(Ordering::Relaxed), nanos_since_epoch())
        || !POLICY.may_spin()
    {
        return None;
    }
    let start = Instant::now();
    loop {
        match poll() {
            Polled::Ready(value) => {
                POLICY.hit();
                SPUN.fetch_add(1, Ordering::Relaxed);
                return Some(value);
            }
            Polled::Never => return None,
            Polled::NotYet if start.elapsed() >= budget => {
                POLICY.missed();
                MISSED.fetch_add(1, Ordering::Relaxed);
                return None;
            }
            Polled::NotYet => {
                if !yield_core() {
                    return None;
                }
            }
        }
    }
}

/// Counts a wait that went to sleep.
pub(super) fn slept() {
    SLEPT.fetch_add(1, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_yield_that_gave_the_core_away_for_long_stops_spinning_and_placement_for_a_while() {
        let _serial = super::super::serial_test();
        let before = contended_yields();
        assert!(note_yield(CONTENDED_YIELD / 10, Duration::ZERO), "a quick yield counted as contended");
        let slice = CONTENDED_YIELD * 8;
        assert!(note_yield(slice, slice * 9 / 10), "the process's own threads' time slice counted as contended");
        assert_eq!(contended_yields(), before);
        assert!(!note_yield(slice, slice / 10), "another process's time slice not taken as contended");
        assert_eq!(contended_yields(), before + 1);
        assert!(!cores_free(), "the cores count as free right after a contended yield");
        let later = nanos_since_epoch() + CONTENDED_FOR.as_nanos() as u64;
        assert!(cores_free_at(later), "the cores still count as contended CONTENDED_FOR later");
        CONTENDED_AT.store(0, Ordering::Relaxed);
    }

    #[test]
    fn only_a_call_within_a_busy_spell_of_the_last_outcome_spins() {
        let spell = BUSY_SPELL.as_nanos() as u64;
        assert!(!in_busy_spell(0, 5), "no outcome yet: the process was quiet");
        assert!(in_busy_spell(1_000, 1_000 + spell - 1));
        assert!(!in_busy_spell(1_000, 1_000 + spell), "a quiet spell of BUSY_SPELL");
        assert!(in_busy_spell(2_000, 1_000), "an outcome taken meanwhile by another thread");
    }

    #[test]
    fn polylock_spin_turns_spinning_off_with_a_no_and_leaves_it_on_otherwise() {
        for off in ["0", "off", "OFF", " false ", "no"] {
            assert!(!allowed_by(Some(off)), "{off:?}");
        }
        for on in [None, Some("1"), Some("on"), Some(""), Some("yes")] {
            assert!(allowed_by(on), "{on:?}");
        }
    }

    #[test]
    fn spinning_stops_while_it_misses_and_probes_until_it_hits() {
        let policy = SpinPolicy::new(1);
        for _ in 0..MAX_MISSES {
            assert!(policy.may_spin());
            policy.missed();
        }
        let spins = (0..10 * PROBE_EVERY).filter(|_| policy.may_spin()).count();
        assert_eq!(spins, 10, "while spins miss, one wait in PROBE_EVERY spins");
        policy.hit();
        assert!((0..PROBE_EVERY).all(|_| policy.may_spin()), "a hit makes every wait spin again");
    }

    #[test]
    fn a_policy_stopped_by_misses_starts_again_only_after_a_run_of_hits() {
        let policy = SpinPolicy::new(4);
        (0..MAX_MISSES).for_each(|_| policy.missed());
        (0..3).for_each(|_| policy.hit());
        assert!(!policy.pays(), "three hits of four re-armed it");
        policy.missed();
        (0..3).for_each(|_| policy.hit());
        assert!(!policy.pays(), "a miss did not restart the run of hits");
        policy.hit();
        assert!(policy.pays(), "four hits in a row left it stopped");
        (0..MAX_MISSES - 1).for_each(|_| policy.missed());
        policy.hit();
        (0..MAX_MISSES - 1).for_each(|_| policy.missed());
        assert!(policy.pays(), "while it pays, a hit clears the misses");
    }
}
