//! The runtime's error type: the core's errors plus what only I/O can go wrong with.

use polylock_core::LossReason;
use thiserror::Error;

/// Everything a polylock call can fail with. Bindings map each variant to
/// their language's exception or error class.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum Error {
    /// The connection string is malformed; the message says which part.
    #[error("invalid URL {url:?}: {reason}")]
    InvalidUrl { url: String, reason: String },
    /// The lock name is empty, too long or malformed.
    #[error("invalid lock name: {0}")]
    InvalidName(String),
    /// An option is out of range (a negative or zero lease, say).
    #[error("invalid option: {0}")]
    InvalidOption(String),
    /// The server could not be reached or refused the handshake.
    #[error("cannot connect to {addr}: {reason}")]
    Connect { addr: String, reason: String },
    /// The acquire deadline passed.
    #[error("timed out waiting for lock {0:?}")]
    Timeout(String),
    /// A try without waiting found the lock held.
    #[error("lock {0:?} is held by another owner")]
    WouldBlock(String),
    /// Release by an owner that does not hold the lock; the lock is unchanged.
    #[error("lock {0:?} is not held by this owner")]
    NotHeld(String),
    /// The lock was lost while held.
    #[error("lock {name:?} was lost: {reason}")]
    Lost { name: String, reason: LossReason },
    /// The server answered something the protocol never produces.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// The client was closed.
    #[error("the client is closed")]
    Closed,
    /// The acquire was cancelled.
    #[error("the acquire was cancelled")]
    Cancelled,
    /// The acquire's timeout passed while the server kept refusing with a
    /// transient error; `reply` is the server's last answer (`BUSY ...`,
    /// `LOADING ...`, `READONLY ...`, ZooKeeper `THROTTLEDOP ...`).
    #[error("lock {name:?}: the server is unavailable: {reply}")]
    Unavailable { name: String, reply: String },
}

impl Error {
    pub(crate) fn from_core(name: &str, e: polylock_core::Error) -> Self {
        use polylock_core::Error as E;
        match e {
            E::InvalidName(m) => Error::InvalidName(m),
            E::InvalidOption(m) => Error::InvalidOption(m),
            E::Timeout => Error::Timeout(name.to_owned()),
            E::WouldBlock => Error::WouldBlock(name.to_owned()),
            E::Cancelled => Error::Cancelled,
            E::NotHeld => Error::NotHeld(name.to_owned()),
            E::Lost(reason) => Error::Lost { name: name.to_owned(), reason },
            E::Protocol(m) => Error::Protocol(m),
            E::Closed => Error::Closed,
            E::Unavailable(reply) => Error::Unavailable { name: name.to_owned(), reply },
            other => Error::Protocol(other.to_string()),
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
