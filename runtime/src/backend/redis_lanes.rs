//! Command connections ("lanes") for Redis scripts that may block on the
//! server.
//!
//! A `WAIT` after a script blocks the connection it was sent on until the
//! replicas acknowledge or its timeout passes, and every request written
//! behind it on that connection waits too: on one shared connection, a
//! slow replica would delay every other lock's grant and renewal behind
//! each `WAIT`, one timeout after another. So a client that waits for
//! replicas (Sentinel) spreads its scripts over a few connections.
//!
//! The one order the core relies on is kept: a key always goes to the same
//! lane (by its Redis Cluster slot), so a lock's leave, which names the
//! lock's key first as its acquire does, runs after that acquire even when
//! the acquire's answer timed out and it still waits on the server. A lane
//! chosen by what is in flight could not promise that: a timed-out request
//! is no longer known to be in flight, yet may still run.

use polylock_core::keyslot::key_slot;

/// How many command connections a client that waits for replicas opens:
/// enough that a `WAIT` held up by a slow replica rarely stands in front
/// of another lock's request, few enough to stay a handful of connections
/// per client, never per lock.
pub(crate) const WAITING_LANES: usize = 4;

/// The command connections of one client.
pub(crate) struct Lanes<C> {
    conns: Vec<C>,
}

impl<C: Clone> Lanes<C> {
    /// `conns`, at least one.
    pub(crate) fn new(conns: Vec<C>) -> Self {
        assert!(!conns.is_empty(), "a client needs a command connection");
        Lanes { conns }
    }

    /// The connection for a request whose first key is `key`: always the
    /// same one for the same key.
    pub(crate) fn for_key(&self, key: &str) -> C {
        self.conns[usize::from(key_slot(key)) % self.conns.len()].clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_always_gets_the_same_lane() {
        let lanes = Lanes::new(vec![0, 1, 2, 3]);
        for key in ["a", "orders/42", "{x}:y", ""] {
            assert_eq!(lanes.for_key(key), lanes.for_key(key), "{key}");
        }
    }

    #[test]
    fn keys_spread_over_every_lane() {
        let lanes = Lanes::new(vec![0, 1, 2, 3]);
        let mut used: Vec<usize> = (0..64).map(|i| lanes.for_key(&format!("lock-{i}"))).collect();
        used.sort_unstable();
        used.dedup();
        assert_eq!(used, vec![0, 1, 2, 3]);
    }
}
