//! The Redis protocol: keys, scripts, and one claim's life as a state machine.
//!
//! Layout (wire-compatible with Redisson `RLock`, see PROTOCOLS.md; key
//! names in [`keys`], all in the lock key's cluster slot):
//! - the lock is a HASH at the lock name, field `<client uuid>:<owner id>`, value 1;
//!   Redisson clients see it as held and wait; we see theirs the same way;
//! - a release that hands the lock to nobody publishes `0` on Redisson's channel
//!   (`redisson_lock__channel:{name}`, or `redisson_lock__channel:name` when
//!   the name holds a `{`), which wakes Redisson waiters (on a Redis
//!   Cluster, with `LockConfig::shard_release`, also with `SPUBLISH`, where
//!   Redisson's cluster waiters listen by default);
//! - fencing: every grant, in the same script, takes the token
//!   `max(counter + 1, server time in µs)` and stores it in
//!   `polylock_fence:{name}` with the grant's lease as TTL. So tokens keep
//!   growing when the counter is lost or goes back (a restart without
//!   persistence or from an older snapshot, a failover to a replica that
//!   missed writes, an eviction), and the counter does not outlive the
//!   lock (see [`ACQUIRE`] for the one assumption: the server clock);
//! - polylock waiters queue in `polylock_queue:{name}` (FIFO, a sorted set
//!   scored by arrival time) with liveness deadlines in
//!   `polylock_queue_deadline:{name}` (members `<field>|<claim id>|<lease ms>`;
//!   both keys live as long as their longest-lived member), and each
//!   listens on its own channel, Redisson's channel `:<member>`. A release
//!   hands the lock straight to the first live waiter, for that waiter's
//!   lease, and publishes its fencing token on that waiter's channel: one
//!   release, one message, however many wait (no herd), and the waiter
//!   holds the lock without a round trip of its own. A Redisson release
//!   publishes only `0` on Redisson's channel, so a queued waiter listens
//!   there too (and with `SSUBSCRIBE` under `shard_release`); on a
//!   message the first in line (as its latest acquire answered) tries again.
//!
//! All scripts are idempotent in what they grant, so a request whose reply
//! was lost is simply sent again (a retried grant gets a new, larger token).
//!
//! Read-write locks: Redisson's `RReadWriteLock` layout, with a queue of
//! their own and the same handoff and fencing ([`rw_scripts`]).
//!
//! Semaphores: Redisson's `RPermitExpirableSemaphore` layout, with a queue
//! of their own, handoff of freed permits in queue order, and the same
//! fencing ([`sem_scripts`]).
//!
//! The pieces: [`scripts`] (the Lua), [`rw_scripts`], [`sem_scripts`], [`keys`] (where a lock lives),
//! `claim` (one claim's life), `cut` (a read lease another reader cut short), [`status`] (reading a lock's state).

mod claim;
mod cut;
pub mod keys;
mod lua;
pub mod rw_scripts;
pub mod scripts;
pub mod sem_scripts;
pub mod status;

pub(crate) use claim::{RedisClaim, RedisRole, Terms};
pub use keys::RedisKeys;
pub use scripts::{ACQUIRE, LEAVE, RENEW, STATUS};
