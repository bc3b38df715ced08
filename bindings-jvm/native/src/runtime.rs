//! The one tokio runtime of the process: every client's connections and
//! timers live on it, and Java threads block on it with `block_on`, or wait
//! for a spawned task's outcome in slices ([`Sliced`]).

use std::future::Future;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::LazyLock;
use std::time::Duration;

use tokio::runtime::Runtime;
use tokio::task::JoinHandle;

static RUNTIME: LazyLock<Runtime> = LazyLock::new(|| {
    tokio::runtime::Builder::new_multi_thread()
        // Java threads do the blocking; the worker only drives I/O, timers
        // and the tasks of acquires. One worker: the task an acquire
        // spawns, the connection drivers and the reply's waker run on one
        // thread, so a call costs one wake-up of it and one of the Java
        // thread, not extra wake-ups between workers (as in the Python and
        // Node bindings; `RuntimeWakesTest` counts them).
        .worker_threads(1)
        .thread_name("polylock-io")
        .enable_all()
        .build()
        .expect("cannot start the polylock tokio runtime")
});

/// Runs `fut` to completion on the calling (Java) thread.
pub(crate) fn block_on<F: Future>(fut: F) -> F::Output {
    RUNTIME.block_on(fut)
}

/// Runs `fut` in the background on the runtime's worker.
pub(crate) fn spawn<F>(fut: F) -> JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    RUNTIME.spawn(fut)
}

/// The runtime thread's sleeps and wake-ups so far (tokio's park/unpark count).
pub(crate) fn wakes() -> u64 {
    let metrics = RUNTIME.metrics();
    (0..metrics.num_workers()).map(|w| metrics.worker_park_unpark_count(w)).sum()
}

/// A task whose outcome a Java thread waits for in slices (to answer
/// interrupts between them). The outcome comes over a std channel, waited
/// on with its own timeout: a tokio timer per slice would wake the
/// runtime's thread to re-arm its driver, one more wake-up per call.
pub(crate) struct Sliced<T> {
    task: JoinHandle<()>,
    outcome: mpsc::Receiver<T>,
}

/// Where a [`Sliced`] task is after a slice.
pub(crate) enum Slice<T> {
    Done(T),
    StillRunning,
    /// It ended without an outcome: it panicked (why).
    Failed(String),
}

impl<T: Send + 'static> Sliced<T> {
    pub(crate) fn spawn(fut: impl Future<Output = T> + Send + 'static) -> Self {
        let (tx, outcome) = mpsc::sync_channel(1);
        // A receiver gone drops the outcome: a guard in it gives its grant back.
        let task = spawn(async move {
            let _ = tx.send(fut.await);
        });
        Sliced { task, outcome }
    }

    /// Waits up to `slice` for the outcome.
    pub(crate) fn wait(&mut self, slice: Duration) -> Slice<T> {
        match self.outcome.recv_timeout(slice) {
            Ok(value) => Slice::Done(value),
            Err(RecvTimeoutError::Timeout) => Slice::StillRunning,
            Err(RecvTimeoutError::Disconnected) => {
                let why = block_on(&mut self.task).err().map_or_else(|| "no outcome".into(), |e| e.to_string());
                Slice::Failed(why)
            }
        }
    }

    /// Aborts the task and waits for its end: its outcome, if it came
    /// before the abort took effect.
    pub(crate) fn cancel(self) -> Option<T> {
        self.task.abort();
        let _ = block_on(self.task);
        self.outcome.try_recv().ok()
    }
}
