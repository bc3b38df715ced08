//! How every native method that goes to the server returns its promise.

use std::future::Future;

use napi::bindgen_prelude::{PromiseRaw, ToNapiValue};
use napi::Env;

/// Spawns `fut` on the runtime and returns its promise, settled on the
/// event loop's thread when the outcome comes, value or error.
pub(crate) fn server_call<'env, T, F>(env: &'env Env, fut: F) -> napi::Result<PromiseRaw<'env, T>>
where
    T: ToNapiValue + Send + 'static,
    F: Future<Output = napi::Result<T>> + Send + 'static,
{
    env.spawn_future_with_callback(async move { Ok(fut.await) }, |_, outcome: napi::Result<T>| outcome)
}
