//! `NativeGuard`: one hold of a lock by one owner. It keeps the owner rather
//! than the runtime's `Guard`, and releases with `release_as`: a JS guard that
//! is garbage-collected without `release()` must not free the lock behind the
//! code that still runs under it (V8 may collect a guard whose variable is
//! no longer read). `client.close()` releases whatever is left.

use std::sync::atomic::{AtomicBool, Ordering};

use napi::bindgen_prelude::{BigInt, Function, PromiseRaw};
use napi::threadsafe_function::ThreadsafeFunctionCallMode;
use napi::Env;
use napi_derive::napi;
use polylock::{LossReason, OwnerId};
use tokio::sync::watch;

use crate::errors::{binding_error, to_napi, NapiErrorExt};
use polylock::ErrorKind;

#[napi]
pub struct NativeGuard {
    lock: polylock::Lock,
    owner: OwnerId,
    token: u64,
    loss: watch::Receiver<Option<LossReason>>,
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
        self.loss.borrow().map(|r| r.to_string())
    }

    /// Calls `callback(reason)` once if the lock is lost. The JS layer asks
    /// for it only when `guard.signal` is read. The threadsafe function is a
    /// weak one: what keeps the process alive while a lock is held is the JS
    /// client's keep-alive handle (ref'd while it has unreleased guards), so
    /// this one never outlives the hold's usefulness. The watch ends with the
    /// hold (the runtime drops the sender on release, loss or `close()`).
    #[napi]
    pub fn on_lost(&self, callback: Function<String, ()>) -> napi::Result<()> {
        let tsfn = callback.build_threadsafe_function::<String>().callee_handled::<false>().weak::<true>().build()?;
        let mut rx = self.loss.clone();
        napi::bindgen_prelude::spawn(async move {
            loop {
                if let Some(reason) = *rx.borrow_and_update() {
                    tsfn.call(reason.to_string(), ThreadsafeFunctionCallMode::NonBlocking);
                    return;
                }
                if rx.changed().await.is_err() {
                    return;
                }
            }
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
        let lock = self.lock.clone();
        let owner = self.owner;
        let loss = self.loss.clone();
        env.spawn_future(async move {
            match lock.release_as(owner).await {
                // The loss may have landed between the check above and the release.
                Err(polylock::Error::NotHeld(_)) if loss.borrow().is_some() => {
                    let reason = loss.borrow().expect("checked");
                    Err(to_napi(polylock::Error::Lost { name: lock.name().to_owned(), reason }))
                }
                r => r.napi_err(),
            }
        })
    }
}
