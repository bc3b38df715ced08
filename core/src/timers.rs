//! The timers a claim runs, and the backoff of its retries.

use std::time::Duration;

use crate::Instant;

/// The timers a claim may run. A small fixed table: the next deadline is
/// the minimum of the armed entries (after quinn's `timer.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Timer {
    /// Retry a request that got no answer, or a waiter's fallback retry.
    Retry = 0,
    /// Redis: renew the held lease.
    Renew = 1,
    /// ZooKeeper: the pause watchdog of a held grant (see `backend/zk/watchdog.rs`).
    Watchdog = 2,
    /// Redis: the local lease deadline; ZooKeeper: the disconnection deadline.
    /// Highest, so that it wins a tie: safety first.
    Loss = 3,
}

pub(crate) const ALL: [Timer; 4] = [Timer::Retry, Timer::Renew, Timer::Watchdog, Timer::Loss];

#[derive(Debug, Default, Clone)]
pub(crate) struct Timers([Option<Instant>; 4]);

impl Timers {
    pub(crate) fn set(&mut self, t: Timer, at: Instant) {
        self.0[t as usize] = Some(at);
    }
    pub(crate) fn clear(&mut self, t: Timer) {
        self.0[t as usize] = None;
    }
    pub(crate) fn get(&self, t: Timer) -> Option<Instant> {
        self.0[t as usize]
    }
    pub(crate) fn clear_all(&mut self) {
        self.0 = [None; 4];
    }
    pub(crate) fn next(&self) -> Option<Instant> {
        self.0.iter().flatten().min().copied()
    }
    /// Arms the retry timer after the backoff's next delay (both backends
    /// retry an unanswered request this way).
    pub(crate) fn retry_with_backoff(&mut self, backoff: &mut Backoff, cfg: &crate::LockConfig, now: Instant) {
        let d = backoff.next_delay(cfg.min_backoff, cfg.max_backoff);
        self.set(Timer::Retry, now.saturating_add(d));
    }

    /// Disarms and returns the timers due at `now`, earliest first.
    pub(crate) fn take_due(&mut self, now: Instant) -> Vec<Timer> {
        let mut due: Vec<(Instant, Timer)> = Vec::new();
        for t in ALL {
            if let Some(at) = self.get(t) {
                if at <= now {
                    due.push((at, t));
                    self.clear(t);
                }
            }
        }
        // A loss at the same instant as another timer wins: safety first.
        due.sort_by_key(|(at, t)| (*at, std::cmp::Reverse(*t as u8)));
        due.into_iter().map(|(_, t)| t).collect()
    }
}

/// Exponential backoff for retries of unanswered requests.
#[derive(Debug, Clone, Default)]
pub(crate) struct Backoff {
    failures: u32,
}

impl Backoff {
    pub(crate) fn next_delay(&mut self, min: Duration, max: Duration) -> Duration {
        let shift = self.failures.min(16);
        self.failures = self.failures.saturating_add(1);
        min.saturating_mul(1u32 << shift).min(max)
    }
    pub(crate) fn reset(&mut self) {
        self.failures = 0;
    }
}
