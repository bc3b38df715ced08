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
    InvalidUrl {
        /// The connection string as given.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The lock name is empty, too long or malformed.
    #[error("invalid lock name: {0}")]
    InvalidName(String),
    /// An option is out of range (a negative or zero lease, say).
    #[error("invalid option: {0}")]
    InvalidOption(String),
    /// The server could not be reached or refused the handshake.
    #[error("cannot connect to {addr}: {reason}")]
    Connect {
        /// Every address tried (comma-separated when there were several).
        addr: String,
        /// What went wrong with each.
        reason: String,
    },
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
    Lost {
        /// The lock's name.
        name: String,
        /// Why it was lost.
        reason: LossReason,
    },
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
    Unavailable {
        /// The lock's name.
        name: String,
        /// The server's last refusal.
        reply: String,
    },
    /// A write acquire by an owner that holds the read half of the same
    /// read-write lock: refused at once (it would wait for itself forever).
    #[error("lock {0:?}: an owner holding the read lock cannot take the write lock")]
    UpgradeRefused(String),
    /// A semaphore's clients disagree on its number of permits: `server`
    /// is what the server records, `ours` what this handle was made with.
    /// Nothing was taken or changed.
    #[error("semaphore {name:?} has {server} permits on the server, not {ours}")]
    PermitsMismatch {
        /// The semaphore's name.
        name: String,
        /// The number of permits the server records.
        server: u32,
        /// The number of permits this handle was made with.
        ours: u32,
    },
}

/// What kind of failure an [`Error`](enum@Error) is, with a stable code per kind. A
/// binding chooses its language's error class from this (and reads the
/// structured fields through [`Error`](enum@Error)'s accessors), never from the message,
/// whose wording may change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// [`Error::InvalidUrl`].
    InvalidUrl,
    /// [`Error::InvalidName`].
    InvalidName,
    /// [`Error::InvalidOption`].
    InvalidOption,
    /// [`Error::Connect`].
    Connect,
    /// [`Error::Timeout`].
    Timeout,
    /// [`Error::WouldBlock`].
    WouldBlock,
    /// [`Error::NotHeld`].
    NotHeld,
    /// [`Error::Lost`].
    Lost,
    /// [`Error::Protocol`].
    Protocol,
    /// [`Error::Closed`].
    Closed,
    /// [`Error::Cancelled`].
    Cancelled,
    /// [`Error::Unavailable`].
    Unavailable,
    /// [`Error::UpgradeRefused`].
    UpgradeRefused,
    /// [`Error::PermitsMismatch`].
    PermitsMismatch,
}

impl ErrorKind {
    /// The stable, machine-readable code: `"invalid_url"`, `"connect"`,
    /// `"timeout"`, `"unavailable"`, `"lost"`, ... (snake case of the variant).
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::InvalidUrl => "invalid_url",
            ErrorKind::InvalidName => "invalid_name",
            ErrorKind::InvalidOption => "invalid_option",
            ErrorKind::Connect => "connect",
            ErrorKind::Timeout => "timeout",
            ErrorKind::WouldBlock => "would_block",
            ErrorKind::NotHeld => "not_held",
            ErrorKind::Lost => "lost",
            ErrorKind::Protocol => "protocol",
            ErrorKind::Closed => "closed",
            ErrorKind::Cancelled => "cancelled",
            ErrorKind::Unavailable => "unavailable",
            ErrorKind::UpgradeRefused => "upgrade_refused",
            ErrorKind::PermitsMismatch => "permits_mismatch",
        }
    }
}

impl std::fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The structured fields, so bindings never parse [`Error`](enum@Error)'s message.
impl Error {
    /// What kind of failure this is: match on this, not on the message.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::InvalidUrl { .. } => ErrorKind::InvalidUrl,
            Error::InvalidName(_) => ErrorKind::InvalidName,
            Error::InvalidOption(_) => ErrorKind::InvalidOption,
            Error::Connect { .. } => ErrorKind::Connect,
            Error::Timeout(_) => ErrorKind::Timeout,
            Error::WouldBlock(_) => ErrorKind::WouldBlock,
            Error::NotHeld(_) => ErrorKind::NotHeld,
            Error::Lost { .. } => ErrorKind::Lost,
            Error::Protocol(_) => ErrorKind::Protocol,
            Error::Closed => ErrorKind::Closed,
            Error::Cancelled => ErrorKind::Cancelled,
            Error::Unavailable { .. } => ErrorKind::Unavailable,
            Error::UpgradeRefused(_) => ErrorKind::UpgradeRefused,
            Error::PermitsMismatch { .. } => ErrorKind::PermitsMismatch,
        }
    }

    /// The lock concerned: timeouts, refusals, losses, releases not held and
    /// an unavailable server name one.
    pub fn lock_name(&self) -> Option<&str> {
        match self {
            Error::Timeout(name) | Error::WouldBlock(name) | Error::NotHeld(name) | Error::UpgradeRefused(name) => {
                Some(name)
            }
            Error::Lost { name, .. } | Error::Unavailable { name, .. } | Error::PermitsMismatch { name, .. } => {
                Some(name)
            }
            _ => None,
        }
    }

    /// The server address that could not be reached (`127.0.0.1:6379`) of a
    /// [`ErrorKind::Connect`].
    pub fn address(&self) -> Option<&str> {
        match self {
            Error::Connect { addr, .. } => Some(addr),
            _ => None,
        }
    }

    /// The malformed connection string of an [`ErrorKind::InvalidUrl`].
    pub fn url(&self) -> Option<&str> {
        match self {
            Error::InvalidUrl { url, .. } => Some(url),
            _ => None,
        }
    }

    /// Why, in words: what was wrong with a URL, why a connect failed, or
    /// why a lock was lost (the [`LossReason`]'s text).
    pub fn reason(&self) -> Option<String> {
        match self {
            Error::InvalidUrl { reason, .. } | Error::Connect { reason, .. } => Some(reason.clone()),
            Error::Lost { reason, .. } => Some(reason.to_string()),
            _ => None,
        }
    }

    /// Why a lock was lost, as the typed [`LossReason`].
    pub fn loss_reason(&self) -> Option<LossReason> {
        match self {
            Error::Lost { reason, .. } => Some(*reason),
            _ => None,
        }
    }

    /// The server's last reply of an [`ErrorKind::Unavailable`]
    /// (`BUSY ...`, `LOADING ...`, `THROTTLEDOP ...`).
    pub fn reply(&self) -> Option<&str> {
        match self {
            Error::Unavailable { reply, .. } => Some(reply),
            _ => None,
        }
    }

    /// A semaphore's permits as the server records them and as this
    /// handle has them (`(server, ours)`), when they disagree.
    pub fn permits(&self) -> Option<(u32, u32)> {
        match self {
            Error::PermitsMismatch { server, ours, .. } => Some((*server, *ours)),
            _ => None,
        }
    }
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
            E::UpgradeRefused => Error::UpgradeRefused(name.to_owned()),
            E::PermitsMismatch { server, ours } => Error::PermitsMismatch { name: name.to_owned(), server, ours },
            other => Error::Protocol(other.to_string()),
        }
    }
}

/// `std::result::Result` with polylock's [`Error`](enum@Error).
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    /// Every variant's kind and fields, as the bindings read them. A new
    /// variant must be added here (and to each binding's one table).
    #[test]
    fn each_variant_has_its_kind_and_fields() {
        let s = |v: &str| v.to_owned();
        let cases = [
            (
                Error::InvalidUrl { url: s("x://"), reason: s("bad scheme") },
                "invalid_url",
                None,
                None,
                Some("bad scheme"),
            ),
            (Error::InvalidName(s("empty")), "invalid_name", None, None, None),
            (Error::InvalidOption(s("lease")), "invalid_option", None, None, None),
            (Error::Connect { addr: s("h:1"), reason: s("refused") }, "connect", None, Some("h:1"), Some("refused")),
            (Error::Timeout(s("n")), "timeout", Some("n"), None, None),
            (Error::WouldBlock(s("n")), "would_block", Some("n"), None, None),
            (Error::NotHeld(s("n")), "not_held", Some("n"), None, None),
            (
                Error::Lost { name: s("n"), reason: LossReason::SessionExpired },
                "lost",
                Some("n"),
                None,
                Some("ZooKeeper session expired"),
            ),
            (Error::Protocol(s("?")), "protocol", None, None, None),
            (Error::Closed, "closed", None, None, None),
            (Error::Cancelled, "cancelled", None, None, None),
            (Error::Unavailable { name: s("n"), reply: s("BUSY") }, "unavailable", Some("n"), None, None),
            (Error::UpgradeRefused(s("n")), "upgrade_refused", Some("n"), None, None),
            (Error::PermitsMismatch { name: s("n"), server: 3, ours: 4 }, "permits_mismatch", Some("n"), None, None),
        ];
        for (e, code, name, addr, reason) in cases {
            assert_eq!(e.kind().as_str(), code, "{e:?}");
            assert_eq!(e.kind().to_string(), code);
            assert_eq!(e.lock_name(), name, "{e:?}");
            assert_eq!(e.address(), addr, "{e:?}");
            assert_eq!(e.reason().as_deref(), reason, "{e:?}");
            assert_eq!(e.reply(), matches!(e, Error::Unavailable { .. }).then_some("BUSY"), "{e:?}");
            assert_eq!(e.url(), matches!(e, Error::InvalidUrl { .. }).then_some("x://"), "{e:?}");
            assert_eq!(e.loss_reason(), matches!(e, Error::Lost { .. }).then_some(LossReason::SessionExpired));
        }
    }
}
