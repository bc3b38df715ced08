//! Which kind of hold an acquire asks for. A name is used either as a
//! mutex ([`LockMode::Exclusive`]) or as a read-write lock (its
//! [`LockMode::Read`] and [`LockMode::Write`] halves); the server layouts
//! differ (Redisson `RLock` vs `RReadWriteLock`, Curator
//! `InterProcessMutex` vs `InterProcessReadWriteLock`).

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
}

impl LockMode {
    /// The halves of a read-write lock.
    pub fn is_read_write(self) -> bool {
        matches!(self, LockMode::Read | LockMode::Write)
    }

    /// A short word for messages and status: `mutex`, `read`, `write`.
    pub fn as_str(self) -> &'static str {
        match self {
            LockMode::Exclusive => "mutex",
            LockMode::Read => "read",
            LockMode::Write => "write",
        }
    }
}
