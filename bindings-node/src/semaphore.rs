//! `NativeSemaphore` (one semaphore name of one client) and `NativePermits`,
//! one grant of `count` permits. The runtime's `Permits` releases when
//! dropped; a JS guard that is garbage-collected without `release()` must
//! not give its permits back behind the code that still runs under them
//! (as with `NativeGuard`), so the grants live in their client's
//! [`Grants`], and a `NativePermits` names its grant there by id.
//! `client.close()` releases whatever is left.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::call::server_call;
use napi::bindgen_prelude::{BigInt, Function, PromiseRaw};
use napi::threadsafe_function::ThreadsafeFunctionCallMode;
use napi::Env;
use napi_derive::napi;
use polylock::{ErrorKind, LossWatch, Permits};

use crate::errors::{binding_error, millis, to_napi, NapiErrorExt};
use crate::lock::Canceller;

/// The permits a client's JS guards hold, by grant id; `None` once the
/// client is closed (a grant that arrives later is dropped, which releases it).
#[derive(Default)]
pub(crate) struct Grants {
    held: Mutex<Option<HashMap<u64, Permits>>>,
}

impl Grants {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Grants { held: Mutex::new(Some(HashMap::new())) })
    }

    /// Keeps `permits` under a fresh id; `Closed` if the client is.
    fn keep(&self, permits: Permits) -> polylock::Result<u64> {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        let held = held.as_mut().ok_or(polylock::Error::Closed)?;
        let id = NEXT.fetch_add(1, Ordering::Relaxed);
        held.insert(id, permits);
        Ok(id)
    }

    fn take(&self, id: u64) -> Option<Permits> {
        self.held.lock().unwrap_or_else(|e| e.into_inner()).as_mut()?.remove(&id)
    }

    /// Every grant left, and no more keeping: the client is closing.
    pub(crate) fn close(&self) -> Vec<Permits> {
        let held = self.held.lock().unwrap_or_else(|e| e.into_inner()).take();
        held.map(|h| h.into_values().collect()).unwrap_or_default()
    }
}

/// A count of permits from JavaScript (a double): an integer that fits a
/// `u32`. Whether it fits the semaphore (1 to its permits) is the runtime's call.
pub(crate) fn permit_count(what: &str, n: f64) -> napi::Result<u32> {
    if n.fract() != 0.0 || !(0.0..=f64::from(u32::MAX)).contains(&n) {
        return Err(binding_error(
            ErrorKind::InvalidOption,
            format!("{what} must be a whole number of permits, got {n}"),
        ));
    }
    Ok(n as u32)
}

#[napi]
pub struct NativeSemaphore {
    sem: polylock::Semaphore,
    grants: Arc<Grants>,
}

impl NativeSemaphore {
    pub(crate) fn new(sem: polylock::Semaphore, grants: Arc<Grants>) -> Self {
        NativeSemaphore { sem, grants }
    }
}

/// What an acquire resolves to: the grant, kept in the client's `Grants`.
fn granted(sem: &polylock::Semaphore, grants: Arc<Grants>, permits: Permits) -> napi::Result<NativePermits> {
    let (token, count, loss) = (permits.fencing_token(), permits.count(), permits.loss_watch());
    let id = grants.keep(permits).napi_err()?;
    Ok(NativePermits { grants, id, name: sem.name().to_owned(), token, count, loss, released: AtomicBool::new(false) })
}

#[napi]
impl NativeSemaphore {
    #[napi(getter)]
    pub fn name(&self) -> String {
        self.sem.name().to_owned()
    }

    /// The number of permits every client of this name must agree on.
    #[napi(getter)]
    pub fn permits(&self) -> u32 {
        self.sem.permits()
    }

    /// Acquires `count` permits. `timeout_ms`: absent waits forever, 0 tries once.
    #[napi]
    pub fn acquire<'env>(
        &self,
        env: &'env Env,
        count: f64,
        timeout_ms: Option<f64>,
    ) -> napi::Result<PromiseRaw<'env, NativePermits>> {
        let count = permit_count("count", count)?;
        let timeout = timeout_ms.map(|ms| millis("timeoutMs", ms)).transpose()?;
        let (sem, grants) = (self.sem.clone(), self.grants.clone());
        server_call(env, async move {
            let p = sem.acquire_for(count, timeout).await.napi_err()?;
            granted(&sem, grants, p)
        })
    }

    /// Like `acquire`; `canceller.cancel()` withdraws the wait: the promise
    /// rejects `Cancelled` once the server holds nothing of it, or settles
    /// with the grant that came first (api.js gives that back).
    #[napi]
    pub fn acquire_cancellable<'env>(
        &self,
        env: &'env Env,
        count: f64,
        timeout_ms: Option<f64>,
        canceller: &Canceller,
    ) -> napi::Result<PromiseRaw<'env, NativePermits>> {
        let count = permit_count("count", count)?;
        let timeout = timeout_ms.map(|ms| millis("timeoutMs", ms)).transpose()?;
        let (sem, grants) = (self.sem.clone(), self.grants.clone());
        let withdrawal = canceller.withdrawal.clone();
        server_call(env, async move {
            let p = withdrawal.scope(sem.acquire_for(count, timeout)).await.napi_err()?;
            granted(&sem, grants, p)
        })
    }
}

/// One grant of `count` permits, named by its id in the client's `Grants`.
#[napi]
pub struct NativePermits {
    grants: Arc<Grants>,
    id: u64,
    name: String,
    token: u64,
    count: u32,
    loss: LossWatch,
    released: AtomicBool,
}

#[napi]
impl NativePermits {
    /// The fencing token of this grant.
    #[napi(getter)]
    pub fn fencing_token(&self) -> BigInt {
        BigInt::from(self.token)
    }

    /// How many permits this grant holds.
    #[napi(getter)]
    pub fn count(&self) -> u32 {
        self.count
    }

    /// Why the permits were lost, or null while they are not.
    #[napi(getter)]
    pub fn lost_reason(&self) -> Option<String> {
        self.loss.reason().map(|r| r.to_string())
    }

    /// Calls `callback(reason)` once if the permits are lost; a weak
    /// threadsafe function, as `NativeGuard::on_lost`'s. Through
    /// `LossWatch::on_loss`, as a guard's: no task waits per signal while
    /// the permits are held, and the runtime drops the callback uncalled
    /// when they are released.
    #[napi]
    pub fn on_lost(&self, callback: Function<String, ()>) -> napi::Result<()> {
        let tsfn = callback.build_threadsafe_function::<String>().callee_handled::<false>().weak::<true>().build()?;
        self.loss.on_loss(move |reason| {
            tsfn.call(reason.to_string(), ThreadsafeFunctionCallMode::NonBlocking);
        });
        Ok(())
    }

    /// Gives the permits back and waits for the server. Rejects `Lost` if
    /// they were lost while held, `NotHeld` if this guard was already
    /// released, `Closed` if the client was closed (which released them).
    #[napi]
    pub fn release<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, ()>> {
        if self.released.swap(true, Ordering::SeqCst) {
            return Err(binding_error(
                ErrorKind::NotHeld,
                format!("this guard of semaphore {:?} was already released", self.name),
            ));
        }
        let permits = self.grants.take(self.id).ok_or_else(|| to_napi(polylock::Error::Closed))?;
        server_call(env, async move { permits.release().await.napi_err() })
    }
}
