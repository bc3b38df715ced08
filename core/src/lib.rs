//! # polylock-core
//!
//! The whole life of a distributed lock (acquire, wait, renew, release,
//! reentrancy, fencing, loss) as a sans-IO state machine, for Redis and
//! ZooKeeper. It never reads a clock, never touches a socket and never
//! spawns anything: time comes in as an argument, backend commands go out
//! as data, replies and notifications come back in. It builds for
//! `wasm32-unknown-unknown`.
//!
//! Both backend protocols are decided here ([`redis`]: keys, Lua scripts,
//! the waiter queue; [`zk`]: Curator's node layout and predecessor choice),
//! so every driver (the tokio runtime, a future wasm or embedded one) makes
//! the same decisions.
//!
//! ## The drive contract
//!
//! A driver owns one [`LockMachine`] per lock name and client, and:
//!
//! 1. Calls exactly one input method at a time, each with the current time
//!    from a monotonic clock: [`LockMachine::acquire`],
//!    [`LockMachine::release`], [`LockMachine::cancel`],
//!    [`LockMachine::close`], [`LockMachine::handle_reply`],
//!    [`LockMachine::handle_notification`],
//!    [`LockMachine::handle_connection`], [`LockMachine::handle_timeout`].
//!    A time earlier than one already given is treated as the latest seen.
//! 2. After every input, drains the outputs in this order:
//!    [`LockMachine::poll_event`] until `None` (deliver to the
//!    application); [`LockMachine::poll_command`] until `None` (send each,
//!    in order, on the one connection or session, and later feed back
//!    exactly one reply per command id); then [`LockMachine::poll_timeout`]
//!    (arm one timer). Events come first so that a holder is told of a loss
//!    (say [`LossReason::Closed`]) before the command that gives the lock
//!    away leaves.
//! 3. When the armed instant comes, calls [`LockMachine::handle_timeout`]
//!    (calling it early or twice is harmless: only due timers run).
//! 4. Reports connection changes ([`ConnectionEvent`]) to every machine of
//!    the connection, and each pub/sub message or fired watch to the
//!    machine whose command asked for it.
//!
//! Safety rests on point 3: a holder is told [`Event::Lost`] at its local
//! deadline, which is earlier than the server can give the lock away, but
//! only if `handle_timeout` runs on time. A process paused past its lease
//! (a GC pause, SIGSTOP) can still act on a stale belief; that is what
//! the fencing token on every grant is for.
//!
//! ```
//! use polylock_core::*;
//! let name = LockName::new("orders/42").unwrap();
//! let mut m = LockMachine::new(LockConfig::new(Backend::Redis), name, Nonce(7)).unwrap();
//! let now = Instant::from_millis(0);
//! let ticket = m.acquire(now, OwnerId(1), AcquireOptions::default(), Nonce(9)).unwrap();
//! let cmd = m.poll_command().expect("one acquire script");
//! assert!(m.poll_command().is_none(), "an uncontended acquire is one round trip");
//! // The server grants with fencing token 5:
//! let reply = Reply::Redis(RedisValue::Array(vec![RedisValue::Int(1), RedisValue::Int(5)]));
//! m.handle_reply(Instant::from_millis(1), cmd.id, reply);
//! assert_eq!(
//!     m.poll_event(),
//!     Some(Event::Granted { ticket, owner: OwnerId(1), token: FencingToken(5), reentry: 0 })
//! );
//! // Renewal is due a third of the lease after the request was sent.
//! assert_eq!(m.poll_timeout(), Some(Instant::from_millis(10_000)));
//! ```
//!
//! ## Room to grow
//! Shared/exclusive modes and N-permit semaphores fit the same shape: the
//! local side becomes a set of holders instead of one, and each backend
//! claim decides eligibility (ZooKeeper: Curator's `__READ__`/`__WRIT__`
//! nodes; Redis: a `mode` field as Redisson's read/write lock) without
//! changing the drive contract.

#![forbid(unsafe_code)]
#![warn(missing_debug_implementations)]

mod backend;
mod claim;
mod config;
mod error;
#[doc(hidden)]
pub mod fuzzing;
mod ids;
pub mod io;
pub mod keyslot;
mod machine;
pub mod name;
pub mod refusal;
mod status;
mod table;
mod time;
mod timers;

pub use backend::{redis, zk};

pub use config::{Backend, LockConfig};
pub use error::{Error, LossReason};
pub use ids::{holder_id, FencingToken, Nonce, OwnerId, ReleaseId, RequestId, Ticket};
pub use io::{
    Command, ConnectionEvent, Event, Notification, Op, RedisOp, RedisValue, ReleaseProgress, Reply, Script,
    TransportError, ZkOp,
};
pub use machine::{AcquireOptions, LockMachine};
pub use name::LockName;
pub use status::LockStatus;
pub use table::{LockTable, Output, StatusId};
pub use time::Instant;
