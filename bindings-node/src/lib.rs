//! Node.js binding of polylock (napi-rs). This native layer is deliberately
//! thin: it maps the Rust runtime's `Client`/`Lock`/`Guard` and
//! `Semaphore`/`Permits` onto napi classes
//! and its errors onto JSON payloads (see `errors.rs`). The idiomatic JavaScript surface
//! (options objects, `AbortSignal`, `AsyncLocalStorage` reentrancy, error
//! classes, `Symbol.asyncDispose`) lives in `index.js`, which is the only
//! consumer of these exports.

mod call;
mod client;
mod election;
mod errors;
mod guard;
mod lock;
mod semaphore;

use napi_derive::napi;

pub use client::{connect, NativeClient, NativeClientOptions, NativeStatus};
pub use election::{NativeElection, NativeLeader, NativeLeadership};
pub use guard::NativeGuard;
pub use lock::{Canceller, NativeLock};
pub use semaphore::{NativePermits, NativeSemaphore};

/// Owner ids are the unit of reentrancy. The JS layer asks for a fresh one per
/// async context; the runtime's one process-wide allocator keeps them unique
/// across `worker_threads` too (they share this library) and across the
/// other bindings, and never reuses one.
#[napi]
pub fn next_owner_id() -> i64 {
    // Ids count up from 1: far below 2^53, a safe integer for JavaScript.
    polylock::OwnerId::fresh().0 as i64
}

/// The tokio runtime every native promise runs on: one worker thread. The
/// binding's work is I/O-bound and short; with a single worker the task a
/// call spawns, the Redis/ZooKeeper connection driver and the reply's waker
/// all run on the same thread, so each call costs one hop from the JS thread
/// and one back, not extra wake-ups between tokio workers. The thread sleeps
/// in epoll whenever it has no work.
#[napi_derive::module_init]
fn init() {
    if let Ok(rt) = polylock::blocking::binding_runtime("polylock-rt") {
        napi::bindgen_prelude::create_custom_tokio_runtime(rt);
    }
}
