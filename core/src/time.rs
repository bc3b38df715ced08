//! Time as data. The core never reads a clock: every input carries `now`.

use std::time::Duration;

/// A point on the driver's monotonic clock, in milliseconds since an epoch
/// the driver chooses (its start, say). Only differences matter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Instant(u64);

impl Instant {
    /// The instant `ms` milliseconds after the driver's epoch.
    pub const fn from_millis(ms: u64) -> Self {
        Instant(ms)
    }

    /// Milliseconds since the driver's epoch.
    pub const fn as_millis(self) -> u64 {
        self.0
    }

    /// `self + d`, saturating instead of overflowing.
    pub fn saturating_add(self, d: Duration) -> Self {
        let ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        Instant(self.0.saturating_add(ms))
    }

    /// `self - d`, saturating at the epoch.
    pub fn saturating_sub(self, d: Duration) -> Self {
        let ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        Instant(self.0.saturating_sub(ms))
    }

    /// Time from `earlier` to `self`, zero if `earlier` is later.
    pub fn saturating_since(self, earlier: Instant) -> Duration {
        Duration::from_millis(self.0.saturating_sub(earlier.0))
    }
}

/// Keeps time moving forward: a `now` older than one already seen is
/// clamped to it (as str0m does), so a driver whose clock jitters cannot
/// move a deadline backwards.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Clock {
    latest: Instant,
}

impl Clock {
    pub(crate) fn observe(&mut self, now: Instant) -> Instant {
        if now > self.latest {
            self.latest = now;
        }
        self.latest
    }
}
