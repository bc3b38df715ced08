//! The one tokio runtime of the process: every client's connections and
//! timers live on it, and Java threads block on it with `block_on`.

use std::future::Future;
use std::sync::LazyLock;

use tokio::runtime::Runtime;

static RUNTIME: LazyLock<Runtime> = LazyLock::new(|| {
    tokio::runtime::Builder::new_multi_thread()
        // Java threads do the blocking; the workers only drive I/O.
        .worker_threads(std::thread::available_parallelism().map_or(2, |n| n.get()).clamp(2, 4))
        .thread_name("polylock-io")
        .enable_all()
        .build()
        .expect("cannot start the polylock tokio runtime")
});

/// Runs `fut` to completion on the calling (Java) thread.
pub(crate) fn block_on<F: Future>(fut: F) -> F::Output {
    RUNTIME.block_on(fut)
}

/// Runs `fut` in the background on the runtime's workers.
pub(crate) fn spawn<F>(fut: F) -> tokio::task::JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    RUNTIME.spawn(fut)
}
