//! Which kind of hold an acquire asks for. A name is used either as a
//! mutex ([`LockMode::Exclusive`]) or as a read-write lock (its
//! [`LockMode::Read`] and [`LockMode::Write`] halves); the server layouts
//! differ (Redisson `RLock` vs `RReadWriteLock`, Curator
//! `InterProcessMutex` vs `InterProcessReadWriteLock`). A name may also be
//! a counting semaphore ([`LockMode::Semaphore`]: Redisson
//! `RPermitExpirableSemaphore`, Curator `InterProcessSemaphoreV2`), or
//! a leader election ([`LockMode::Leader`]: Curator `LeaderLatch`).

/// The kind of hold: one holder, or one of many readers, or the one writer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum LockMode {
    /// The mutex: one holder at a time.
    #[default]
    Exclusive,
    /// The read half of a read-write lock: shared with other readers,
    /// excluded by a writer. A waiting writer blocks new readers.
    Read,
    /// The write half: excludes readers and writers. Its holder may also
    /// take the read half (downgrade); a reader asking for it is refused
    /// ([`crate::Error::UpgradeRefused`]), never left to wait for itself.
    Write,
    /// Permits of a counting semaphore of `N` permits: an acquire asks for
    /// `k` of them ([`crate::PermitRequest`]). Each acquire is its own
    /// owner (its own server record, as each Redisson permit id and each
    /// Curator lease is), so one owner never holds two grants of one name.
    Semaphore,
    /// A participant of a leader election: the mutex's lifecycle (campaign
    /// = acquire, resign = release, deposed = lost), with the grant's
    /// fencing token as the leadership's term. ZooKeeper records it as
    /// Curator's `LeaderLatch` does (`latch-` nodes); Redis as the mutex's
    /// keys of the name. Not re-entrant: a participant that leads or
    /// campaigns already is refused another campaign.
    Leader,
}

impl LockMode {
    /// The halves of a read-write lock.
    pub fn is_read_write(self) -> bool {
        matches!(self, LockMode::Read | LockMode::Write)
    }

    /// Modes whose machines are per owner: readers of one client hold at
    /// once, and so do the holders of one semaphore's permits.
    pub fn is_per_owner(self) -> bool {
        matches!(self, LockMode::Read | LockMode::Semaphore)
    }

    /// A short word for messages and status: `mutex`, `read`, `write`.
    pub fn as_str(self) -> &'static str {
        match self {
            LockMode::Exclusive => "mutex",
            LockMode::Read => "read",
            LockMode::Write => "write",
            LockMode::Semaphore => "permits",
            LockMode::Leader => "leader",
        }
    }
}

/// What a semaphore acquire asks for: `count` of the semaphore's `total`
/// permits. Every client of one name must agree on `total`: the first one
/// records it on the server, and a client with another is refused with
/// [`crate::Error::PermitsMismatch`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PermitRequest {
    /// The semaphore's number of permits, which every client must agree on.
    pub total: u32,
    /// How many permits this acquire takes at once.
    pub count: u32,
}

impl PermitRequest {
    /// Refuses a semaphore of no permits, and a request for none or for
    /// more than the semaphore has (it could never be granted).
    pub fn validate(self) -> Result<(), crate::Error> {
        if self.total == 0 {
            return Err(crate::Error::InvalidOption("a semaphore needs at least one permit".into()));
        }
        if self.count == 0 || self.count > self.total {
            return Err(crate::Error::InvalidOption(format!(
                "cannot acquire {} of a semaphore's {} permits (ask for 1 to {})",
                self.count, self.total, self.total
            )));
        }
        Ok(())
    }
}
