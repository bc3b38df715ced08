//! The one tokio runtime of the process: every client's connections and
//! timers live on it, and Java threads block on it with `block_on`, or wait
//! for a spawned task's outcome in slices ([`sliced`]).

use std::future::Future;
use std::sync::LazyLock;

pub(crate) use polylock::blocking::{Slice, Sliced};
use tokio::runtime::Runtime;
use tokio::task::JoinHandle;

static RUNTIME: LazyLock<Runtime> = LazyLock::new(|| {
    // Java threads do the blocking; the worker only drives I/O, timers and
    // the tasks of acquires.
    polylock::blocking::binding_runtime("polylock-io").expect("cannot start the polylock tokio runtime")
});

/// Runs `fut` to completion on the calling (Java) thread, which sleeps while
/// it waits (`polylock::blocking::block_on`); the worker carries its I/O.
pub(crate) fn block_on<F: Future>(fut: F) -> F::Output {
    polylock::blocking::block_on(&RUNTIME, fut)
}

/// Runs `fut` in the background on the runtime's worker.
pub(crate) fn spawn<F>(fut: F) -> JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    RUNTIME.spawn(fut)
}

/// Spawns `fut` for a Java thread to wait on in slices (to answer interrupts).
pub(crate) fn sliced<T: Send + 'static>(fut: impl Future<Output = T> + Send + 'static) -> Sliced<T> {
    Sliced::spawn(RUNTIME.handle(), fut)
}
