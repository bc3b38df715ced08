//! Keeping the runtime's thread awake between a binding's calls, so that
//! neither a call nor its reply has to wake it.
//!
//! A call from a binding crosses to the runtime's thread (and, from Node,
//! its promise crosses back). On the 2-core benchmark machine waking a
//! sleeping thread costs about 30 µs; a call that finds the thread awake
//! costs about 2 µs. Waking it again for the server's reply costs another
//! 30 µs. So in a busy spell, while calls of the process are in flight and
//! for [`GRACE`] after the last one ends (the caller's next call in a busy
//! loop comes within it), one task keeps the thread polling instead of
//! parking: it yields to the runtime's other tasks and its I/O driver, and
//! to the OS, between polls.
//!
//! The CPU this spends is bounded the way the blocked callers' spin is
//! ([`super::spin`]): only in a busy spell; never more than [`CALL_WINDOW`]
//! without a call ending (a lock that waits for its holder); and only while
//! calls are quick: after a run of calls that each took longer than
//! [`CALL_WINDOW`] (a ZooKeeper write waits for the disk; many calls queue
//! behind each other), nothing spins until [`QUICK_TO_REARM`] calls in a
//! row are quick again (every call's end says, spinning or not, so no
//! probing is needed). A spinner
//! beside slow calls buys nothing and takes a core from the server: 16 Java
//! threads on ZooKeeper, 2 cores, fell from 4608 to 4117 lock+unlock/s with
//! a spinner that ran while calls kept ending.
//!
//! A spinner never takes a core from the runtime's own work: it runs as one
//! of its tasks, only where the thread would otherwise sleep.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

#[cfg(test)]
use super::spin::MAX_MISSES;
#[cfg(test)]
use super::spin::SPIN;
use super::spin::{cores_free, in_busy_spell, nanos_since_epoch, spinning_allowed, yield_core, SpinPolicy};

/// How long after the last call ends the thread stays awake for the next:
/// longer than an event loop's turn from one promise to its next call.
pub const GRACE: Duration = Duration::from_micros(100);

/// How long a call may run and still count as quick, the thread spinning
/// for it. Twice the blocked callers' [`SPIN`](super::spin::SPIN): a round trip to Redis on a
/// loaded machine takes longer than theirs allows. On the 2-core benchmark
/// machine under load, a Node acquire+release pair took 256-457 µs; with
/// this at 200 µs, 3.5 to 27 of every 200 pairs outlived a spell (means of
/// six runs of 10 batches; 47 in one batch of a failed CI run), and the
/// thread slept and woke about 4 times for each (at 400 µs: 0.6 to 4.1,
/// with the same latency, and 16 Python threads' throughput unchanged).
/// ZooKeeper writes (the disk) and calls queued behind each other take
/// longer still, and let the thread sleep.
pub const CALL_WINDOW: Duration = Duration::from_micros(400);

/// Calls of this process running now.
static IN_FLIGHT: AtomicUsize = AtomicUsize::new(0);
/// When the last call ended, in ns since the spin module's epoch (0: never).
static LAST_END: AtomicU64 = AtomicU64::new(0);
/// Whether a spinner task is running (at most one).
static SPINNING: AtomicBool = AtomicBool::new(false);

static POLICY: SpinPolicy = SpinPolicy::new(QUICK_TO_REARM);

/// Quick calls in a row after which the thread spins again, once slow ones
/// stopped it. One is not enough: among ZooKeeper's writes, a few of which
/// its disk answers within the window, each such one started spinning
/// again, and Node's ZooKeeper busy loop missed 35-62 spells in 400 calls.
/// Every call says whether it was quick, so waiting for a run costs little.
const QUICK_TO_REARM: u32 = 4;

static SPELLS: AtomicU64 = AtomicU64::new(0);
static ENDED_WHILE_SPINNING: AtomicU64 = AtomicU64::new(0);
static MISSED: AtomicU64 = AtomicU64::new(0);
static SLOW_CALLS: AtomicU64 = AtomicU64::new(0);

/// How the runtime's thread was kept awake so far: the Node binding's
/// hot-path tests count these.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HotCounts {
    /// Spinner tasks started.
    pub spells: u64,
    /// Calls that ended while a spinner ran.
    pub ended_while_spinning: u64,
    /// Spells that ended after [`CALL_WINDOW`] without a call ending.
    pub missed: u64,
    /// Calls that took longer than [`CALL_WINDOW`] (see the module docs).
    pub slow_calls: u64,
}

/// How the runtime's thread was kept awake so far.
pub fn hot_counts() -> HotCounts {
    HotCounts {
        spells: SPELLS.load(Ordering::Relaxed),
        ended_while_spinning: ENDED_WHILE_SPINNING.load(Ordering::Relaxed),
        missed: MISSED.load(Ordering::Relaxed),
        slow_calls: SLOW_CALLS.load(Ordering::Relaxed),
    }
}

/// Runs `fut` as one call of a binding: counted in flight while it runs,
/// starting a spinner if this call begins a busy spell's spinning. Spawn
/// it on the runtime (its first poll, on the runtime's thread, is where the
/// spinner is spawned: no wake-up for that); polled outside any runtime,
/// it spins nothing.
pub async fn call<F: Future>(fut: F) -> F::Output {
    let _call = Call::begin();
    fut.await
}

/// Whether a call starting now is in a busy spell (the last call ended
/// less than [`super::BUSY_SPELL`] ago).
pub(super) fn in_busy_spell_now() -> bool {
    in_busy_spell(LAST_END.load(Ordering::Relaxed), nanos_since_epoch())
}

/// One call counted in IN_FLIGHT while it lives; its end stamps LAST_END
/// and tells the policy whether it was quick.
struct Call {
    start: Instant,
}

impl Call {
    fn begin() -> Self {
        IN_FLIGHT.fetch_add(1, Ordering::Relaxed);
        if spinning_allowed()
            && cores_free()
            && in_busy_spell(LAST_END.load(Ordering::Relaxed), nanos_since_epoch())
            && !SPINNING.load(Ordering::Relaxed)
            && POLICY.pays()
        {
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                if !SPINNING.swap(true, Ordering::AcqRel) {
                    SPELLS.fetch_add(1, Ordering::Relaxed);
                    runtime.spawn(spin());
                }
            }
        }
        Call { start: Instant::now() }
    }
}

impl Drop for Call {
    fn drop(&mut self) {
        if SPINNING.load(Ordering::Relaxed) {
            ENDED_WHILE_SPINNING.fetch_add(1, Ordering::Relaxed);
        }
        if self.start.elapsed() <= CALL_WINDOW {
            POLICY.hit();
        } else {
            SLOW_CALLS.fetch_add(1, Ordering::Relaxed);
            POLICY.missed();
        }
        LAST_END.store(nanos_since_epoch(), Ordering::Relaxed);
        IN_FLIGHT.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Keeps the thread polling until no call is in flight for GRACE, none
/// has ended for CALL_WINDOW, or calls have been slow lately.
async fn spin() {
    let mut last_end = LAST_END.load(Ordering::Relaxed);
    let mut progress = Instant::now();
    loop {
        let end = LAST_END.load(Ordering::Relaxed);
        if end != last_end {
            (last_end, progress) = (end, Instant::now());
        }
        let quiet = progress.elapsed();
        if !POLICY.pays() {
            break;
        }
        if IN_FLIGHT.load(Ordering::Relaxed) == 0 {
            if quiet >= GRACE {
                break;
            }
        } else if quiet >= CALL_WINDOW {
            MISSED.fetch_add(1, Ordering::Relaxed);
            break;
        }
        if !yield_core() {
            break;
        }
        tokio::task::yield_now().await;
    }
    SPINNING.store(false, Ordering::Release);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A round trip of a loaded 2-core machine: longer than the callers'
    /// [`SPIN`], within [`CALL_WINDOW`].
    const LOADED_ROUND_TRIP: Duration = Duration::from_micros(300);
    const _: () = assert!(
        SPIN.as_micros() < LOADED_ROUND_TRIP.as_micros() && LOADED_ROUND_TRIP.as_micros() < CALL_WINDOW.as_micros()
    );

    // These share the process-wide statics: one test does it all.
    /// What `batch` counts is an uncontended machine's: another process
    /// taking the cores stops the spinner on purpose ([`yield_core`]). The
    /// first batch that is `kept`, or else the last of up to 20 s of
    /// batches (pausing after a contended one) once 5 uncontended ones fell
    /// short, for the caller to assert on; `None` (said on stderr) if no
    /// uncontended spell came: the count is not taken.
    fn uncontended<T>(mut batch: impl FnMut() -> T, kept: impl Fn(&T) -> bool) -> Option<T> {
        let (deadline, mut quiet) = (Instant::now() + Duration::from_secs(20), 0);
        while Instant::now() < deadline {
            let contended = super::super::contended_yields();
            let got = batch();
            let calm = super::super::contended_yields() == contended;
            quiet += usize::from(calm);
            if kept(&got) || (calm && quiet >= 5) {
                return Some(got);
            }
            if !calm {
                std::thread::sleep(Duration::from_millis(200));
            }
        }
        eprintln!("not counted: other processes had the cores for 20 s ({quiet} uncontended batches)");
        None
    }

    #[test]
    fn a_busy_loop_of_quick_calls_keeps_the_thread_awake_and_slow_calls_let_it_sleep() {
        let _serial = super::super::serial_test();
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
        let run = |fut| rt.block_on(rt.spawn(call(fut))).unwrap();
        let quick =
            || Box::pin(async { tokio::task::yield_now().await }) as std::pin::Pin<Box<dyn Future<Output = ()> + Send>>;
        let slow = || {
            Box::pin(async { tokio::time::sleep(CALL_WINDOW * 3).await })
                as std::pin::Pin<Box<dyn Future<Output = ()> + Send>>
        };
        let before = hot_counts();
        // The first call follows a quiet spell: it does not spin.
        run(quick());
        assert_eq!(hot_counts().spells, before.spells, "a call after quiet spun");
        let busy_loop = || {
            let (counts, wakes) = (hot_counts(), super::super::thread_wakes(rt.handle()));
            (0..200).for_each(|_| run(quick()));
            (hot_counts(), super::super::thread_wakes(rt.handle()) - wakes, counts)
        };
        if let Some((after, slept, counts)) = uncontended(busy_loop, |(_, slept, _)| *slept < 100) {
            assert!(after.spells > counts.spells, "a busy loop never spun");
            assert!(after.ended_while_spinning - counts.ended_while_spinning > 150, "{after:?}");
            assert!(slept < 100, "the thread slept {slept} times in 200 busy calls");
        }
        // A round trip on a loaded machine (a Node call to Redis on the
        // 2-core machine: 150-250 µs) is still a quick call: the thread
        // stays awake for it, and calls like it do not stop the spinning.
        let loaded = || {
            Box::pin(async {
                let start = Instant::now();
                let (reply, replied) = tokio::sync::oneshot::channel();
                std::thread::spawn(move || {
                    while start.elapsed() < LOADED_ROUND_TRIP {
                        std::hint::spin_loop();
                    }
                    let _ = reply.send(());
                });
                let _ = replied.await;
            }) as std::pin::Pin<Box<dyn Future<Output = ()> + Send>>
        };
        let loaded_loop = || {
            let (counts, wakes) = (hot_counts(), super::super::thread_wakes(rt.handle()));
            (0..100).for_each(|_| run(loaded()));
            (hot_counts(), super::super::thread_wakes(rt.handle()) - wakes, counts)
        };
        if let Some((now, slept, counts)) = uncontended(loaded_loop, |(_, slept, _)| *slept < 50) {
            assert!(
                now.slow_calls - counts.slow_calls <= 10,
                "loaded round trips counted slow: {now:?} after {counts:?}"
            );
            assert!(now.missed - counts.missed <= 10, "spells missed loaded round trips: {now:?} after {counts:?}");
            assert!(slept < 50, "the thread slept {slept} times in 100 loaded round trips");
        }
        let after = hot_counts();
        // A call that waits longer than CALL_WINDOW ends the spell as a miss.
        run(slow());
        let now = hot_counts();
        assert_eq!((now.missed, now.slow_calls), (after.missed + 1, after.slow_calls + 1));
        // After a run of slow calls, nothing spins, however busy...
        (0..MAX_MISSES).for_each(|_| run(slow()));
        let spells = hot_counts().spells;
        (0..20).for_each(|_| run(slow()));
        assert_eq!(hot_counts().spells, spells, "a spinner started beside slow calls");
        // ...nor among slow calls of which a few are quick (ZooKeeper's
        // writes, a few of which its disk answers at once)...
        (0..5).for_each(|_| {
            (0..3).for_each(|_| run(slow()));
            run(quick());
        });
        assert_eq!(hot_counts().spells, spells, "a quick call among slow ones started spinning again");
        // ...until calls are quick again.
        if let Some((after, slept, _)) = uncontended(busy_loop, |(_, slept, _)| *slept < 100) {
            assert!(after.spells > spells, "quick calls again, and no spinner");
            assert!(slept < 100, "the thread slept {slept} times in 200 busy calls after slow ones");
        }
        std::thread::sleep(Duration::from_millis(5));
        assert!(!SPINNING.load(Ordering::Relaxed), "a spinner outlived its spell");
    }
}
