//! Every ZooKeeper watch of one client, waited on by one task: no task per
//! watch or per lock. A watch (a node's data watch, or a children watch)
//! that fires is reported as [`Notification::WatchFired`] with the id of
//! the command that set it (the lock table's, unique for the client's
//! life); one the core no longer wants
//! ([`polylock_core::Op::Unwatch`]) is dropped, and dropping a
//! zookeeper-client `OneshotWatcher` also removes it on the server
//! (`RemoveWatches` once no other watcher needs the path).
//!
//! The routing entries stay bounded by the watches the core still wants:
//! a watch that ended (fired, or its session ended) and is unwatched
//! afterwards leaves no entry, and a session's expiry drops every entry of
//! that session (the server dropped its watches; nothing fires them).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use futures::stream::{FuturesUnordered, StreamExt};
use polylock_core::{Notification, RequestId};
use tokio::sync::{mpsc, oneshot};
use zookeeper_client as zk;

use super::{Report, Reports};

struct Waiting {
    id: RequestId,
    watcher: zk::OneshotWatcher,
    /// Resolves (with an error) when the table drops the sender: unwatched.
    unwanted: oneshot::Receiver<()>,
}

#[derive(Default)]
struct Table {
    /// Commands that set a watch, sent and not answered yet.
    setting: HashSet<RequestId>,
    live: HashMap<RequestId, oneshot::Sender<()>>,
    /// Unwatched before the command that sets the watch was answered.
    unwatched_early: HashSet<RequestId>,
}

pub(crate) struct Watches {
    table: Mutex<Table>,
    to_task: mpsc::UnboundedSender<Waiting>,
}

impl Watches {
    /// The table, and the task that waits on every watch (it ends when the
    /// table is dropped, dropping the watches left).
    pub(crate) fn start(reports: Reports) -> Arc<Self> {
        let (to_task, from_table) = mpsc::unbounded_channel();
        let watches = Arc::new(Watches { table: Mutex::default(), to_task });
        tokio::spawn(wait_on_all(Arc::downgrade(&watches), reports, from_table));
        watches
    }

    fn table(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Command `id`, which asks the server for a watch, is being sent.
    pub(crate) fn setting(&self, id: RequestId) {
        self.table().setting.insert(id);
    }

    /// The server set the watch that command `id` asked for.
    pub(crate) fn add(&self, id: RequestId, watcher: zk::OneshotWatcher) {
        let mut table = self.table();
        table.setting.remove(&id);
        if table.unwatched_early.remove(&id) {
            return; // dropping the watcher removes it
        }
        let (tx, unwanted) = oneshot::channel();
        table.live.insert(id, tx);
        let _ = self.to_task.send(Waiting { id, watcher, unwanted });
    }

    /// The command that would have set the watch failed: no watch to drop.
    pub(crate) fn not_set(&self, id: RequestId) {
        let mut table = self.table();
        table.setting.remove(&id);
        table.unwatched_early.remove(&id);
    }

    /// The core no longer wants the watch set by command `id`. Neither live
    /// nor being set, the watch already ended (it fired, or its session
    /// ended without the core hearing of it per watch): nothing to keep.
    pub(crate) fn unwatch(&self, id: RequestId) {
        let mut table = self.table();
        if table.live.remove(&id).is_none() && table.setting.contains(&id) {
            table.unwatched_early.insert(id);
        }
    }

    /// The session expired: the server dropped its watches and none of them
    /// will fire. Their entries go (a dropped sender ends the watch's wait);
    /// commands still out on the old session are answered with an error,
    /// which clears theirs.
    pub(crate) fn session_expired(&self) {
        let mut table = self.table();
        table.live.clear();
        table.unwatched_early.clear();
    }

    /// Watches set and neither fired nor dropped yet.
    #[cfg(feature = "test-hooks")]
    pub(crate) fn live(&self) -> usize {
        self.table().live.len()
    }

    /// Routing entries kept: watches live, and watches unwanted before set.
    #[cfg(feature = "test-hooks")]
    pub(crate) fn routes(&self) -> usize {
        let table = self.table();
        table.live.len() + table.unwatched_early.len()
    }

    fn ended(&self, id: RequestId) {
        self.table().live.remove(&id);
    }
}

async fn wait_on_all(table: std::sync::Weak<Watches>, reports: Reports, mut rx: mpsc::UnboundedReceiver<Waiting>) {
    let mut waiting = FuturesUnordered::new();
    loop {
        tokio::select! {
            new = rx.recv() => match new {
                Some(w) => waiting.push(wait_one(w)),
                None => return,
            },
            Some((id, fired)) = waiting.next(), if !waiting.is_empty() => {
                if let Some(t) = table.upgrade() {
                    t.ended(id);
                }
                let n = match fired {
                    Fired::Deleted => Notification::NodeDeleted { id },
                    Fired::Changed => Notification::WatchFired { id },
                    Fired::Not => continue,
                };
                if reports.send(Report::Notification(n)).is_err() {
                    return;
                }
            }
        }
    }
}

/// How a watch ended.
enum Fired {
    /// Its node was deleted (a waiter behind the first contender is first).
    Deleted,
    /// Its node changed otherwise: the claim looks again.
    Changed,
    /// Unwanted, or the session's end, which the session task reports to every lock.
    Not,
}

/// Waits for the node to change or the watch to be unwanted.
async fn wait_one(w: Waiting) -> (RequestId, Fired) {
    let Waiting { id, watcher, unwanted } = w;
    tokio::select! {
        event = watcher.changed() => (id, match event.event_type {
            zk::EventType::NodeDeleted => Fired::Deleted,
            zk::EventType::Session => Fired::Not,
            _ => Fired::Changed,
        }),
        _ = unwanted => (id, Fired::Not),
    }
}
