//! How every native method that goes to the server returns its promise.

use std::future::Future;

use napi::bindgen_prelude::{PromiseRaw, ToNapiValue};
use napi::Env;
use polylock::blocking::hot_worker;
use polylock::blocking::near_caller;

/// Spawns `fut` on the runtime as one call of the binding
/// ([`hot_worker::call`]: a busy spell keeps the runtime's thread awake)
/// and returns its promise. A lone call after quiet keeps this thread on
/// its CPU for the outcome's wake-up ([`near_caller::EventLoopCall`]): the
/// outcome comes back through a callback on this thread, where the call's
/// placement ends, whether the outcome is a value or an error.
pub(crate) fn server_call<'env, T, F>(env: &'env Env, fut: F) -> napi::Result<PromiseRaw<'env, T>>
where
    T: ToNapiValue + Send + 'static,
    F: Future<Output = napi::Result<T>> + Send + 'static,
{
    let mut placed = near_caller::enter_from_event_loop();
    env.spawn_future_with_callback(
        hot_worker::call(async move {
            let outcome = fut.await;
            placed.before_waking_caller();
            Ok((outcome, placed))
        }),
        |_, (outcome, placed): (napi::Result<T>, near_caller::EventLoopCall)| {
            drop(placed);
            outcome
        },
    )
}
