//! When the last report from the server (a pub/sub message, a watch event)
//! passed each step on its way through this client to the caller it
//! answers: the hops inside a handoff's waiter that `bench/rust` puts in
//! its handoff breakdown. Only with the `handoff-trace` feature, which the
//! benchmark enables; without it `stamp` compiles to nothing.

/// A step of a report's way through the executor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hop {
    /// The transport has read it (Redis: the pub/sub connection's push).
    Read = 0,
    /// The executor's report task has it (the transport sent it over).
    ReportTaken = 1,
    /// A grant the table made of it was handed to its caller's channel.
    GrantSent = 2,
    /// The commands the table asked for after it (a handed-over waiter's
    /// unsubscribe) were started: their requests sent or queued.
    CommandsStarted = 3,
    /// The task that drives those commands' replies was spawned: the
    /// report task is done with it.
    ReportDone = 4,
}

impl Hop {
    /// Every hop, in the order a report passes them.
    pub const ALL: [Hop; 5] = [Hop::Read, Hop::ReportTaken, Hop::GrantSent, Hop::CommandsStarted, Hop::ReportDone];
}

#[cfg(feature = "handoff-trace")]
mod stamps {
    use std::sync::atomic::{AtomicU64, Ordering};

    static STAMPS: [AtomicU64; 5] = [const { AtomicU64::new(0) }; 5];

    /// The stamps' clock, `CLOCK_MONOTONIC` in ns: comparable across
    /// processes, as the benchmark compares its waiter's stamps with its
    /// holder's (which it reads here too).
    pub fn now_ns() -> u64 {
        crate::clock::read(libc::CLOCK_MONOTONIC).as_nanos() as u64
    }

    pub(crate) fn stamp(hop: super::Hop) {
        STAMPS[hop as usize].store(now_ns(), Ordering::Relaxed);
    }

    /// When a report last passed `hop` (`CLOCK_MONOTONIC` ns; 0: never).
    pub fn last(hop: super::Hop) -> u64 {
        STAMPS[hop as usize].load(Ordering::Relaxed)
    }
}

#[cfg(feature = "handoff-trace")]
pub(crate) use stamps::stamp;
#[cfg(feature = "handoff-trace")]
pub use stamps::{last, now_ns};

#[cfg(not(feature = "handoff-trace"))]
#[inline(always)]
pub(crate) fn stamp(_: Hop) {}
