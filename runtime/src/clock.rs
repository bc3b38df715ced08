//! The clock every lock deadline is measured on: one that keeps counting
//! while the host is suspended.
//!
//! `std::time::Instant` is `CLOCK_MONOTONIC` on Linux, which stops while a
//! laptop sleeps or a VM is suspended. A holder's local deadline measured on
//! it would not have passed after resume, although the lease expired on the
//! server meanwhile and the lock may be someone else's: the holder would
//! keep writing, told nothing. So deadlines are measured on:
//! - Linux and Android: `CLOCK_BOOTTIME` (monotonic, counts suspend);
//! - macOS and iOS: `CLOCK_MONOTONIC`, which on Darwin counts time asleep;
//! - elsewhere: `std::time::Instant`, whose behaviour across a suspend is
//!   the platform's (docs/guarantees.md).
//!
//! The timer task still sleeps on tokio's clock; its longest nap is 1 s, so
//! after a resume the deadlines that passed run within a second, and any
//! call into the lock runs them first.

use std::time::Duration;

/// Time since an arbitrary fixed point (boot, on Linux), counting suspend.
#[cfg(any(target_os = "linux", target_os = "android", target_os = "macos", target_os = "ios"))]
fn since_boot() -> Duration {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    const CLOCK: libc::clockid_t = libc::CLOCK_BOOTTIME;
    #[cfg(any(target_os = "macos", target_os = "ios"))]
    const CLOCK: libc::clockid_t = libc::CLOCK_MONOTONIC;
    read(CLOCK)
}

#[cfg(any(target_os = "linux", target_os = "android", target_os = "macos", target_os = "ios"))]
pub(crate) fn read(clock: libc::clockid_t) -> Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec; the clock id is a constant
    // the platform defines. clock_gettime only writes `ts`.
    let rc = unsafe { libc::clock_gettime(clock, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime failed: {}", std::io::Error::last_os_error());
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

#[cfg(not(any(target_os = "linux", target_os = "android", target_os = "macos", target_os = "ios")))]
fn since_boot() -> Duration {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    START.get_or_init(std::time::Instant::now).elapsed()
}

/// A client's clock: time since the client was made, counting suspend.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SuspendAwareClock {
    epoch: Duration,
}

impl SuspendAwareClock {
    pub(crate) fn new() -> Self {
        SuspendAwareClock { epoch: since_boot() }
    }

    /// Time since this clock was made.
    pub(crate) fn elapsed(&self) -> Duration {
        since_boot().saturating_sub(self.epoch)
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    /// The clock is CLOCK_BOOTTIME, not CLOCK_MONOTONIC. The two differ by
    /// the time the host spent suspended; `scripts/test` runs this test in a
    /// time namespace whose boot clock is a day ahead
    /// (`unshare --time --boottime 86400`), where a clock that ignored
    /// suspend would be a day off. Outside one, on a host never suspended,
    /// the two agree and this only checks the reading.
    #[test]
    fn deadlines_are_measured_on_a_clock_that_counts_suspend() {
        let boot = read(libc::CLOCK_BOOTTIME);
        let ours = since_boot();
        let mono = read(libc::CLOCK_MONOTONIC);
        assert!(ours.abs_diff(boot) < Duration::from_millis(50), "ours {ours:?}, CLOCK_BOOTTIME {boot:?}");
        if boot.abs_diff(mono) > Duration::from_secs(60) {
            assert!(ours.abs_diff(mono) > Duration::from_secs(60), "ours follows CLOCK_MONOTONIC");
        } else if std::env::var_os("POLYLOCK_EXPECT_SUSPENDED_CLOCK").is_some() {
            panic!("POLYLOCK_EXPECT_SUSPENDED_CLOCK is set, but CLOCK_BOOTTIME and CLOCK_MONOTONIC agree");
        }
    }

    #[test]
    fn elapsed_grows_with_real_time() {
        let c = SuspendAwareClock::new();
        std::thread::sleep(Duration::from_millis(20));
        let e = c.elapsed();
        assert!(e >= Duration::from_millis(20) && e < Duration::from_secs(5), "{e:?}");
    }
}
