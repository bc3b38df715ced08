//! The pause watchdog of a held ZooKeeper grant: a mutex claim's
//! ([`super::claim`]) and a semaphore permit's ([`super::permits`]).
//!
//! ZooKeeper expires a session that sends no heartbeat, and an expired
//! session's ephemeral nodes go: a process that stalls (a GC pause, a
//! stopped VM) may have lost its grant without hearing of it. The watchdog
//! fires at most a quarter session timeout apart while held; firing late by
//! more than a third of the timeout means this process stalled and sent no
//! heartbeat meanwhile, so the holder is told it may have lost the grant.
//!
//! It comes due on the table's grid of quarter session timeouts (multiples
//! of the quarter on the table's time line), not a quarter after the
//! grant's own instant: every hold of a client then comes due at the same
//! instants, and a process holding 100 locks wakes four times a session
//! timeout, as one holding a single lock does, not 400 times. Due at or
//! before a quarter from now, a stall is seen no later than before.

use std::time::Duration;

use crate::timers::{Timer, Timers};
use crate::Instant;

#[derive(Debug, Default, Clone)]
pub(super) struct PauseWatchdog {
    /// When it is due, while armed.
    due: Option<Instant>,
}

impl PauseWatchdog {
    /// Arms [`Timer::Watchdog`] in `timers` at the last grid instant no more
    /// than a quarter session timeout from `now` (always after `now`).
    pub(super) fn arm(&mut self, timers: &mut Timers, now: Instant, session_timeout: Duration) {
        // The config refuses a session timeout under 100 ms: the quarter is never 0.
        let quarter = u64::try_from((session_timeout / 4).as_millis()).unwrap_or(u64::MAX).max(1);
        let horizon = now.saturating_add(session_timeout / 4).as_millis();
        let at = Instant::from_millis(horizon - horizon % quarter);
        self.due = Some(at);
        timers.set(Timer::Watchdog, at);
    }

    /// [`Timer::Watchdog`] fired at `now`: whether it fired so late that the
    /// session may have expired unseen (the grant is to be treated as lost).
    /// On time, it is armed again.
    pub(super) fn fired_late(&mut self, timers: &mut Timers, now: Instant, session_timeout: Duration) -> bool {
        let late = self.due.map_or(Duration::ZERO, |at| now.saturating_since(at));
        if late > session_timeout / 3 {
            self.due = None;
            return true;
        }
        self.arm(timers, now, session_timeout);
        false
    }
}
