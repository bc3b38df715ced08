//! For callers on threads outside the runtime. The Python and JVM bindings
//! block: they run a future on the runtime and wait for its outcome in
//! slices ([`Sliced`]), so that the caller can answer an interrupt (Ctrl-C,
//! `Thread.interrupt()`) between them. The Node binding's event loop does
//! not block; it spawns its calls on the runtime itself.
//!
//! A waiting caller sleeps: on a channel for a [`Sliced`] outcome, parked by
//! tokio for [`block_on`]. Nothing here spins, and nothing touches the
//! placement or priority of any thread: the host process belongs to the
//! application (as with redis-py, Lettuce, ioredis, Redisson and Curator).

use std::future::Future;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::task::JoinHandle;

use crate::Withdrawal;

/// The runtime a binding runs its calls on: one named worker thread, which
/// sleeps in epoll whenever it has no work. One is enough for I/O plus a
/// few microseconds of table code per reply, and it keeps polylock's
/// footprint in the host process to one thread (plus tokio's blocking pool,
/// started only for a DNS lookup).
pub fn binding_runtime(thread_name: &str) -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().thread_name(thread_name).build()
}

/// A future spawned on a runtime, whose outcome a foreign thread waits for.
/// Dropped, it leaves the task running: its outcome is dropped when it
/// comes (a guard in it gives its grant back).
pub struct Sliced<T> {
    runtime: Handle,
    task: JoinHandle<()>,
    /// Withdraws the task's waiting acquires on [`Self::cancel`].
    withdrawal: Withdrawal,
    outcome: mpsc::Receiver<T>,
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

impl<T: Send + 'static> Sliced<T> {
    /// Spawns `fut` on `runtime`; [`Self::wait`] takes its outcome.
    pub fn spawn(runtime: &Handle, fut: impl Future<Output = T> + Send + 'static) -> Self {
        let (tx, outcome) = mpsc::sync_channel(1);
        let withdrawal = Withdrawal::new();
        let scope = withdrawal.clone();
        let task = runtime.spawn(async move {
            let _ = tx.send(scope.scope(fut).await);
        });
        Sliced { runtime: runtime.clone(), task, withdrawal, outcome }
    }

    /// Sleeps up to `slice` for the outcome. Not from a runtime thread.
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

/// Runs `fut` to completion on the calling thread, which sleeps while the
/// future waits (tokio's `Runtime::block_on`; the runtime's worker carries
/// the I/O). For calls that need no interrupt, such as Java's `unlock()`.
/// Not from a runtime thread (panics, as tokio's does).
pub fn block_on<F: Future>(runtime: &tokio::runtime::Runtime, fut: F) -> F::Output {
    runtime.block_on(fut)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runtime() -> tokio::runtime::Runtime {
        binding_runtime("polylock-test").unwrap()
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
    fn block_on_returns_a_reply_the_runtime_sends() {
        let rt = runtime();
        let (tx, rx) = tokio::sync::oneshot::channel();
        rt.spawn(async move {
            tokio::time::sleep(Duration::from_millis(5)).await;
            let _ = tx.send(7u32);
        });
        assert_eq!(block_on(&rt, async { rx.await.unwrap() }), 7);
    }
}
