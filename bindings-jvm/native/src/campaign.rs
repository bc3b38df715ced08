//! One Java `LeaderElection` taking part in its election, as Curator's
//! `LeaderLatch` does from `start()` to `close()`: a task on the runtime
//! campaigns, tells Java when it leads and when that leadership is lost, and
//! campaigns again after a loss (a latch stays in its election until it is
//! closed). No Java thread waits for it: Java hears of each step through an
//! upcall on the `LeaderElection` object (`elected`, `lost`, `failed`), and
//! `end` (Java's `close()`) withdraws the campaign or resigns the leadership,
//! returning once the server holds nothing of it.
//!
//! Every decision (when a participant leads, when a leadership counts as
//! lost, what a withdrawal leaves behind) is the core's; this task only
//! runs the Rust API's `Election` in a loop and forwards what it reports.

use std::sync::{Arc, Mutex, MutexGuard};

use jni::objects::{GlobalRef, JObject, JValue};
use polylock::blocking::WITHDRAW_WAIT;
use polylock::{Election, Error, Leadership, LossReason, Withdrawal};
use tokio::task::JoinHandle;

use crate::errors::{self, Failure, Outcome};
use crate::runtime;
use crate::upcalls;

/// The election behind a Java `LeaderElection` (its name, its client).
pub(crate) struct ElectionHandle {
    pub(crate) election: Election,
}

/// One participant's campaigns, from Java's `start()` to its `close()`.
pub(crate) struct Campaign {
    /// Keeps the election (and its client's count) alive while the task runs.
    _election: Arc<ElectionHandle>,
    shared: Arc<Mutex<Shared>>,
    withdrawal: Withdrawal,
    task: Mutex<Option<JoinHandle<()>>>,
}

/// What the task and `end` both touch.
#[derive(Default)]
struct Shared {
    /// `end` was called: the task tells Java nothing more and stops.
    ended: bool,
    /// The leadership held now (also one that raced `end`): `end` resigns it.
    leadership: Option<Leadership>,
}

fn lock(shared: &Mutex<Shared>) -> MutexGuard<'_, Shared> {
    shared.lock().unwrap_or_else(|p| p.into_inner())
}

pub(crate) fn start(handle: Arc<ElectionHandle>, events: GlobalRef) -> Campaign {
    let shared = Arc::new(Mutex::new(Shared::default()));
    let withdrawal = Withdrawal::new();
    let participation = participate(handle.election.clone(), shared.clone(), events);
    let scope = withdrawal.clone();
    let task = runtime::spawn(async move { scope.scope(participation).await });
    Campaign { _election: handle, shared, withdrawal, task: Mutex::new(Some(task)) }
}

/// Campaigns until `end`, a campaign's failure (the client closed, the
/// server refused), or forever. Upcalls come from this one task, so Java
/// sees each leadership's `elected` before its `lost`.
async fn participate(election: Election, shared: Arc<Mutex<Shared>>, events: GlobalRef) {
    loop {
        let leadership = match election.campaign().await {
            Ok(leadership) => leadership,
            Err(e) => {
                // After `end`, a withdrawn campaign's `Cancelled` is nobody's news.
                if !lock(&shared).ended {
                    failed(&events, e);
                }
                return;
            }
        };
        let loss = leadership.loss_watch();
        let (term, participant) = (leadership.term(), leadership.participant());
        {
            let mut s = lock(&shared);
            s.leadership = Some(leadership);
            if s.ended {
                return; // a grant that raced `end`: `end` resigns it
            }
        }
        // A leadership lost before Java heard of it is not announced: Java
        // never believed in it, and its loss ends the wait below at once.
        if loss.reason().is_none() {
            elected(&events, term, &participant);
        }
        let Some(reason) = loss.ended().await else {
            return; // resigned: only `end` resigns
        };
        lost(&events, reason);
        // The lost leadership's remains go back in the background; a fresh
        // participant campaigns, as a latch does after its session comes back.
        let gone = lock(&shared).leadership.take();
        drop(gone);
        if lock(&shared).ended {
            return;
        }
    }
}

impl Campaign {
    /// Stops taking part: withdraws a waiting campaign (returning once the
    /// server holds nothing of it) and resigns a leadership (returning once
    /// the server let it go). A leadership lost meanwhile is not an error:
    /// Java was told of the loss already.
    pub(crate) fn end(&self) -> Outcome<()> {
        lock(&self.shared).ended = true;
        self.withdrawal.withdraw();
        let task = self.task.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(mut task) = task {
            runtime::block_on(async move {
                // The withdrawn campaign ends the task once it is off the server.
                let withdrawn =
                    self.withdrawal.has_waiting() && tokio::time::timeout(WITHDRAW_WAIT, &mut task).await.is_ok();
                if !withdrawn {
                    // It waits on a leadership's loss (nothing in flight), or the
                    // withdrawal took too long: the runtime's campaign is cancel-safe.
                    task.abort();
                    let _ = task.await;
                }
            });
        }
        let leadership = lock(&self.shared).leadership.take();
        match leadership.map(|l| runtime::block_on(l.resign())) {
            None | Some(Ok(())) | Some(Err(Error::Lost { .. })) => Ok(()),
            Some(Err(e)) => Err(e.into()),
        }
    }
}

/// `events.elected(term, participant)`: this participant leads.
fn elected(events: &GlobalRef, term: u64, participant: &str) {
    upcalls::with_env(|env| {
        let participant = env.new_string(participant)?;
        env.call_method(
            events,
            "elected",
            "(JLjava/lang/String;)V",
            &[JValue::Long(term as i64), JValue::Object(&participant)],
        )?;
        Ok(())
    });
}

/// `events.lost(reason)`: the leadership may be gone; stop acting as leader.
fn lost(events: &GlobalRef, reason: LossReason) {
    upcalls::with_env(|env| {
        let reason = env.new_string(reason.to_string())?;
        env.call_method(events, "lost", "(Ljava/lang/String;)V", &[JValue::Object(&reason)])?;
        Ok(())
    });
}

/// `events.failed(error)`: the campaign ended without leading, for good.
fn failed(events: &GlobalRef, error: Error) {
    upcalls::with_env(|env| {
        let error: JObject = errors::to_throwable(env, Failure::Polylock(error))?;
        env.call_method(events, "failed", "(Ljava/lang/Throwable;)V", &[JValue::Object(&error)])?;
        Ok(())
    });
}
