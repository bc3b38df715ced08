//! Node.js binding of polylock (napi-rs). This native layer is deliberately
//! thin: it maps the Rust runtime's `Client`/`Lock`/`Guard` onto napi classes
//! and its errors onto tagged messages. The idiomatic JavaScript surface
//! (options objects, `AbortSignal`, `AsyncLocalStorage` reentrancy, error
//! classes, `Symbol.asyncDispose`) lives in `index.js`, which is the only
//! consumer of these exports.

mod client;
mod errors;
mod guard;
mod lock;

use std::sync::atomic::{AtomicI64, Ordering};

use napi_derive::napi;

pub use client::{connect, NativeClient, NativeClientOptions, NativeStatus};
pub use guard::NativeGuard;
pub use lock::{Canceller, NativeLock};

/// Owner ids are the unit of reentrancy. The JS layer asks for a fresh one per
/// async context; one process-wide counter keeps them unique across
/// `worker_threads` too (they share this library), and never reuses one.
static NEXT_OWNER: AtomicI64 = AtomicI64::new(1);

/// A new process-unique owner id (a safe integer for JavaScript).
#[napi]
pub fn next_owner_id() -> i64 {
    NEXT_OWNER.fetch_add(1, Ordering::Relaxed)
}

/// The tokio runtime every native promise runs on: one worker thread. The
/// binding's work is I/O-bound and short; with a single worker the task a
/// call spawns, the Redis/ZooKeeper connection driver and the reply's waker
/// all run on the same thread, so each call costs one hop from the JS thread
/// and one back, not extra wake-ups between tokio workers (measured: about
/// half the per-call overhead of napi's default runtime on 2 cores).
#[napi_derive::module_init]
fn init() {
    if let Ok(rt) = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build() {
        napi::bindgen_prelude::create_custom_tokio_runtime(rt);
    }
}
