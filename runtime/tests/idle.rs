//! An idle client leaves the host's CPU alone: connected, holding 100
//! locks, right after a burst of calls, its process burns next to no CPU
//! (renewal timers and ZooKeeper pings only; no thread polls or spins).
//! Its own test binary, so no other test's work is in the process's count.

mod support;

use std::time::Duration;

use polylock::Client;

/// The process's CPU time so far (user + system, every thread).
fn process_cpu() -> Duration {
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage writes the struct it is given and nothing else.
    assert_eq!(unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) }, 0);
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

/// How long the client sits idle, and the CPU it may use meanwhile: 0.5% of
/// one core. A client that polled every millisecond, or spun after the
/// burst, would use many times that.
const IDLE: Duration = Duration::from_secs(2);
const BOUND: Duration = Duration::from_millis(10);

async fn idle_cpu(url: &str) -> Duration {
    let client = Client::connect(url).await.unwrap();
    let prefix = format!("idle-{}", polylock::OwnerId::fresh().0);
    // A burst of quick calls first: whatever a busy spell starts must stop
    // once the calls do.
    let busy = client.lock(&format!("{prefix}/busy")).unwrap();
    for _ in 0..300 {
        busy.acquire().await.unwrap().release().await.unwrap();
    }
    let mut guards = Vec::new();
    for i in 0..100 {
        guards.push(client.lock(&format!("{prefix}/{i}")).unwrap().acquire().await.unwrap());
    }
    // Let the last replies and their wake-ups settle.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = process_cpu();
    tokio::time::sleep(IDLE).await;
    let used = process_cpu() - before;
    for guard in guards {
        assert!(guard.lost_reason().is_none(), "a hold was lost while idle");
        guard.release().await.unwrap();
    }
    client.close().await;
    used
}

#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn an_idle_client_holding_100_locks_uses_almost_no_cpu() {
    for url in [support::redis_url(), support::zk_url()] {
        let used = idle_cpu(&url).await;
        eprintln!("{url}: {used:?} of CPU in {IDLE:?} idle");
        assert!(used < BOUND, "{url}: an idle client used {used:?} of CPU in {IDLE:?} (bound {BOUND:?})");
    }
}
