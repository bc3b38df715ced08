//! A lease that an outside party shortens on the server.
//!
//! A Redisson reader's watchdog sets the read-write lock's hash and every
//! reader's timeout key, ours included, to Redisson's `lockWatchdogTimeout`
//! (30 s by default) every third of it, whatever our lease. After a
//! Redisson unlock (the hash then lives as long as the longest timeout key)
//! or a Redisson crash, both run out that long after the watchdog's last
//! cut, and a writer may be granted. A holder must be told it lost the lock
//! before anyone else can be granted it: its loss deadline may never be
//! later than the server-side expiry of what protects it, and it must renew
//! before that expiry to keep the lock.
//!
//! The renewal reports how long the hash and our key had left before it
//! extended them. Less than our own last extension can have left means
//! someone set them to a time `W` of their own, at or after that
//! extension: `W` is at least what was left. Every later cut by that party
//! sets `W` again, no earlier than this renewal ran, so after this renewal
//! the server keeps our hold at least that long: the claim counts its loss
//! deadline and its next renewal from that instead of its lease.
//!
//! The bound holds while another reader (one whose timeout key lives)
//! holds beside us: the party that cut may still hold and cut again, even
//! if it did not in the last interval. It goes when a renewal finds no
//! such reader. From then on, a newcomer can cut before our next renewal
//! has seen it: our renewal interval (a third of the lease) must be below
//! the newcomer's `W` for that first cut (docs/wire-compatibility.md).
//! The latest cut seen counts, not the shortest: one party's `W` is at
//! least every cut of its that we see, however late we see it, while the
//! shortest would keep a cut seen just before it ran out (a few ms left)
//! as the bound. Parties of different `W`s are the limit this leaves.

use std::time::Duration;

use crate::Instant;

/// What the latest renewals of one hold saw of an outside party's cuts.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OutsideCut {
    /// What the latest cut had left, when a renewal found it: the lease
    /// counted on after each renewal while others hold the lock.
    bound: Option<Duration>,
}

impl OutsideCut {
    /// A renewal answered at `now` found `left_ms` left (-1: no other
    /// live reader holds beside us, or nothing expires). Our own last
    /// extension was made no earlier than `counted_from`, for `lease`;
    /// `drift` is the margin for the server's clock running at another
    /// rate than ours.
    pub(crate) fn observe(
        &mut self,
        left_ms: i64,
        lease: Duration,
        drift: Duration,
        counted_from: Instant,
        now: Instant,
    ) {
        let Ok(left) = u64::try_from(left_ms).map(Duration::from_millis) else {
            self.bound = None;
            return;
        };
        // The least our own extension can have left when the server ran
        // this renewal (no later than `now`).
        let ours = lease.saturating_sub(now.saturating_since(counted_from)).saturating_sub(drift);
        if left < ours {
            self.bound = Some(left);
        }
    }

    /// How long the server keeps our hold after a renewal, as far as we
    /// can count on: the lease, or less when cut.
    pub(crate) fn lease(&self, lease: Duration) -> Duration {
        self.bound.map_or(lease, |cut| cut.min(lease))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LEASE: Duration = Duration::from_secs(120);
    const DRIFT: Duration = Duration::from_millis(1_212);

    fn at(ms: u64) -> Instant {
        Instant::from_millis(ms)
    }

    #[test]
    fn what_our_own_extension_left_is_no_cut() {
        let mut cut = OutsideCut::default();
        // Renewed at 0, renewing again 40 s later: 80 s left is our own.
        cut.observe(80_000, LEASE, DRIFT, at(0), at(40_000));
        assert_eq!(cut.lease(LEASE), LEASE);
        // Less the drift margin too.
        cut.observe(79_000, LEASE, DRIFT, at(0), at(40_000));
        assert_eq!(cut.lease(LEASE), LEASE);
    }

    #[test]
    fn a_cut_below_what_we_left_bounds_the_lease_while_another_reader_holds() {
        let mut cut = OutsideCut::default();
        cut.observe(25_000, LEASE, DRIFT, at(0), at(40_000));
        assert_eq!(cut.lease(LEASE), Duration::from_secs(25));
        // An interval without a cut: the party may still be there.
        cut.observe(112_000, LEASE, DRIFT, at(40_000), at(48_000));
        assert_eq!(cut.lease(LEASE), Duration::from_secs(25));
        // The latest cut counts.
        cut.observe(28_000, LEASE, DRIFT, at(48_000), at(56_000));
        assert_eq!(cut.lease(LEASE), Duration::from_secs(28));
        // No other live reader: nobody can cut until one joins.
        cut.observe(-1, LEASE, DRIFT, at(56_000), at(64_000));
        assert_eq!(cut.lease(LEASE), LEASE);
    }
}
