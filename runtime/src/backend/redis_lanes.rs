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
//! The one order the core relies on is kept: requests naming the same first
//! key go to the lane where that key's earlier requests are still in
//! flight. A lock's acquire and its leave both name the lock's key first,
//! so a leave sent while its acquire is in flight runs after it. A key with
//! nothing in flight goes to the least busy lane.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// How many command connections a client that waits for replicas opens:
/// enough that a `WAIT` held up by a slow replica rarely stands in front
/// of another lock's request, few enough to stay a handful of connections
/// per client, never per lock.
pub(crate) const WAITING_LANES: usize = 4;

/// The command connections of one client, and what is in flight on each.
pub(crate) struct Lanes<C> {
    conns: Vec<C>,
    busy: Arc<Mutex<Busy>>,
}

#[derive(Default)]
struct Busy {
    /// Requests in flight per lane.
    per_lane: Vec<usize>,
    /// For each first key with requests in flight: its lane and how many.
    by_key: HashMap<String, (usize, usize)>,
}

/// A request's place on its lane, given back when dropped (answered,
/// timed out or abandoned).
pub(crate) struct InFlight {
    busy: Option<(Arc<Mutex<Busy>>, String, usize)>,
}

impl<C: Clone> Lanes<C> {
    /// `conns`, at least one; a single lane keeps no count.
    pub(crate) fn new(conns: Vec<C>) -> Self {
        assert!(!conns.is_empty(), "a client needs a command connection");
        let busy = Busy { per_lane: vec![0; conns.len()], by_key: HashMap::new() };
        Lanes { conns, busy: Arc::new(Mutex::new(busy)) }
    }

    /// The connection for a request whose first key is `key`, and its place
    /// there until the returned [`InFlight`] is dropped.
    pub(crate) fn take(&self, key: &str) -> (C, InFlight) {
        if self.conns.len() == 1 {
            return (self.conns[0].clone(), InFlight { busy: None });
        }
        let mut busy = self.busy.lock().unwrap_or_else(|e| e.into_inner());
        let lane = match busy.by_key.get(key) {
            Some(&(lane, _)) => lane,
            None => (0..busy.per_lane.len()).min_by_key(|&l| busy.per_lane[l]).unwrap_or(0),
        };
        busy.per_lane[lane] += 1;
        busy.by_key.entry(key.to_owned()).or_insert((lane, 0)).1 += 1;
        (self.conns[lane].clone(), InFlight { busy: Some((self.busy.clone(), key.to_owned(), lane)) })
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let Some((busy, key, lane)) = self.busy.take() else { return };
        let mut busy = busy.lock().unwrap_or_else(|e| e.into_inner());
        busy.per_lane[lane] -= 1;
        if let Some(entry) = busy.by_key.get_mut(&key) {
            entry.1 -= 1;
            if entry.1 == 0 {
                busy.by_key.remove(&key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_keys_requests_share_a_lane_while_any_is_in_flight() {
        let lanes = Lanes::new(vec![0, 1, 2, 3]);
        let (a, a_req) = lanes.take("a");
        let (b, _b_req) = lanes.take("b");
        assert_ne!(a, b, "an idle lane was free for b");
        let (a_again, a_leave) = lanes.take("a");
        assert_eq!(a_again, a, "a's leave must follow its acquire on one connection");
        drop(a_req);
        let (a_third, _) = lanes.take("a");
        assert_eq!(a_third, a, "a still has a request in flight on its lane");
        drop(a_leave);
    }

    #[test]
    fn a_key_with_nothing_in_flight_goes_to_the_least_busy_lane() {
        let lanes = Lanes::new(vec![0, 1]);
        let (first, held) = lanes.take("slow");
        let (other, _) = lanes.take("x");
        assert_ne!(other, first);
        drop(held);
        let busy = lanes.busy.lock().unwrap();
        assert_eq!(busy.per_lane, vec![0, 0], "every place given back");
        assert!(busy.by_key.is_empty());
    }

    #[test]
    fn a_single_lane_keeps_no_count() {
        let lanes = Lanes::new(vec![7]);
        let (c, _held) = lanes.take("a");
        assert_eq!(c, 7);
        assert!(lanes.busy.lock().unwrap().by_key.is_empty());
    }
}
