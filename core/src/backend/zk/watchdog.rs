//! The pause watchdog of a held ZooKeeper grant: a mutex claim's
//! ([`super::claim`]) and a semaphore permit's ([`super::permits`]).
//!
//! ZooKeeper expires a session that sends no heartbeat, and an expired
//! session's ephemeral nodes go: a process that stalls (a GC pause, a
//! stopped VM) may have lost its grant without hearing of it. The watchdog
//! fires every quarter session timeout while held; firing late by more than
//! a third of the timeout means this process stalled and sent no heartbeat
//! meanwhile, so the holder is told it may have lost the grant.

use std::time::Duration;

use crate::timers::{Timer, Timers};
use crate::Instant;

#[derive(Debug, Default, Clone)]
pub(super) struct PauseWatchdog {
    /// When it is due, while armed.
    due: Option<Instant>,
}

impl PauseWatchdog {
    /// Arms [`Timer::Watchdog`] in `timers` a quarter session timeout from `now`.
    pub(super) fn arm(&mut self, timers: &mut Timers, now: Instant, session_timeout: Duration) {
        let at = now.saturating_add(session_timeout / 4);
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
