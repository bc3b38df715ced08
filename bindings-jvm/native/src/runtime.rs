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
    // the tasks of acquires (`RuntimeWakesTest` counts its wake-ups). No
    // placement near the caller: a Java thread confined to its CPU waited
    // behind the JVM's own threads there (see polylock::blocking::near_caller).
    polylock::blocking::binding_runtime("polylock-io", false).expect("cannot start the polylock tokio runtime")
});

/// Runs `fut` to completion on the calling (Java) thread
/// (`polylock::blocking::block_on`): its requests and replies are carried by the worker.
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

/// The runtime thread's sleeps and wake-ups so far (tokio's park/unpark count).
pub(crate) fn wakes() -> u64 {
    polylock::blocking::thread_wakes(RUNTIME.handle())
}

/// How many spinners' yields found their core taken by another process so
/// far (for the hot-path test: such a yield pauses spinning for a while).
pub(crate) fn contended_yields() -> u64 {
    polylock::blocking::contended_yields()
}

/// How the runtime's thread was kept awake so far, for a failing hot-path
/// test to print.
pub(crate) fn hot_counts() -> String {
    format!("{:?}", polylock::blocking::hot_worker::hot_counts())
}

/// Outcomes Java threads took while spinning so far, never sleeping for
/// them: `lock()`'s ([`sliced`]) and `unlock()`'s ([`block_on`]).
pub(crate) fn caller_spins() -> u64 {
    polylock::blocking::wait_counts().spun
}

/// Spawns `fut` for a Java thread to wait on in slices (to answer interrupts).
pub(crate) fn sliced<T: Send + 'static>(fut: impl Future<Output = T> + Send + 'static) -> Sliced<T> {
    Sliced::spawn(RUNTIME.handle(), fut)
}
