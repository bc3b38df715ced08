//! The one error type of the core. Bindings map each variant to their
//! language's idiom (a Python exception class, a Java exception, a JS error).

use thiserror::Error;

/// Everything that can go wrong in a lock's life.
///
/// `Clone + PartialEq` so that events can carry errors and tests can compare
/// them; every variant is data, never a boxed source, so the core stays
/// allocation-light and `wasm32` friendly.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum Error {
    /// The lock name is empty, too long, or contains a forbidden character.
    #[error("invalid lock name: {0}")]
    InvalidName(String),
    /// An option value is out of range (a zero lease, a negative timeout, ...).
    #[error("invalid option: {0}")]
    InvalidOption(String),
    /// The acquire deadline passed before the lock was granted.
    #[error("timed out waiting for the lock")]
    Timeout,
    /// `try_acquire` without waiting found the lock held by someone else.
    #[error("the lock is held by another owner")]
    WouldBlock,
    /// The pending acquire was cancelled by the caller.
    #[error("the acquire was cancelled")]
    Cancelled,
    /// `release` by an owner that does not hold the lock. The lock stays as it was.
    #[error("the lock is not held by this owner")]
    NotHeld,
    /// The caller held the lock but lost it (lease expired, renewal refused,
    /// ZooKeeper session expired or disconnected for too long).
    #[error("the lock was lost: {0}")]
    Lost(LossReason),
    /// The server answered something this protocol never produces. The
    /// machine stops: it keeps returning this error.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// The client was closed.
    #[error("the client is closed")]
    Closed,
    /// A write acquire by an owner that holds the read half of the same
    /// lock: it would wait for its own read hold forever (Curator's and
    /// Redisson's self-deadlock), so it is refused at once. Release the read
    /// hold first. The opposite (downgrade) is allowed.
    #[error("an owner holding the read lock cannot take the write lock (upgrade is refused)")]
    UpgradeRefused,
    /// A semaphore's clients disagree on its number of permits: the server
    /// records `server` (the first client's, or what a Redisson client set
    /// up), this client asked with `ours`. Nothing was changed on the server.
    #[error("the semaphore has {server} permits on the server, this client was made with {ours}")]
    PermitsMismatch {
        /// The number the server records.
        server: u32,
        /// The number this client asked with.
        ours: u32,
    },
    /// The acquire deadline passed while the server kept refusing with a
    /// transient error (Redis `BUSY`, `LOADING`, `READONLY`, ...; ZooKeeper
    /// throttling): the server's last reply, so the caller sees why.
    #[error("the server is unavailable: {0}")]
    Unavailable(String),
    /// A one-shot read (a status query) got no answer: the connection or
    /// session is down. Lock work retries instead; a read has no deadline to retry within.
    #[error("no answer from the server: {0}")]
    NoAnswer(String),
}

/// Why a held lock was lost. Carried by [`crate::Event::Lost`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LossReason {
    /// Redis: a renewal found our field gone (the key expired or was deleted).
    RenewalRefused,
    /// Redis: the local lease deadline (lease minus drift) passed with no
    /// confirmed renewal. The server may expire the key at any moment.
    LeaseExpired,
    /// ZooKeeper: the session expired, so our ephemeral node is gone.
    SessionExpired,
    /// ZooKeeper: disconnected long enough that the server may expire the session.
    Disconnected,
    /// ZooKeeper: our node vanished while we held it (deleted by someone else).
    NodeDeleted,
    /// The server answered something impossible; the machine stopped.
    Protocol,
    /// ZooKeeper: the process itself was stalled (a GC pause, SIGSTOP) long
    /// enough that the server may have expired the session meanwhile.
    Paused,
    /// The client was closed while the lock was held: its release is under
    /// way, so the lock may be granted to someone else at any moment.
    Closed,
}

impl std::fmt::Display for LossReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LossReason::RenewalRefused => "lease renewal refused by the server",
            LossReason::LeaseExpired => "lease expired before a renewal was confirmed",
            LossReason::SessionExpired => "ZooKeeper session expired",
            LossReason::Disconnected => "disconnected from ZooKeeper for too long",
            LossReason::NodeDeleted => "lock node deleted by another client",
            LossReason::Protocol => "protocol error",
            LossReason::Paused => "the process was paused longer than the session is sure to survive",
            LossReason::Closed => "the client was closed while the lock was held",
        })
    }
}
