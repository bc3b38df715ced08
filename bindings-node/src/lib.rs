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
