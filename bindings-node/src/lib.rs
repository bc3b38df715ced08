//! Node.js binding of polylock (napi-rs). This native layer is deliberately
//! thin: it maps the Rust runtime's `Client`/`Lock`/`Guard` and
//! `Semaphore`/`Permits` onto napi classes
//! and its errors onto JSON payloads (see `errors.rs`). The idiomatic JavaScript surface
//! (options objects, `AbortSignal`, `AsyncLocalStorage` reentrancy, error
//! classes, `Symbol.asyncDispose`) lives in `index.js`, which is the only
//! consumer of these exports.

mod call;
mod client;
mod errors;
mod guard;
mod lock;
mod semaphore;

use napi_derive::napi;

pub use client::{connect, NativeClient, NativeClientOptions, NativeStatus};
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
/// and one back, not extra wake-ups between tokio workers (measured: about
/// half the per-call overhead of napi's default runtime on 2 cores). Every
/// call that goes to the server runs through `call::server_call`: a busy
/// spell keeps that thread awake, so the hop there costs no wake-up, and a
/// lone call after quiet wakes this thread on its own CPU.
#[napi_derive::module_init]
fn init() {
    if let Ok(rt) = polylock::blocking::binding_runtime("polylock-rt", true) {
        let _ = RUNTIME.set(rt.handle().clone());
        napi::bindgen_prelude::create_custom_tokio_runtime(rt);
    }
}

static RUNTIME: std::sync::OnceLock<tokio::runtime::Handle> = std::sync::OnceLock::new();

/// Tests: how often the runtime's thread has gone to sleep or woken so far.
#[napi]
pub fn runtime_wakes() -> f64 {
    RUNTIME.get().map_or(0.0, |h| polylock::blocking::thread_wakes(h) as f64)
}

/// Tests: how many lone calls after quiet had this thread kept on its CPU
/// for their outcome's wake-up so far.
#[napi]
pub fn loop_wakeups_placed() -> f64 {
    polylock::blocking::near_caller::loop_wakeups_placed() as f64
}

/// Tests: how the runtime's thread was kept awake between calls so far.
#[napi(object)]
pub struct HotCounts {
    pub spells: f64,
    pub ended_while_spinning: f64,
    pub missed: f64,
    /// Spinners' yields that found their core taken by another process,
    /// after each of which spinning pauses for a while.
    pub contended_yields: f64,
}

/// Tests: see `HotCounts`.
#[napi]
pub fn hot_counts() -> HotCounts {
    let c = polylock::blocking::hot_worker::hot_counts();
    HotCounts {
        spells: c.spells as f64,
        ended_while_spinning: c.ended_while_spinning as f64,
        missed: c.missed as f64,
        contended_yields: polylock::blocking::contended_yields() as f64,
    }
}
