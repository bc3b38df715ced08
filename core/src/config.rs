//! Per-lock settings. Defaults follow Redisson's watchdog (30 s lease,
//! renewed every 10 s) and add the margins that make loss detection safe.

use std::time::Duration;

use crate::Error;

/// Which protocol a machine speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// Redis: a single server, Sentinel or Cluster.
    Redis,
    /// ZooKeeper: a single server or an ensemble.
    ZooKeeper,
}

impl Backend {
    /// The backend's stable name, as every binding and the CLI spell it:
    /// `"redis"` or `"zookeeper"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Backend::Redis => "redis",
            Backend::ZooKeeper => "zookeeper",
        }
    }
}

impl std::fmt::Display for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Redis: which replicas must acknowledge each grant and renewal (the
/// URL's `replicas=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplicasAsked {
    /// No `replicas=`: Redisson's `checkLockSyncedSlaves` default, one
    /// while the master lists any replica, else none.
    OneIfAny,
    /// `replicas=K`: K, whatever the master lists (with K above the live
    /// replicas, no grant is reported).
    Exactly(u32),
    /// `replicas=all`: every replica the master lists, counted again as it
    /// changes. A replica that missed a grant can then only be promoted if
    /// it was not listed (disconnected) when the grant was made; the
    /// master's `min-replicas-to-write` closes that gap on the server.
    All,
}

impl ReplicasAsked {
    /// Whether `replicas` follows the count the master lists (the driver
    /// then recounts and reports it).
    pub fn follows_the_master(self) -> bool {
        !matches!(self, ReplicasAsked::Exactly(_))
    }
}

/// Settings of one lock machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockConfig {
    /// The protocol the machine speaks.
    pub backend: Backend,
    /// Redis: how long a grant lives on the server without renewal.
    pub lease: Duration,
    /// Redis: how long a waiter's place in the queue lives without a refresh.
    /// Waiters refresh at a third of it; a crashed waiter blocks handoff at most this long.
    pub waiter_ttl: Duration,
    /// ZooKeeper: the negotiated session timeout (the driver sets it after connecting).
    pub session_timeout: Duration,
    /// First delay before retrying a request that got no answer; doubles up to `max_backoff`.
    pub min_backoff: Duration,
    /// The longest delay between retries.
    pub max_backoff: Duration,
    /// Redis: how many replicas must acknowledge (`WAIT`) each grant and
    /// renewal before it counts; 0: none asked (a lone server). The driver
    /// sets it (`replicas=K`; Sentinel: 1 when the master has replicas, or
    /// every one with `replicas=all`).
    pub replicas: u32,
    /// Redis: what the URL's `replicas=` asked for, from which `replicas`
    /// follows what the master lists ([`Self::see_replicas`]).
    pub replicas_asked: ReplicasAsked,
    /// Redis: how long one `WAIT` for `replicas` may block (Redisson's
    /// `slavesSyncTimeout`, 1 s).
    pub replica_timeout: Duration,
    /// Redis: each release also publishes `0` on Redisson's channel as a
    /// shard channel (`SPUBLISH`), where Redisson's waiters on a Redis
    /// Cluster listen by default. The driver sets it on a cluster.
    pub shard_release: bool,
    /// Redis: the server is a Redis Cluster, where every key of one script
    /// must be in one slot. A read-write lock or semaphore of a name whose
    /// Redisson keys would sit in other slots is refused there
    /// ([`crate::redis::keys::redisson_keys_share_the_slot`]). The driver
    /// sets it on a cluster.
    pub cluster: bool,
}

impl LockConfig {
    /// Defaults for a backend: lease 30 s, waiter TTL 30 s, session 10 s, backoff 50 ms..2 s.
    pub fn new(backend: Backend) -> Self {
        LockConfig {
            backend,
            lease: Duration::from_secs(30),
            waiter_ttl: Duration::from_secs(30),
            session_timeout: Duration::from_secs(10),
            min_backoff: Duration::from_millis(50),
            max_backoff: Duration::from_secs(2),
            replicas: 0,
            replicas_asked: ReplicasAsked::OneIfAny,
            replica_timeout: Duration::from_secs(1),
            shard_release: false,
            cluster: false,
        }
    }

    /// Redis with replicas (Sentinel, Cluster): how many must acknowledge
    /// each grant and renewal. `asked` is the URL's `replicas=`; the master
    /// lists `replicas_seen` replicas at connect, and the driver reports
    /// each change of that count later ([`Self::see_replicas`]).
    /// Each `WAIT` blocks at most half a request, so a slow replica cannot
    /// turn a grant into a request timeout.
    pub fn acknowledge_replicas(&mut self, asked: ReplicasAsked, replicas_seen: usize, request_timeout: Duration) {
        self.replicas_asked = asked;
        self.see_replicas(replicas_seen);
        self.replica_timeout = self.replica_timeout.min(request_timeout / 2);
    }

    /// The master now lists `replicas_seen` replicas: the acknowledgements
    /// each grant and renewal asks from now on ([`ReplicasAsked`]).
    pub fn see_replicas(&mut self, replicas_seen: usize) {
        let seen = u32::try_from(replicas_seen).unwrap_or(u32::MAX);
        self.replicas = match self.replicas_asked {
            ReplicasAsked::OneIfAny => seen.min(1),
            ReplicasAsked::Exactly(k) => k,
            ReplicasAsked::All => seen,
        };
    }

    /// Checks the values; the machine refuses a config that fails here.
    pub fn validate(&self) -> Result<(), Error> {
        validate_lease(self.lease)?;
        if self.waiter_ttl < Duration::from_millis(100) {
            return Err(Error::InvalidOption("waiter_ttl must be at least 100 ms".into()));
        }
        if self.session_timeout < Duration::from_millis(100) {
            return Err(Error::InvalidOption("session_timeout must be at least 100 ms".into()));
        }
        if self.min_backoff.is_zero() || self.max_backoff < self.min_backoff {
            return Err(Error::InvalidOption("backoff must be positive and min <= max".into()));
        }
        Ok(())
    }

    /// Sets the lease and the waiter TTL together: a waiter's queue entry
    /// lives as long as the grant it waits for (the one rule for both).
    pub fn set_lease(&mut self, lease: Duration) {
        (self.lease, self.waiter_ttl) = self.lease_and_waiter_ttl(Some(lease));
    }

    /// The lease and waiter TTL of a claim that asked for `lease` (`None`:
    /// the config's own), by the rule of [`Self::set_lease`].
    pub(crate) fn lease_and_waiter_ttl(&self, lease: Option<Duration>) -> (Duration, Duration) {
        match lease {
            Some(lease) => (lease, lease),
            None => (self.lease, self.waiter_ttl),
        }
    }

    /// Redis: the safety margin subtracted from the lease to get the local
    /// deadline: 1% of the lease for clock-rate drift (Redlock's figure) plus
    /// 2 ms, plus 10 ms for a driver's timer firing late.
    pub fn drift(&self) -> Duration {
        drift_for(self.lease)
    }

    /// ZooKeeper: how long after a reported disconnection a holder is told
    /// it lost the lock: a third of the session timeout `S`, less the drift
    /// margin.
    ///
    /// Why a third is safe with zookeeper-client 0.11 (`session/mod.rs`,
    /// `reset_timeout`, no connection timeout configured): it ticks every
    /// `S/20`, pings after `3S/20` without sending, and on a tick at least
    /// `8S/20 = 2S/5` after the last bytes it received it reports
    /// `Disconnected`; so it reports at most `2S/5 + S/20 = 9S/20` after it
    /// last heard the server (at once if the socket closes). The server
    /// expires the session no sooner than `S` after it last heard us, which
    /// was before it sent the reply we last received. The loss therefore
    /// comes at most `9S/20 + S/3 = 47S/60` after our last contact, leaving
    /// `13S/60` (2.1 s of the default 10 s, 21 ms of the 100 ms minimum)
    /// for that reply's transit, the driver delivering the state change,
    /// and a late timer. A claim granted while the connection is down
    /// counts from the disconnection too (see `zk.rs`, `enter_held`).
    pub fn disconnect_grace(&self) -> Duration {
        (self.session_timeout / 3).saturating_sub(Duration::from_millis(12))
    }
}

/// The drift margin of [`LockConfig::drift`] for any lease (a claim may run
/// with a lease of its own).
pub(crate) fn drift_for(lease: Duration) -> Duration {
    lease / 100 + Duration::from_millis(12)
}

/// Checks a lease given per lock or per acquire, as [`LockConfig::validate`] does.
pub(crate) fn validate_lease(lease: Duration) -> Result<(), Error> {
    if lease < Duration::from_millis(100) {
        return Err(Error::InvalidOption(format!("lease must be at least 100 ms, got {} ms", lease.as_millis())));
    }
    if lease > Duration::from_secs(86_400 * 365) {
        return Err(Error::InvalidOption("lease must be at most one year".into()));
    }
    Ok(())
}

#[cfg(test)]
mod backend_name_tests {
    use super::Backend;

    #[test]
    fn backends_spell_their_stable_names() {
        assert_eq!(Backend::Redis.as_str(), "redis");
        assert_eq!(Backend::ZooKeeper.as_str(), "zookeeper");
        assert_eq!(Backend::ZooKeeper.to_string(), "zookeeper");
    }
}

#[cfg(test)]
mod replica_tests {
    use super::{Backend, LockConfig, ReplicasAsked};
    use std::time::Duration;

    #[test]
    fn replicas_default_to_one_when_the_master_has_any_and_wait_at_most_half_a_request() {
        let mut c = LockConfig::new(Backend::Redis);
        c.acknowledge_replicas(ReplicasAsked::OneIfAny, 2, Duration::from_secs(5));
        assert_eq!((c.replicas, c.replica_timeout), (1, Duration::from_secs(1)));
        let mut c = LockConfig::new(Backend::Redis);
        c.acknowledge_replicas(ReplicasAsked::OneIfAny, 0, Duration::from_millis(800));
        assert_eq!((c.replicas, c.replica_timeout), (0, Duration::from_millis(400)));
        let mut c = LockConfig::new(Backend::Redis);
        c.acknowledge_replicas(ReplicasAsked::Exactly(3), 0, Duration::from_secs(5));
        assert_eq!(c.replicas, 3, "the URL's replicas=K wins over what was seen");
        c.see_replicas(1);
        assert_eq!(c.replicas, 3, "and over what is seen later");
    }

    #[test]
    fn the_default_follows_the_replicas_the_master_lists() {
        let mut c = LockConfig::new(Backend::Redis);
        c.acknowledge_replicas(ReplicasAsked::OneIfAny, 0, Duration::from_secs(5));
        c.see_replicas(2);
        assert_eq!(c.replicas, 1, "replicas joined after connect");
        c.see_replicas(0);
        assert_eq!(c.replicas, 0, "the master lost its replicas");
    }

    #[test]
    fn replicas_all_asks_every_replica_the_master_lists_as_the_count_changes() {
        let mut c = LockConfig::new(Backend::Redis);
        c.acknowledge_replicas(ReplicasAsked::All, 2, Duration::from_secs(5));
        assert_eq!(c.replicas, 2, "both replicas listed at connect");
        c.see_replicas(1);
        assert_eq!(c.replicas, 1, "one replica left (its master refuses writes under min-replicas-to-write)");
        c.see_replicas(3);
        assert_eq!(c.replicas, 3, "a replica joined");
        assert!(ReplicasAsked::All.follows_the_master() && ReplicasAsked::OneIfAny.follows_the_master());
        assert!(!ReplicasAsked::Exactly(2).follows_the_master());
    }
}
