//! For callers on threads outside the runtime (the Python and JVM
//! bindings): run a future on the runtime and wait for its outcome in
//! slices, so that the caller can answer an interrupt between them.
//!
//! The outcome comes over a std channel, waited on with its own timeout. A
//! tokio timer per slice would wake the runtime's thread to re-arm its
//! driver, one more wake-up per call; [`thread_wakes`] counts them.

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
}

/// Where a [`Sliced`] task is after a slice.
pub enum Slice<T> {
    Done(T),
    StillRunning,
    /// It ended without an outcome: it panicked (why).
    Failed(String),
}

impl<T: Send + 'static> Sliced<T> {
    /// Spawns `fut` on `runtime`.
    pub fn spawn(runtime: &Handle, fut: impl Future<Output = T> + Send + 'static) -> Self {
        let (tx, outcome) = mpsc::sync_channel(1);
        let task = runtime.spawn(async move {
            let _ = tx.send(fut.await);
        });
        Sliced { runtime: runtime.clone(), task, outcome }
    }

    /// Waits up to `slice` for the outcome. Not from a runtime thread.
    pub fn wait(&mut self, slice: Duration) -> Slice<T> {
        match self.outcome.recv_timeout(slice) {
            Ok(value) => Slice::Done(value),
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

/// How often the runtime's worker threads have gone to sleep or woken so
/// far (tokio's park/unpark count): the bindings' hot-path tests count
/// these per call.
pub fn thread_wakes(runtime: &Handle) -> u64 {
    let metrics = runtime.metrics();
    (0..metrics.num_workers()).map(|w| metrics.worker_park_unpark_count(w)).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap()
    }

    #[test]
    fn a_slice_says_still_running_until_the_outcome_comes() {
        let rt = runtime();
        let (tx, rx) = tokio::sync::oneshot::channel::<u32>();
        let mut task = Sliced::spawn(rt.handle(), async move { rx.await.unwrap() + 1 });
        assert!(matches!(task.wait(Duration::from_millis(20)), Slice::StillRunning));
        tx.send(41).unwrap();
        assert!(matches!(task.wait(Duration::from_secs(5)), Slice::Done(42)));
    }

    #[test]
    fn a_panicking_task_is_a_failure_with_its_reason() {
        let rt = runtime();
        let mut task = Sliced::spawn(rt.handle(), async { panic!("boom") });
        match task.wait(Duration::from_secs(5)) {
            Slice::Failed(why) => assert!(why.contains("panic"), "{why}"),
            _ => panic!("expected a failure"),
        }
    }

    #[test]
    fn cancel_gives_back_an_outcome_that_came_first_and_none_otherwise() {
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
    fn thread_wakes_count_the_workers_sleeping_and_waking() {
        let rt = runtime();
        let before = thread_wakes(rt.handle());
        for _ in 0..10 {
            let mut task = Sliced::spawn(rt.handle(), async { tokio::time::sleep(Duration::from_millis(2)).await });
            assert!(matches!(task.wait(Duration::from_secs(5)), Slice::Done(())));
        }
        assert!(thread_wakes(rt.handle()) > before);
    }
}
