//! One timer task per client, for every deadline of every lock
//! (renewals, loss deadlines, retries, acquire timeouts): no task or thread
//! per lock. The lock table announces its earliest deadline
//! ([`polylock_core::Output::Timeout`]); the task sleeps until then, runs the
//! table's timers, and sleeps again.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use polylock_core::Instant;
use tokio::sync::Notify;

use crate::executor::Executor;

/// The longest nap: a dropped client is noticed within it, and a host
/// suspend (which tokio's sleep does not count) costs at most this much lateness.
const IDLE: Duration = Duration::from_secs(1);

/// What the executor tells the timer task.
#[derive(Debug)]
pub(crate) struct Timer {
    /// The earliest deadline announced since the task last ran the timers (ms; `u64::MAX`: none).
    next: AtomicU64,
    /// When the task wakes by itself (ms; 0 while it runs), so a deadline
    /// only wakes it early when it must: a grant's renewal, seconds away,
    /// costs no wake-up on the hot path.
    sleeps_until: AtomicU64,
    wake: Notify,
}

impl Timer {
    pub(crate) fn new() -> Self {
        Timer { next: AtomicU64::new(u64::MAX), sleeps_until: AtomicU64::new(0), wake: Notify::new() }
    }

    /// The table's earliest deadline is now `at`.
    pub(crate) fn arm(&self, at: Instant) {
        let at = at.as_millis();
        self.next.fetch_min(at, Ordering::AcqRel);
        if at < self.sleeps_until.load(Ordering::Acquire) {
            self.wake.notify_one();
        }
    }
}

/// The task: holds only a weak reference to the executor while asleep, so
/// a dropped client ends it.
pub(crate) async fn run(weak: Weak<Executor>, timer: Arc<Timer>) {
    loop {
        let nap = {
            let Some(exec) = weak.upgrade() else { return };
            timer.next.store(u64::MAX, Ordering::Release);
            // Runs what is due; the table announces its next deadline again.
            exec.fire_timers();
            let now = exec.now().as_millis();
            let wake_at = timer.next.load(Ordering::Acquire).min(now + IDLE.as_millis() as u64);
            timer.sleeps_until.store(wake_at, Ordering::Release);
            // A deadline announced before the store above did not wake us: look again.
            if timer.next.load(Ordering::Acquire) < wake_at {
                continue;
            }
            Duration::from_millis(wake_at.saturating_sub(now))
        };
        tokio::select! {
            _ = tokio::time::sleep(nap) => {}
            _ = timer.wake.notified() => {}
        }
        timer.sleeps_until.store(0, Ordering::Release);
    }
}
