//! Keeping the runtime's thread awake between an event loop's calls (the
//! Node binding), so that neither the call nor its reply has to wake it.
//!
//! A Node call crosses to the runtime's thread and its promise crosses back.
//! On the 2-core benchmark machine waking a sleeping thread costs about
//! 30 µs each way (bench/REPORT.md); a call that finds the thread awake
//! costs about 2 µs. Waking it again for the server's reply costs another
//! 30 µs. So in a busy spell, while calls of the process are in flight and
//! for [`GRACE`] after the last one ends (the event loop's next call in a
//! busy loop comes within it), one task keeps the thread polling instead of
//! parking: it yields to the runtime's other tasks and its I/O driver, and
//! to the OS, between polls.
//!
//! The CPU this spends is bounded the way the blocked callers' spin is
//! ([`super::spin`]): only in a busy spell; never more than [`SPIN`] without
//! a call ending (a lock that waits for its holder, a ZooKeeper write that
//! waits for the disk); and after [`super::spin`]'s run of misses, only one
//! spell in its probe interval spins, until one pays again.
//!
//! A spinner never takes a core from the runtime's own work: it runs as one
//! of its tasks, only where the thread would otherwise sleep.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use super::spin::{in_busy_spell, nanos_since_epoch, SpinPolicy, SPIN};

/// How long after the last call ends the thread stays awake for the next:
/// longer than an event loop's turn from one promise to its next call.
pub const GRACE: Duration = Duration::from_micros(100);

/// Calls of this process running now.
static IN_FLIGHT: AtomicUsize = AtomicUsize::new(0);
/// When the last call ended, in ns since the spin module's epoch (0: never).
static LAST_END: AtomicU64 = AtomicU64::new(0);
/// Whether a spinner task is running (at most one).
static SPINNING: AtomicBool = AtomicBool::new(false);

static POLICY: SpinPolicy = SpinPolicy::new();

static SPELLS: AtomicU64 = AtomicU64::new(0);
static ENDED_WHILE_SPINNING: AtomicU64 = AtomicU64::new(0);
static MISSED: AtomicU64 = AtomicU64::new(0);

/// How the runtime's thread was kept awake so far: the Node binding's
/// hot-path tests count these.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HotCounts {
    /// Spinner tasks started.
    pub spells: u64,
    /// Calls that ended while a spinner ran.
    pub ended_while_spinning: u64,
    /// Spells that ended after [`SPIN`] without a call ending.
    pub missed: u64,
}

/// How the runtime's thread was kept awake so far.
pub fn hot_counts() -> HotCounts {
    HotCounts {
        spells: SPELLS.load(Ordering::Relaxed),
        ended_while_spinning: ENDED_WHILE_SPINNING.load(Ordering::Relaxed),
        missed: MISSED.load(Ordering::Relaxed),
    }
}

/// Runs `fut` as one call of an event loop: counted in flight while it
/// runs, starting a spinner if this call begins a busy spell's spinning.
/// Spawn it on the runtime (its first poll, on the runtime's thread, is
/// where the spinner is spawned: no wake-up for that).
pub async fn call<F: Future>(fut: F) -> F::Output {
    let _call = Call::begin();
    fut.await
}

/// One call counted in IN_FLIGHT while it lives; its end stamps LAST_END.
struct Call;

impl Call {
    fn begin() -> Self {
        IN_FLIGHT.fetch_add(1, Ordering::Relaxed);
        if in_busy_spell(LAST_END.load(Ordering::Relaxed), nanos_since_epoch())
            && !SPINNING.load(Ordering::Relaxed)
            && POLICY.may_spin()
            && !SPINNING.swap(true, Ordering::AcqRel)
        {
            SPELLS.fetch_add(1, Ordering::Relaxed);
            tokio::spawn(spin());
        }
        Call
    }
}

impl Drop for Call {
    fn drop(&mut self) {
        if SPINNING.load(Ordering::Relaxed) {
            ENDED_WHILE_SPINNING.fetch_add(1, Ordering::Relaxed);
        }
        LAST_END.store(nanos_since_epoch(), Ordering::Relaxed);
        IN_FLIGHT.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Keeps the thread polling until no call is in flight for GRACE, or none
/// has ended for SPIN.
async fn spin() {
    let mut last_end = LAST_END.load(Ordering::Relaxed);
    let mut progress = Instant::now();
    let mut paid = false;
    loop {
        let end = LAST_END.load(Ordering::Relaxed);
        if end != last_end {
            (last_end, progress, paid) = (end, Instant::now(), true);
        }
        let quiet = progress.elapsed();
        if IN_FLIGHT.load(Ordering::Relaxed) == 0 {
            if quiet >= GRACE {
                break;
            }
        } else if quiet >= SPIN {
            MISSED.fetch_add(1, Ordering::Relaxed);
            paid = false;
            break;
        }
        std::thread::yield_now();
        tokio::task::yield_now().await;
    }
    if paid {
        POLICY.hit();
    } else {
        POLICY.missed();
    }
    SPINNING.store(false, Ordering::Release);
}

#[cfg(test)]
mod tests {
    use super::*;

    // These share the process-wide statics: one test does it all.
    #[test]
    fn a_busy_loop_of_calls_keeps_the_thread_awake_and_a_stuck_call_lets_it_sleep() {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
        let quick = || async { tokio::task::yield_now().await };
        let before = hot_counts();
        // The first call follows a quiet spell: it does not spin.
        rt.block_on(rt.spawn(call(quick()))).unwrap();
        assert_eq!(hot_counts().spells, before.spells, "a call after quiet spun");
        let wakes = super::super::thread_wakes(rt.handle());
        for _ in 0..200 {
            rt.block_on(rt.spawn(call(quick()))).unwrap();
        }
        let after = hot_counts();
        assert!(after.spells > before.spells, "a busy loop never spun");
        assert!(after.ended_while_spinning - before.ended_while_spinning > 150, "{after:?}");
        let slept = super::super::thread_wakes(rt.handle()) - wakes;
        assert!(slept < 100, "the thread slept {slept} times in 200 busy calls");
        // A call that waits longer than SPIN ends the spell as a miss.
        rt.block_on(rt.spawn(call(async { tokio::time::sleep(SPIN * 5).await }))).unwrap();
        assert_eq!(hot_counts().missed, after.missed + 1);
        std::thread::sleep(Duration::from_millis(5));
        assert!(!SPINNING.load(Ordering::Relaxed), "a spinner outlived its spell");
    }
}
