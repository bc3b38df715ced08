//! One timer task per client, for every deadline of every lock
//! (renewals, loss deadlines, retries, acquire timeouts): no task or thread
//! per lock. The lock table announces its earliest deadline
//! ([`polylock_core::Output::Timeout`]); the task sleeps until then, runs the
//! table's timers, and sleeps again.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use polylock_core::Instant;
use tokio::sync::Notify;

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

/// The task. `fire` runs the table's due timers and returns the time now,
/// or `None` once the client is gone (it holds the executor weakly, so a
/// dropped client ends this task).
pub(crate) async fn run(timer: Arc<Timer>, fire: impl Fn() -> Option<Instant>) {
    loop {
        timer.next.store(u64::MAX, Ordering::Release);
        // Runs what is due; the table announces its next deadline again.
        let Some(now) = fire() else { return };
        let now = now.as_millis();
        let wake_at = timer.next.load(Ordering::Acquire).min(now + IDLE.as_millis() as u64);
        timer.sleeps_until.store(wake_at, Ordering::Release);
        // A deadline announced before the store above did not wake us: look again.
        if timer.next.load(Ordering::Acquire) < wake_at {
            continue;
        }
        // A deadline already due (one in the millisecond between the run
        // and the clock reading above, or armed meanwhile from an earlier
        // reading) runs at once.
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(wake_at.saturating_sub(now))) => {}
            _ = timer.wake.notified() => {}
        }
        timer.sleeps_until.store(0, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// The table's next deadline can be due already when the task reads it:
    /// `fire` reads the clock after running the timers, so a timer due in
    /// the millisecond between (or one armed meanwhile by another thread
    /// from an earlier reading) is in the past. The task must run it at
    /// once, not compute a sleep from a negative span (which panicked in a
    /// debug build and, wrapped in a release one, slept for ever: no
    /// renewal, loss deadline or timeout of the client ran again).
    #[tokio::test]
    async fn a_deadline_already_due_when_the_task_looks_runs_at_once() {
        let timer = Arc::new(Timer::new());
        let calls = Arc::new(AtomicUsize::new(0));
        let (t, c) = (timer.clone(), calls.clone());
        let task = tokio::spawn(run(timer, move || {
            let now = Instant::from_millis(60_000);
            match c.fetch_add(1, Ordering::SeqCst) {
                0 => {
                    t.arm(now.saturating_sub(Duration::from_millis(1)));
                    Some(now)
                }
                _ => None,
            }
        }));
        let ended = tokio::time::timeout(IDLE / 4, task).await;
        assert!(matches!(ended, Ok(Ok(()))), "the task did not run the due deadline at once: {ended:?}");
        assert_eq!(calls.load(Ordering::SeqCst), 2);
    }
}
