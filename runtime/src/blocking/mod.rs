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
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::task::JoinHandle;

/// A future spawned on a runtime, whose outcome a foreign thread waits for.
/// Dropped, it leaves the task running: its outcome is dropped when it
/// comes (a guard in it gives its grant back).
pub struct Sliced<T> {
    runtime: Handle,
    task: JoinHandle<()>,
    outcome: mpsc::Receiver<T>,
    /// Whether the first slice has begun: only it spins.
    waited: bool,
    /// Whether the outcome was taken while spinning.
    spun: bool,
    _in_flight: spin::InFlight,
    /// Dropped with the task, on the caller's thread once it has the outcome.
    _placed: near_caller::Placement,
}

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
        let task = runtime.spawn(hot_worker::call(async move {
            let _ = tx.send(fut.await);
        }));
        Sliced {
            runtime: runtime.clone(),
            task,
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

    /// Aborts the task and waits for its end: its outcome, if it came
    /// before the abort took effect. Not from a runtime thread.
    pub fn cancel(self) -> Option<T> {
        self.task.abort();
        let _ = self.runtime.block_on(self.task);
        self.outcome.try_recv().ok()
    }
}

/// Runs `fut` to completion on the calling thread, outside the runtime, as
/// one [`hot_worker::call`]: its requests and replies are carried by the
/// runtime's thread, placed for it by [`near_caller`].
pub fn block_on<F: Future>(runtime: &tokio::runtime::Runtime, fut: F) -> F::Output {
    let _placed = near_caller::enter();
    runtime.block_on(hot_worker::call(fut))
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

    #[test]
    fn a_quick_outcome_is_taken_while_spinning_and_a_slow_one_after_sleeping() {
        let _serial = serial_test();
        let rt = runtime();
        // Other tests of this binary have calls in flight for a while (and
        // their misses make waits only probe): try until one spins.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let spun = std::iter::repeat_with(|| {
            let mut task = Sliced::spawn(rt.handle(), async { 1u32 });
            assert!(matches!(task.wait(Duration::from_secs(5)), Slice::Done(1)));
            task.spun
        })
        .take_while(|_| std::time::Instant::now() < deadline)
        .any(|spun| spun);
        assert!(spun, "no quick outcome was taken while spinning");
        let mut task = Sliced::spawn(rt.handle(), async { tokio::time::sleep(SPIN * 5).await });
        assert!(matches!(task.wait(Duration::from_secs(5)), Slice::Done(())));
        assert!(!task.spun, "an outcome later than the spin was taken while spinning");
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
