//! The guards the binding keeps for Python callers. Python releases by
//! owner (`lock.release()` carries no guard), so each grant's `Guard` is
//! parked here, per owner, in acquire order. Releasing pops the newest one
//! and calls `Guard::release`, which is what reports a loss. Every `Lock`
//! object of one client and name shares one `Holds`, so a thread may
//! acquire through one handle and release through another.
//!
//! Why not just `Lock::release_as(owner)`: `lock.fencing_token` needs the
//! owner's token, which only a `Guard` carries (the runtime has no
//! per-owner token query yet), and a guard's release names its own grant,
//! so a stale hold reports its loss and never ends a newer one.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use polylock::Guard;

#[derive(Default)]
pub(crate) struct Holds {
    by_owner: Mutex<HashMap<u64, Vec<Guard>>>,
}

impl Holds {
    fn guards(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Vec<Guard>>> {
        self.by_owner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Parks a grant. Returns true when it starts a new hold of the owner
    /// (its first, or the first after a loss, which has a loss watch of
    /// its own): the moment to start watching for a loss.
    pub(crate) fn push(&self, owner: u64, guard: Guard) -> bool {
        let mut guards = self.guards();
        let stack = guards.entry(owner).or_default();
        let fresh = stack.last().is_none_or(|newest| newest.lost_reason().is_some());
        stack.push(guard);
        fresh
    }

    /// The owner's newest grant, to release it.
    pub(crate) fn pop(&self, owner: u64) -> Option<Guard> {
        let mut guards = self.guards();
        let stack = guards.get_mut(&owner)?;
        let guard = stack.pop();
        if stack.is_empty() {
            guards.remove(&owner);
        }
        guard
    }

    fn is_empty(&self) -> bool {
        self.guards().is_empty()
    }

    /// Reads the owner's newest grant.
    pub(crate) fn with_newest<R>(&self, owner: u64, f: impl FnOnce(&Guard) -> R) -> Option<R> {
        self.guards().get(&owner).and_then(|s| s.last()).map(f)
    }
}

/// One `Holds` per lock name of a client, shared by its `Lock` objects.
/// Kept while a handle is alive or a grant is parked: dropping every handle
/// (`client.lock(n).acquire()` on a temporary) must not release the lock.
#[derive(Default)]
pub(crate) struct HoldsByName {
    names: Mutex<HashMap<String, Arc<Holds>>>,
}

impl HoldsByName {
    pub(crate) fn for_name(&self, name: &str) -> Arc<Holds> {
        let mut names = self.names.lock().unwrap_or_else(|p| p.into_inner());
        names.retain(|n, holds| n == name || Arc::strong_count(holds) > 1 || !holds.is_empty());
        names.entry(name.to_owned()).or_default().clone()
    }
}
