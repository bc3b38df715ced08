//! For callers on threads outside the runtime. The Python and JVM
//! bindings block: they run a future on the runtime and wait for its
//! outcome in slices, so that the caller can answer an interrupt between
//! them. The Node binding's event loop does not block; it spawns its calls
//! itself. Every binding's calls run through [`hot_worker::call`], which
//! keeps the runtime's thread awake in a busy spell of quick calls.
//!
//! The outcome comes over a std channel, waited on with its own timeout. A
//! tokio timer per slice would wake the runtime's thread to re-arm its
//! driver, one more wake-up per call; [`thread_wakes`] counts them.
//!
//! Before it sleeps, a caller alone may spin a little ([`spin`]): a quick
//! answer then costs it no wake-up.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::task::JoinHandle;

use crate::Withdrawal;

/// A future spawned on a runtime, whose outcome a foreign thread waits for.
/// Dropped, it leaves the task running: its outcome is dropped when it
/// comes (a guard in it gives its grant back).
pub struct Sliced<T> {
    runtime: Handle,
    task: JoinHandle<()>,
    /// Withdraws the task's waiting acquires on [`Self::cancel`].
    withdrawal: Withdrawal,
    outcome: mpsc::Receiver<T>,
    /// Whether the first slice has begun: only it spins.
    waited: bool,
    /// Whether the outcome was taken while spinning.
    spun: bool,
    _in_flight: spin::InFlight,
    /// Dropped with the task, on the caller's thread once it has the outcome.
    _placed: near_caller::Placement,
}

/// How long [`Sliced::cancel`] waits for a withdrawn acquire's outcome
/// before it aborts the task: past the core's own bound on reporting a
/// withdrawal the server does not confirm (one second).
pub const WITHDRAW_WAIT: Duration = Duration::from_secs(3);

/// Where a [`Sliced`] task is after a slice.
pub enum Slice<T> {
    Done(T),
    StillRunning,
    /// It ended without an outcome: it panicked (why).
    Failed(String),
}

pub use spin::{contended_yields, wait_counts, WaitCounts, BUSY_SPELL, CONTENDED_FOR, CONTENDED_YIELD, SPIN};

pub mod hot_worker;
pub mod near_caller;
mod spin;

use spin::Polled;

/// The runtime a binding runs its calls on: one worker thread, so the task
/// a call spawns, the connection drivers and the reply's waker all run on
/// one thread, and a call costs one crossing each way, not wake-ups between
/// workers (the bindings' hot-path tests count them). With `near_caller`,
/// the calls made through [`near_caller::enter`] (blocking) and
/// [`near_caller::enter_from_event_loop`] place that thread and their
/// callers ([`near_caller`]; for a process whose other threads leave its
/// CPUs free).
pub fn binding_runtime(thread_name: &str, near_caller: bool) -> std::io::Result<tokio::runtime::Runtime> {
    let rt =
        tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().thread_name(thread_name).build()?;
    if near_caller {
        near_caller::enable();
        // Its one worker polls every task spawned on it (`on_thread_start`
        // would also register the blocking pool's threads). Not waited for:
        // a Node addon builds its runtime while the dynamic loader's lock is
        // held, which a new thread needs to start.
        rt.spawn(async { near_caller::register_runtime_thread() });
    }
    Ok(rt)
}

impl<T: Send + 'static> Sliced<T> {
    /// Spawns `fut` on `runtime`, as one [`hot_worker::call`].
    pub fn spawn(runtime: &Handle, fut: impl Future<Output = T> + Send + 'static) -> Self {
        let placed = near_caller::enter();
        let (tx, outcome) = mpsc::sync_channel(1);
        let withdrawal = Withdrawal::new();
        let scope = withdrawal.clone();
        let task = runtime.spawn(hot_worker::call(async move {
            let _ = tx.send(scope.scope(fut).await);
        }));
        Sliced {
            runtime: runtime.clone(),
            task,
            withdrawal,
            outcome,
            waited: false,
            spun: false,
            _in_flight: spin::InFlight::new(),
            _placed: placed,
        }
    }

    /// Waits up to `slice` for the outcome (the first time, spinning up to
    /// [`SPIN`] of it first if [`spin`] allows). Not from a runtime thread.
    pub fn wait(&mut self, slice: Duration) -> Slice<T> {
        if !std::mem::replace(&mut self.waited, true) {
            if let Some(value) = spin::spin(&self.outcome, slice.min(SPIN)) {
                self.spun = true;
                spin::outcome_taken();
                return Slice::Done(value);
            }
        }
        spin::slept();
        match self.outcome.recv_timeout(slice) {
            Ok(value) => {
                spin::outcome_taken();
                Slice::Done(value)
            }
            Err(RecvTimeoutError::Timeout) => Slice::StillRunning,
            Err(RecvTimeoutError::Disconnected) => {
                let why = self.runtime.block_on(&mut self.task).err();
                Slice::Failed(why.map_or_else(|| "no outcome".into(), |e| e.to_string()))
            }
        }
    }

    /// Ends the task and waits for its end: its outcome, if it came first.
    /// An acquire in it that still waits is withdrawn ([`Withdrawal`]) and
    /// this returns once the server holds nothing of it (or with the grant
    /// that raced the cancel), so that the caller's interrupt ends with
    /// nothing of its acquire left queued; a task with no acquire waiting,
    /// or whose withdrawal takes longer than [`WITHDRAW_WAIT`], is aborted
    /// (the runtime's acquire is cancel-safe). Not from a runtime thread.
    pub fn cancel(self) -> Option<T> {
        self.withdrawal.withdraw();
        if self.withdrawal.has_waiting() {
            if let Ok(value) = self.outcome.recv_timeout(WITHDRAW_WAIT) {
                return Some(value);
            }
        }
        self.task.abort();
        let _ = self.runtime.block_on(self.task);
        self.outcome.try_recv().ok()
    }
}

/// Runs `fut` to completion on the calling thread, outside the runtime, as
/// one [`hot_worker::call`]: its requests and replies are carried by the
/// runtime's thread, placed for it by [`near_caller`]. Waiting for a
/// reply, the caller spins first, as [`Sliced::wait`] does ([`spin`]):
/// Java's `unlock()` runs here, and with tokio's `block_on` it slept and
/// was woken for every release's reply: in a JVM-like loop of a Sliced
/// acquire and this release on Redis, an acquire+release took 1.26× to
/// 1.51× (p50, 209 to 275 µs) what it took with the release Sliced too,
/// interleaved; spinning here, 1.00× and 0.93×. Not from a runtime thread:
/// it would block that thread (panics, as tokio's does).
pub fn block_on<F: Future>(runtime: &tokio::runtime::Runtime, fut: F) -> F::Output {
    assert!(Handle::try_current().is_err(), "polylock::blocking::block_on called from within a tokio runtime");
    let _placed = near_caller::enter();
    let _in_flight = spin::InFlight::new();
    let _context = runtime.enter();
    let woken = Arc::new(Woken { flag: AtomicBool::new(false), thread: std::thread::current() });
    let waker = Waker::from(woken.clone());
    let mut cx = Context::from_waker(&waker);
    let mut fut = std::pin::pin!(hot_worker::call(fut));
    loop {
        if let Poll::Ready(value) = fut.as_mut().poll(&mut cx) {
            spin::outcome_taken();
            return value;
        }
        // Each wait of the future: a release waits for its reply, but its
        // future may be woken before that (and wait again).
        if spin::spin_for(|| if woken.take() { Polled::Ready(()) } else { Polled::NotYet }, SPIN).is_some() {
            continue;
        }
        spin::slept();
        while !woken.take() {
            std::thread::park();
        }
    }
}

/// [`block_on`]'s waker: a flag the spinning caller polls, and an unpark
/// for the sleeping one (no syscall while it is not parked).
struct Woken {
    flag: AtomicBool,
    thread: std::thread::Thread,
}

impl Woken {
    fn take(&self) -> bool {
        self.flag.swap(false, Ordering::Acquire)
    }
}

impl Wake for Woken {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.flag.store(true, Ordering::Release);
        self.thread.unpark();
    }
}

/// How often the runtime's worker threads have gone to sleep or woken so
/// far (tokio's park/unpark count): the bindings' hot-path tests count
/// these per call.
pub fn thread_wakes(runtime: &Handle) -> u64 {
    let metrics = runtime.metrics();
    (0..metrics.num_workers()).map(|w| metrics.worker_park_unpark_count(w)).sum()
}

/// The unit tests of this module and of [`hot_worker`] make calls that
/// move the process-wide counts and spells the latter's test counts
/// exactly: each holds this while it runs.
#[cfg(test)]
pub(crate) fn serial_test() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap()
    }

    #[test]
    fn a_slice_says_still_running_until_the_outcome_comes() {
        let _serial = serial_test();
        let rt = runtime();
        let (tx, rx) = tokio::sync::oneshot::channel::<u32>();
        let mut task = Sliced::spawn(rt.handle(), async move { rx.await.unwrap() + 1 });
        assert!(matches!(task.wait(Duration::from_millis(20)), Slice::StillRunning));
        tx.send(41).unwrap();
        assert!(matches!(task.wait(Duration::from_secs(5)), Slice::Done(42)));
    }

    #[test]
    fn a_panicking_task_is_a_failure_with_its_reason() {
        let _serial = serial_test();
        let rt = runtime();
        let mut task = Sliced::spawn(rt.handle(), async { panic!("boom") });
        match task.wait(Duration::from_secs(5)) {
            Slice::Failed(why) => assert!(why.contains("panic"), "{why}"),
            _ => panic!("expected a failure"),
        }
    }

    #[test]
    fn cancel_gives_back_an_outcome_that_came_first_and_none_otherwise() {
        let _serial = serial_test();
        let rt = runtime();
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        let finished = Sliced::spawn(rt.handle(), async move {
            let _ = done_tx.send(());
            7u32
        });
        // Past its last await: an abort now cannot stop it sending its outcome.
        done_rx.recv().unwrap();
        assert_eq!(finished.cancel(), Some(7));
        let pending = Sliced::spawn(rt.handle(), std::future::pending::<u32>());
        assert_eq!(pending.cancel(), None);
    }

    #[test]
    fn a_caller_does_not_spin_while_another_call_is_in_flight() {
        let _serial = serial_test();
        let rt = runtime();
        let other = Sliced::spawn(rt.handle(), std::future::pending::<u32>());
        for _ in 0..20 {
            let mut task = Sliced::spawn(rt.handle(), async { 1u32 });
            assert!(matches!(task.wait(Duration::from_secs(5)), Slice::Done(1)));
            assert!(!task.spun, "a caller spun beside another call in flight");
        }
        assert_eq!(other.cancel(), None);
    }

    /// Whether one call of `wait` (each says whether it spun) spins within 10 s:
    /// other tests of this binary have calls in flight for a while, and
    /// their misses make waits only probe.
    fn one_spins_within_10s(mut wait: impl FnMut() -> bool) -> bool {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        std::iter::repeat_with(&mut wait).take_while(|_| std::time::Instant::now() < deadline).any(|spun| spun)
    }

    #[test]
    fn a_quick_outcome_is_taken_while_spinning_and_a_slow_one_after_sleeping() {
        let _serial = serial_test();
        let rt = runtime();
        let spun = one_spins_within_10s(|| {
            let mut task = Sliced::spawn(rt.handle(), async { 1u32 });
            assert!(matches!(task.wait(Duration::from_secs(5)), Slice::Done(1)));
            task.spun
        });
        assert!(spun, "no quick outcome was taken while spinning");
        let mut task = Sliced::spawn(rt.handle(), async { tokio::time::sleep(SPIN * 5).await });
        assert!(matches!(task.wait(Duration::from_secs(5)), Slice::Done(())));
        assert!(!task.spun, "an outcome later than the spin was taken while spinning");
    }

    /// A future awaiting a reply that the runtime's thread sends (as a
    /// server's reply reaches a call run by [`block_on`]), `after` from now.
    fn reply_from_the_runtime(rt: &tokio::runtime::Runtime, after: Duration) -> impl Future<Output = u32> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        rt.spawn(async move {
            if !after.is_zero() {
                tokio::time::sleep(after).await;
            }
            let _ = tx.send(7u32);
        });
        async move { rx.await.unwrap() }
    }

    #[test]
    fn block_on_takes_a_quick_reply_while_spinning_and_a_slow_one_after_sleeping() {
        let _serial = serial_test();
        let rt = runtime();
        let spun = one_spins_within_10s(|| {
            let before = wait_counts();
            assert_eq!(block_on(&rt, reply_from_the_runtime(&rt, Duration::ZERO)), 7);
            wait_counts().spun > before.spun
        });
        assert!(spun, "block_on took no quick reply while spinning");
        let before = wait_counts();
        assert_eq!(block_on(&rt, reply_from_the_runtime(&rt, SPIN * 5)), 7);
        let after = wait_counts();
        assert_eq!(after.spun, before.spun, "a reply later than the spin was taken while spinning");
        assert!(after.slept > before.slept, "block_on waited for a slow reply without sleeping");
    }

    #[test]
    fn thread_wakes_count_the_workers_sleeping_and_waking() {
        let _serial = serial_test();
        let rt = runtime();
        let before = thread_wakes(rt.handle());
        for _ in 0..10 {
            let mut task = Sliced::spawn(rt.handle(), async { tokio::time::sleep(Duration::from_millis(2)).await });
            assert!(matches!(task.wait(Duration::from_secs(5)), Slice::Done(())));
        }
        assert!(thread_wakes(rt.handle()) > before);
    }
}
