//! `NativeLock` (one lock name of one client) and `Canceller`, the native end
//! of an `AbortSignal`: cancelling drops the runtime's acquire future, which
//! is cancel-safe (nothing is left on the server, a racing grant is given back).

use napi::bindgen_prelude::PromiseRaw;
use napi::Env;
use napi_derive::napi;

use crate::call::server_call;
use crate::errors::{binding_error, millis, NapiErrorExt};
use crate::guard::NativeGuard;
use polylock::ErrorKind;

#[napi]
pub struct NativeLock {
    lock: polylock::Lock,
}

impl NativeLock {
    pub(crate) fn new(lock: polylock::Lock) -> Self {
        NativeLock { lock }
    }
}

pub(crate) fn owner_id(owner: i64) -> napi::Result<polylock::OwnerId> {
    u64::try_from(owner).ok().filter(|o| *o > 0).map(polylock::OwnerId).ok_or_else(|| {
        binding_error(ErrorKind::InvalidOption, format!("owner id must be a positive integer, got {owner}"))
    })
}

#[napi]
impl NativeLock {
    #[napi(getter)]
    pub fn name(&self) -> String {
        self.lock.name().to_owned()
    }

    /// Acquires for `owner`. `timeout_ms`: absent waits forever, 0 tries once.
    /// The path without an `AbortSignal`: no canceller to allocate or watch.
    #[napi]
    pub fn acquire<'env>(
        &self,
        env: &'env Env,
        owner: i64,
        timeout_ms: Option<f64>,
    ) -> napi::Result<PromiseRaw<'env, NativeGuard>> {
        let owner = owner_id(owner)?;
        let timeout = timeout_ms.map(|ms| millis("timeoutMs", ms)).transpose()?;
        let lock = self.lock.clone();
        server_call(env, async move {
            let g = lock.acquire_as(owner, timeout).await.napi_err()?;
            Ok(NativeGuard::new(lock, g))
        })
    }

    /// Like `acquire`; `canceller.cancel()` withdraws the wait: the promise
    /// rejects `Cancelled` once the server holds nothing of it, or settles
    /// with the grant that came first (api.js gives that back).
    #[napi]
    pub fn acquire_cancellable<'env>(
        &self,
        env: &'env Env,
        owner: i64,
        timeout_ms: Option<f64>,
        canceller: &Canceller,
    ) -> napi::Result<PromiseRaw<'env, NativeGuard>> {
        let owner = owner_id(owner)?;
        let timeout = timeout_ms.map(|ms| millis("timeoutMs", ms)).transpose()?;
        let lock = self.lock.clone();
        let withdrawal = canceller.withdrawal.clone();
        server_call(env, async move {
            let g = withdrawal.scope(lock.acquire_as(owner, timeout)).await.napi_err()?;
            Ok(NativeGuard::new(lock, g))
        })
    }

    /// How many times `owner` holds this lock in this client.
    #[napi]
    pub fn hold_count(&self, owner: i64) -> napi::Result<u32> {
        Ok(self.lock.hold_count(owner_id(owner)?))
    }

    /// Whether any owner of this client holds the lock.
    #[napi]
    pub fn is_held_locally(&self) -> bool {
        self.lock.is_held_locally()
    }
}

/// Withdraws the acquire it was passed to ([`polylock::Withdrawal`]);
/// cancelling after the grant does nothing, and so does a canceller that
/// is dropped (garbage-collected) without being cancelled.
#[napi]
pub struct Canceller {
    pub(crate) withdrawal: polylock::Withdrawal,
}

#[napi]
impl Canceller {
    #[napi(constructor)]
    #[allow(clippy::new_without_default)]
    pub fn new() -> Self {
        Canceller { withdrawal: polylock::Withdrawal::new() }
    }

    #[napi]
    pub fn cancel(&self) {
        self.withdrawal.withdraw();
    }
}
