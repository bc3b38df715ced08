//! `NativeGuard`: one hold of a lock by one owner. It keeps the owner and
//! its grant's token rather than the runtime's `Guard`, and releases with
//! `release_grant`: a JS guard that is garbage-collected without `release()`
//! must not free the lock behind the code that still runs under it (V8 may
//! collect a guard whose variable is no longer read). `client.close()`
//! releases whatever is left. Releasing by token means a stale guard reports
//! its own grant's loss (the runtime says `Lost`) and never ends a newer one.

use std::sync::atomic::{AtomicBool, Ordering};

use crate::call::server_call;
use napi::bindgen_prelude::{BigInt, Function, PromiseRaw};
use napi::threadsafe_function::ThreadsafeFunctionCallMode;
use napi::Env;
use napi_derive::napi;
use polylock::{LossWatch, OwnerId};

use crate::errors::{binding_error, NapiErrorExt};
use polylock::ErrorKind;

#[napi]
pub struct NativeGuard {
    lock: polylock::Lock,
    owner: OwnerId,
    token: u64,
    loss: LossWatch,
    released: AtomicBool,
}

impl NativeGuard {
    pub(crate) fn new(lock: polylock::Lock, guard: polylock::Guard) -> Self {
        let owner = guard.owner();
        let loss = guard.loss_watch();
        let token = guard.into_token();
        NativeGuard { lock, owner, token, loss, released: AtomicBool::new(false) }
    }
}

#[napi]
impl NativeGuard {
    /// The fencing token of this grant.
    #[napi(getter)]
    pub fn fencing_token(&self) -> BigInt {
        BigInt::from(self.token)
    }

    /// Why the lock was lost, or null while it is not.
    #[napi(getter)]
    pub fn lost_reason(&self) -> Option<String> {
        self.loss.reason().map(|r| r.to_string())
    }

    /// Calls `callback(reason)` once if the lock is lost. The JS layer asks
    /// for it only when `guard.signal` is read. The threadsafe function is a
    /// weak one: what keeps the process alive while a lock is held is the JS
    /// client's keep-alive handle (ref'd while it has unreleased guards), so
    /// this one never outlives the hold's usefulness. The runtime drops the
    /// callback uncalled when the hold is released (by `release()` or `close()`).
    #[napi]
    pub fn on_lost(&self, callback: Function<String, ()>) -> napi::Result<()> {
        let tsfn = callback.build_threadsafe_function::<String>().callee_handled::<false>().weak::<true>().build()?;
        self.loss.on_loss(move |reason| {
            tsfn.call(reason.to_string(), ThreadsafeFunctionCallMode::NonBlocking);
        });
        Ok(())
    }

    /// Ends this hold and waits for the server. Rejects `Lost` if the lock was
    /// lost while held, `NotHeld` if this guard was already released.
    #[napi]
    pub fn release<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, ()>> {
        if self.released.swap(true, Ordering::SeqCst) {
            return Err(binding_error(
                ErrorKind::NotHeld,
                format!("this guard of lock {:?} was already released", self.lock.name()),
            ));
        }
        // Lost or not, the release goes through the runtime: it is what
        // takes the loss report, so the lock's state can be dropped.
        let (lock, owner, token) = (self.lock.clone(), self.owner, self.token);
        server_call(env, async move { lock.release_grant(owner, token).await.napi_err() })
    }
}
