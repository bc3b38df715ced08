//! Every ZooKeeper watch of one client, waited on by one task: no task per
//! watch or per lock. A watch that fires is reported to its lock as
//! [`Notification::WatchFired`]; one the core no longer wants
//! ([`polylock_core::Op::Unwatch`]) is dropped, and dropping a
//! zookeeper-client `OneshotWatcher` also removes it on the server
//! (`RemoveWatches` once no other watcher needs the path).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use futures::stream::{FuturesUnordered, StreamExt};
use polylock_core::{Notification, RequestId};
use tokio::sync::{mpsc, oneshot};
use zookeeper_client as zk;

use crate::driver::Shared;

/// A watch is named by its lock and the id of the command that set it.
type Key = (String, RequestId);

struct Waiting {
    key: Key,
    /// Tells a fire of this watch from one of an older watch with the same
    /// key (a lock's machine may be dropped and made again, restarting ids).
    seq: u64,
    watcher: zk::OneshotWatcher,
    /// Resolves (with an error) when the table drops the sender: unwatched.
    unwanted: oneshot::Receiver<()>,
}

#[derive(Default)]
struct Table {
    live: HashMap<Key, (u64, oneshot::Sender<()>)>,
    /// Unwatched before the command that sets the watch was answered.
    unwatched_early: HashSet<Key>,
}

pub(crate) struct Watches {
    table: Mutex<Table>,
    seq: AtomicU64,
    to_task: mpsc::UnboundedSender<Waiting>,
    from_table: Mutex<Option<mpsc::UnboundedReceiver<Waiting>>>,
}

impl Watches {
    pub(crate) fn new() -> Arc<Self> {
        let (to_task, from_table) = mpsc::unbounded_channel();
        Arc::new(Watches {
            table: Mutex::default(),
            seq: AtomicU64::new(0),
            to_task,
            from_table: Mutex::new(Some(from_table)),
        })
    }

    fn table(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Starts the task that waits on every watch (once; needs a runtime).
    /// It ends when the client is dropped, dropping the watches left.
    pub(crate) fn start(self: &Arc<Self>, shared: Weak<Shared>) {
        let Some(rx) = self.from_table.lock().unwrap_or_else(|p| p.into_inner()).take() else { return };
        tokio::spawn(wait_on_all(shared, Arc::downgrade(self), rx));
    }

    /// The server set the watch that command `id` of lock `name` asked for.
    pub(crate) fn add(&self, name: &str, id: RequestId, watcher: zk::OneshotWatcher) {
        let key = (name.to_owned(), id);
        let mut table = self.table();
        if table.unwatched_early.remove(&key) {
            return; // dropping the watcher removes it
        }
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        let (tx, unwanted) = oneshot::channel();
        table.live.insert(key.clone(), (seq, tx));
        let _ = self.to_task.send(Waiting { key, seq, watcher, unwanted });
    }

    /// The command that would have set the watch failed: no watch to drop.
    pub(crate) fn not_set(&self, name: &str, id: RequestId) {
        self.table().unwatched_early.remove(&(name.to_owned(), id));
    }

    /// The core no longer wants the watch set by command `id` of `name`.
    pub(crate) fn unwatch(&self, name: &str, id: RequestId) {
        let key = (name.to_owned(), id);
        let mut table = self.table();
        if table.live.remove(&key).is_none() {
            table.unwatched_early.insert(key);
        }
    }

    /// Watches set and neither fired nor dropped yet.
    #[cfg(feature = "test-hooks")]
    pub(crate) fn live(&self) -> usize {
        self.table().live.len()
    }

    /// A watch ended (fired or dropped): forget it unless a newer one took its key.
    fn ended(&self, key: &Key, seq: u64) {
        let mut table = self.table();
        if table.live.get(key).is_some_and(|(s, _)| *s == seq) {
            table.live.remove(key);
        }
    }
}

async fn wait_on_all(shared: Weak<Shared>, table: Weak<Watches>, mut rx: mpsc::UnboundedReceiver<Waiting>) {
    let mut waiting = FuturesUnordered::new();
    loop {
        tokio::select! {
            new = rx.recv() => match new {
                Some(w) => waiting.push(wait_one(w)),
                None => return,
            },
            Some((key, seq, fired)) = waiting.next(), if !waiting.is_empty() => {
                if let Some(t) = table.upgrade() {
                    t.ended(&key, seq);
                }
                if fired {
                    if let Some(s) = shared.upgrade() {
                        s.notify(&key.0, Notification::WatchFired { id: key.1 });
                    }
                }
            }
        }
    }
}

/// Waits for the node to change or the watch to be unwanted. The session's
/// end is not reported: the session task reports it to every lock.
async fn wait_one(w: Waiting) -> (Key, u64, bool) {
    let Waiting { key, seq, watcher, unwanted } = w;
    tokio::select! {
        event = watcher.changed() => (key, seq, event.event_type != zk::EventType::Session),
        _ = unwanted => (key, seq, false),
    }
}
