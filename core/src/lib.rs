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
//! A driver owns one [`LockTable`] per client (one Redis connection pair,
//! or one ZooKeeper session): every lock of that client lives in it. The
//! driver:
//!
//! 1. Gives it one input at a time, each with the current time from a
//!    monotonic clock. From the application: [`LockTable::acquire`],
//!    [`LockTable::release`], [`LockTable::cancel`] (each naming the lock),
//!    [`LockTable::grant_unwanted`], [`LockTable::read_status`],
//!    [`LockTable::close`]. From the connection:
//!    [`LockTable::handle_reply`]; [`LockTable::handle_notification`], for
//!    each pub/sub message and fired watch as it came (the table routes a
//!    message by its channel and a watch by the id of the command that set
//!    it); [`LockTable::handle_connection`] (the table tells every lock);
//!    [`LockTable::handle_timeout`]. A time earlier than one already given
//!    is treated as the latest seen.
//! 2. After every input, calls [`LockTable::poll_output`] until `None`:
//!    [`Output::Event`] (with the lock's name) and [`Output::Status`] go to
//!    the application; each [`Output::Command`] is sent, in order, on the
//!    one connection or session, and later gets exactly one reply with its
//!    id; [`Output::Timeout`] arms the driver's one timer, replacing the
//!    instant armed before. Events and status answers come before commands,
//!    so that a holder is told of a loss (say [`LossReason::Closed`]) before
//!    the command that gives the lock away leaves.
//!
//!    Inputs may also be given between any two `poll_output` calls (a reply
//!    that comes in while the driver drains, a driver that answers each
//!    command as it polls it): the outputs stay correct. The new input's
//!    events come before the commands still queued from earlier inputs, so
//!    earlier than they would have come, never later; commands keep the
//!    order they were produced in; a timeout is announced once nothing else
//!    is pending.
//! 3. When the armed instant comes, calls [`LockTable::handle_timeout`]
//!    (calling it early or twice is harmless: only due timers run). The
//!    table announces an instant only when it is earlier than the one it
//!    announced last, and again after each `handle_timeout`, so a poll never
//!    moves the timer later than a deadline.
//! 4. An [`Event::Granted`] that nobody takes (its caller went away between
//!    asking and the grant) is given back with [`LockTable::grant_unwanted`],
//!    so no lock is left held by nobody.
//!
//! Safety rests on point 3: a holder is told [`Event::Lost`] at its local
//! deadline, which is earlier than the server can give the lock away, but
//! only if `handle_timeout` runs on time. A process paused past its lease
//! (a GC pause, SIGSTOP) can still act on a stale belief; that is what
//! the fencing token on every grant is for.
//!
//! ```
//! use polylock_core::*;
//! let mut table = LockTable::new(LockConfig::new(Backend::Redis), Nonce(7)).unwrap();
//! let name = LockName::new("orders/42").unwrap();
//! let now = Instant::from_millis(0);
//! let ticket = table.acquire(now, &name, LockMode::Exclusive, OwnerId(1), AcquireOptions::default(), Nonce(9)).unwrap();
//! let Some(Output::Command(cmd)) = table.poll_output() else { panic!("one acquire script") };
//! assert_eq!(table.poll_output(), None, "an uncontended acquire is one round trip");
//! // The server grants with fencing token 5:
//! let reply = Reply::Redis(RedisValue::Array(vec![RedisValue::Int(1), RedisValue::Int(5)]));
//! table.handle_reply(Instant::from_millis(1), cmd.id, reply);
//! let granted = Event::Granted { ticket, owner: OwnerId(1), token: FencingToken(5), reentry: 0 };
//! assert_eq!(table.poll_output(), Some(Output::Event { name: name.clone(), mode: LockMode::Exclusive, event: granted }));
//! // Renewal is due a third of the lease after the request was sent.
//! assert_eq!(table.poll_output(), Some(Output::Timeout(Instant::from_millis(10_000))));
//! assert_eq!(table.poll_output(), None);
//! assert_eq!(table.hold("orders/42", LockMode::Exclusive, OwnerId(1)), Some((1, FencingToken(5))));
//! ```
//!
//! ## One lock: the machine inside the table
//!
//! The table runs one [`LockMachine`] per lock name, made on first use and
//! dropped once idle: the per-lock piece that owns the local side (who
//! holds the lock here and how often, who waits here and until when) and
//! the backend claim. The table gives its machines table-wide request ids,
//! tickets and release ids, routes replies and notifications to them, and
//! after each input drains a machine the way a driver of that one lock
//! would: [`LockMachine::poll_event`] until `None`,
//! [`LockMachine::poll_command`] until `None`, then
//! [`LockMachine::poll_timeout`]. A machine can be driven alone in the same
//! way (tests of one lock's lifecycle do), but a driver of real connections
//! owns the table.
//!
//! ## Modes: mutex and read-write lock
//! Every per-lock call names the lock by name and [`LockMode`]. The table
//! runs one machine per (name, mode), and for [`LockMode::Read`] one per
//! (name, owner) as well: readers of one client hold at once, each with its
//! own server record (Curator's node, Redisson's field), so the machine
//! keeps its one-holder shape and the backend claim decides eligibility
//! (ZooKeeper: Curator's `__READ__`/`__WRIT__` nodes). The table refuses a
//! read-to-write upgrade before anything reaches the server
//! ([`Error::UpgradeRefused`]) and hands a downgrade the writer's record.

#![forbid(unsafe_code)]
#![warn(missing_debug_implementations)]
#![warn(missing_docs)]

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
mod mode;
pub mod name;
pub mod refusal;
mod status;
mod table;
mod time;
mod timers;

pub use backend::{redis, zk};

pub use config::{Backend, LockConfig, ReplicasAsked};
pub use error::{Error, LossReason};
pub use ids::{holder_id, FencingToken, Nonce, OwnerId, ReleaseId, RequestId, Ticket};
pub use io::{
    Command, ConnectionEvent, Event, Notification, Op, RedisOp, RedisValue, ReleaseProgress, Reply, Script,
    TransportError, ZkOp,
};
pub use machine::{AcquireOptions, LockMachine};
pub use mode::{LockMode, PermitRequest};
pub use name::LockName;
pub use status::{LockStatus, PermitCounts};
pub use table::{LockTable, Output, StatusId};
pub use time::Instant;
