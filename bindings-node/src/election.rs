//! `NativeElection` (one election name of one client) and
//! `NativeLeadership`, one participant's leadership. A campaign is the
//! runtime's: a fresh participant each time, withdrawn from the server when
//! its `Canceller` fires. The runtime's `Leadership` resigns when dropped;
//! a JS leadership that is garbage-collected without `resign()` must not
//! end the leadership behind the code that still leads (as with
//! `NativeGuard`), so the leaderships live in their client's
//! [`Leaderships`], and a `NativeLeadership` names its own there by id.
//! `client.close()` resigns whatever is left.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use napi::bindgen_prelude::{BigInt, Function, PromiseRaw};
use napi::threadsafe_function::ThreadsafeFunctionCallMode;
use napi::Env;
use napi_derive::napi;
use polylock::{ErrorKind, Leadership, LossWatch};

use crate::call::server_call;
use crate::errors::{binding_error, millis, to_napi, NapiErrorExt};
use crate::lock::Canceller;

/// The leaderships a client's JS objects hold, by id; `None` once the
/// client is closed (a leadership that arrives later is dropped, which resigns it).
#[derive(Default)]
pub(crate) struct Leaderships {
    held: Mutex<Option<HashMap<u64, Leadership>>>,
}

impl Leaderships {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Leaderships { held: Mutex::new(Some(HashMap::new())) })
    }

    /// Keeps `led` under a fresh id; `Closed` if the client is.
    fn keep(&self, led: Leadership) -> polylock::Result<u64> {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        let held = held.as_mut().ok_or(polylock::Error::Closed)?;
        let id = NEXT.fetch_add(1, Ordering::Relaxed);
        held.insert(id, led);
        Ok(id)
    }

    fn take(&self, id: u64) -> Option<Leadership> {
        self.held.lock().unwrap_or_else(|e| e.into_inner()).as_mut()?.remove(&id)
    }

    /// Every leadership left, and no more keeping: the client is closing.
    pub(crate) fn close(&self) -> Vec<Leadership> {
        let held = self.held.lock().unwrap_or_else(|e| e.into_inner()).take();
        held.map(|h| h.into_values().collect()).unwrap_or_default()
    }
}

/// Who leads an election, as the server records it.
#[napi(object)]
pub struct NativeLeader {
    pub participant: String,
    /// ZooKeeper always; Redis while the grant's first lease lives.
    pub term: Option<BigInt>,
}

#[napi]
pub struct NativeElection {
    election: polylock::Election,
    leaderships: Arc<Leaderships>,
}

impl NativeElection {
    pub(crate) fn new(election: polylock::Election, leaderships: Arc<Leaderships>) -> Self {
        NativeElection { election, leaderships }
    }
}

/// A campaign of a new participant; `Timeout` when `timeout` passed first
/// (the participant is withdrawn then), as a lock's acquire rejects.
async fn campaign(election: &polylock::Election, timeout: Option<Duration>) -> polylock::Result<Leadership> {
    match timeout {
        None => election.campaign().await,
        Some(t) => {
            election.campaign_timeout(t).await?.ok_or_else(|| polylock::Error::Timeout(election.name().to_owned()))
        }
    }
}

/// What a campaign resolves to: the leadership, kept in the client's `Leaderships`.
fn led(election: &polylock::Election, leaderships: Arc<Leaderships>, l: Leadership) -> napi::Result<NativeLeadership> {
    let (term, participant, loss) = (l.term(), l.participant(), l.loss_watch());
    let id = leaderships.keep(l).napi_err()?;
    Ok(NativeLeadership {
        leaderships,
        id,
        name: election.name().to_owned(),
        term,
        participant,
        loss,
        resigned: AtomicBool::new(false),
    })
}

#[napi]
impl NativeElection {
    #[napi(getter)]
    pub fn name(&self) -> String {
        self.election.name().to_owned()
    }

    /// Waits until a new participant leads. `timeout_ms`: absent waits
    /// forever, 0 leads only if nobody leads or waits.
    #[napi]
    pub fn campaign<'env>(
        &self,
        env: &'env Env,
        timeout_ms: Option<f64>,
    ) -> napi::Result<PromiseRaw<'env, NativeLeadership>> {
        let timeout = timeout_ms.map(|ms| millis("timeoutMs", ms)).transpose()?;
        let (election, leaderships) = (self.election.clone(), self.leaderships.clone());
        server_call(env, async move {
            let l = campaign(&election, timeout).await.napi_err()?;
            led(&election, leaderships, l)
        })
    }

    /// Like `campaign`; `canceller.cancel()` withdraws the participant: the
    /// promise rejects `Cancelled` once the server holds nothing of it, or
    /// settles with the leadership that came first (api.js resigns that).
    #[napi]
    pub fn campaign_cancellable<'env>(
        &self,
        env: &'env Env,
        timeout_ms: Option<f64>,
        canceller: &Canceller,
    ) -> napi::Result<PromiseRaw<'env, NativeLeadership>> {
        let timeout = timeout_ms.map(|ms| millis("timeoutMs", ms)).transpose()?;
        let (election, leaderships) = (self.election.clone(), self.leaderships.clone());
        let withdrawal = canceller.withdrawal.clone();
        server_call(env, async move {
            let l = withdrawal.scope(campaign(&election, timeout)).await.napi_err()?;
            led(&election, leaderships, l)
        })
    }

    /// Who leads now, by every client (one read of the server), or null.
    #[napi]
    pub fn leader<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, Option<NativeLeader>>> {
        let election = self.election.clone();
        server_call(env, async move {
            let leader = election.leader().await.napi_err()?;
            Ok(leader.map(|l| NativeLeader { participant: l.participant, term: l.term.map(BigInt::from) }))
        })
    }
}

/// One participant's leadership, named by its id in the client's `Leaderships`.
#[napi]
pub struct NativeLeadership {
    leaderships: Arc<Leaderships>,
    id: u64,
    name: String,
    term: u64,
    participant: String,
    loss: LossWatch,
    resigned: AtomicBool,
}

#[napi]
impl NativeLeadership {
    /// The term: larger than every earlier leadership's of this election.
    #[napi(getter)]
    pub fn term(&self) -> BigInt {
        BigInt::from(self.term)
    }

    /// This participant's id, as `leader()` reports it while it leads.
    #[napi(getter)]
    pub fn participant(&self) -> String {
        self.participant.clone()
    }

    /// Why the leadership was lost, or null while it is not.
    #[napi(getter)]
    pub fn lost_reason(&self) -> Option<String> {
        self.loss.reason().map(|r| r.to_string())
    }

    /// Calls `callback(reason)` once if the leadership is lost; a weak
    /// threadsafe function, as `NativeGuard::on_lost`'s. The runtime drops
    /// the callback uncalled when the leadership is resigned.
    #[napi]
    pub fn on_lost(&self, callback: Function<String, ()>) -> napi::Result<()> {
        let tsfn = callback.build_threadsafe_function::<String>().callee_handled::<false>().weak::<true>().build()?;
        self.loss.on_loss(move |reason| {
            tsfn.call(reason.to_string(), ThreadsafeFunctionCallMode::NonBlocking);
        });
        Ok(())
    }

    /// Resigns and waits for the server; the next participant leads after
    /// it. Rejects `Lost` if it was lost meanwhile, `NotHeld` if already
    /// resigned, `Closed` if the client was closed (which resigned it).
    #[napi]
    pub fn release<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, ()>> {
        if self.resigned.swap(true, Ordering::SeqCst) {
            return Err(binding_error(
                ErrorKind::NotHeld,
                format!("this leadership of election {:?} was already resigned", self.name),
            ));
        }
        let led = self.leaderships.take(self.id).ok_or_else(|| to_napi(polylock::Error::Closed))?;
        server_call(env, async move { led.resign().await.napi_err() })
    }
}
