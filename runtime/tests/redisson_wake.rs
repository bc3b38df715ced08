//! Redis: a polylock waiter queued behind a Redisson `RLock` holder takes
//! the lock when that holder releases, not at its lease expiry; and a
//! polylock release that hands the lock to a polylock waiter publishes no
//! Redisson `0` (one waiter woken, no herd). On one server, and under
//! Sentinel and on a Redis Cluster when their servers are set
//! (`scripts/services start --sentinel --cluster`).
//!
//! The Redisson holder is Redisson's own layout and unlock, run by hand: a
//! hash at the name with field `<uuid>:<thread>`, and an unlock that
//! deletes it and publishes `0` on Redisson's channel, with `SPUBLISH` on a
//! cluster (Redisson's `shardedSubscriptionMode` AUTO) and `PUBLISH` on
//! the other modes. The JVM suite's `RedissonInteropTest` does the same
//! with Redisson itself.

mod support;

use std::time::Duration;

use polylock::OwnerId;
use polylock_core::redis::RedisKeys;
use polylock_core::LockName;
use support::*;

/// The Redisson holder's lease: far longer than the wait allowed below,
/// so only its release can let the waiter in within that wait.
const REDISSON_LEASE_MS: u64 = 30_000;
const WAIT: Duration = Duration::from_secs(3);

/// Redisson's unlock (its script's effect for the last hold): delete the
/// hash and publish `0` on its channel, one script on the key's node.
const REDISSON_UNLOCK: &str = "redis.call('DEL', KEYS[1]); redis.call(ARGV[2], ARGV[1], '0'); return 1";

/// The modes whose servers are set: the URL polylock connects with, the
/// `redis://` URL of the master serving `name`'s key, and how Redisson
/// publishes its `0` there.
async fn modes(name: &str) -> Vec<(&'static str, String, String, &'static str)> {
    let mut modes = vec![("redis", redis_url(), redis_url(), "PUBLISH")];
    match sentinel_url() {
        Some(url) => {
            let master = format!("redis://{}", master_addr(&url).await);
            modes.push(("sentinel", url, master, "PUBLISH"));
        }
        None => eprintln!("sentinel skipped: POLYLOCK_TEST_SENTINEL is unset (scripts/services start --sentinel)"),
    }
    match std::env::var("POLYLOCK_TEST_CLUSTER").ok() {
        Some(url) => {
            let master = slot_master(&url, name).await;
            modes.push(("cluster", url, master, "SPUBLISH"));
        }
        None => eprintln!("cluster skipped: POLYLOCK_TEST_CLUSTER is unset (scripts/services start --cluster)"),
    }
    modes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_behind_a_redisson_holder_takes_the_lock_at_its_release() {
    let name = unique("redisson-wake");
    let keys = RedisKeys::of(&LockName::new(&name).unwrap());
    for (mode, url, master, publish) in modes(&name).await {
        let mut raw = raw_redis(&master).await;
        let _: () = redis::cmd("HSET").arg(&name).arg("redisson-uuid:1").arg(1).query_async(&mut raw).await.unwrap();
        let _: () = redis::cmd("PEXPIRE").arg(&name).arg(REDISSON_LEASE_MS).query_async(&mut raw).await.unwrap();

        let c = client(&url).await;
        let lock = c.lock(&name).unwrap();
        let waiter = tokio::spawn(async move { lock.acquire_as(OwnerId(1), Some(WAIT)).await });
        let queued = eventually(Duration::from_secs(2), || {
            let mut raw = raw.clone();
            let queue = keys.queue().to_owned();
            async move { redis::cmd("ZCARD").arg(&queue).query_async::<u64>(&mut raw).await.unwrap() == 1 }
        })
        .await;
        assert!(queued, "{mode}: the waiter never queued");
        // Queued, its subscriptions confirmed before its second try: a
        // moment for that try to be answered "busy" too.
        tokio::time::sleep(Duration::from_millis(200)).await;

        let _: i64 = redis::cmd("EVAL")
            .arg(REDISSON_UNLOCK)
            .arg(1)
            .arg(&name)
            .arg(keys.channel())
            .arg(publish)
            .query_async(&mut raw)
            .await
            .unwrap();
        let guard = waiter.await.unwrap().unwrap_or_else(|e| {
            panic!("{mode}: not granted within {WAIT:?} of the Redisson release (lease {REDISSON_LEASE_MS} ms): {e}")
        });
        guard.release().await.unwrap();
        c.close().await;
    }
}

/// `PUBLISH` calls the server has run, those inside scripts included.
async fn publishes(raw: &mut redis::aio::MultiplexedConnection) -> u64 {
    command_calls(raw).await.get("publish").copied().unwrap_or(0)
}

/// A polylock release with a polylock waiter queued hands the lock over
/// and publishes the new holder's token on its channel alone; Redisson's
/// `0` goes out only from a release that hands the lock to nobody.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_that_hands_over_publishes_no_redisson_wake_up() {
    // Its own server when there is one, since PUBLISH is counted server-wide.
    let url = redis2_url().unwrap_or_else(redis_url);
    let mut raw = raw_redis(&url).await;
    let name = unique("redisson-wake-handoff");
    let keys = RedisKeys::of(&LockName::new(&name).unwrap());
    let (holder, other) = (client(&url).await, client(&url).await);
    let guard = holder.lock(&name).unwrap().acquire().await.unwrap();
    let lock = other.lock(&name).unwrap();
    let waiter = tokio::spawn(async move { lock.acquire_as(OwnerId(1), Some(Duration::from_secs(10))).await });
    let queued = eventually(Duration::from_secs(5), || {
        let mut raw = raw.clone();
        let queue = keys.queue().to_owned();
        async move { redis::cmd("ZCARD").arg(&queue).query_async::<u64>(&mut raw).await.unwrap() == 1 }
    })
    .await;
    assert!(queued, "the waiter never queued");

    let before = publishes(&mut raw).await;
    guard.release().await.unwrap();
    let handed = waiter.await.unwrap().unwrap();
    let after_handoff = publishes(&mut raw).await;
    assert_eq!(after_handoff - before, 1, "a handoff publishes the token alone, no Redisson `0`");

    handed.release().await.unwrap();
    let after_release = publishes(&mut raw).await;
    assert_eq!(after_release - after_handoff, 1, "a release to nobody publishes Redisson's `0`");
    holder.close().await;
    other.close().await;
}

/// Two polylock waiters behind a Redisson holder; the first in line gives
/// up (its timeout): the second, now first, is told so by that LEAVE, and
/// takes the lock at the Redisson release, not at the holder's expiry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_next_in_line_hears_the_redisson_release_after_the_first_gives_up() {
    let url = redis_url();
    let name = unique("redisson-wake-next");
    let keys = RedisKeys::of(&LockName::new(&name).unwrap());
    let mut raw = raw_redis(&url).await;
    let _: () = redis::cmd("HSET").arg(&name).arg("redisson-uuid:1").arg(1).query_async(&mut raw).await.unwrap();
    let _: () = redis::cmd("PEXPIRE").arg(&name).arg(REDISSON_LEASE_MS).query_async(&mut raw).await.unwrap();
    let queued = |n: u64| {
        let raw = raw.clone();
        let queue = keys.queue().to_owned();
        eventually(Duration::from_secs(2), move || {
            let mut raw = raw.clone();
            let queue = queue.clone();
            async move { redis::cmd("ZCARD").arg(&queue).query_async::<u64>(&mut raw).await.unwrap() == n }
        })
    };

    let (first, second) = (client(&url).await, client(&url).await);
    let lock = first.lock(&name).unwrap();
    let quitter = tokio::spawn(async move { lock.acquire_as(OwnerId(1), Some(Duration::from_millis(800))).await });
    assert!(queued(1).await, "the first waiter never queued");
    let lock = second.lock(&name).unwrap();
    let waiter = tokio::spawn(async move { lock.acquire_as(OwnerId(2), Some(WAIT + WAIT)).await });
    assert!(queued(2).await, "the second waiter never queued");
    assert!(quitter.await.unwrap().is_err(), "the first waiter got a lock Redisson holds");
    assert!(queued(1).await, "the first waiter's LEAVE did not drop its queue entry");

    let _: i64 = redis::cmd("EVAL")
        .arg(REDISSON_UNLOCK)
        .arg(1)
        .arg(&name)
        .arg(keys.channel())
        .arg("PUBLISH")
        .query_async(&mut raw)
        .await
        .unwrap();
    let released = std::time::Instant::now();
    let guard = waiter.await.unwrap().unwrap();
    assert!(released.elapsed() < WAIT, "granted {:?} after the Redisson release", released.elapsed());
    guard.release().await.unwrap();
    first.close().await;
    second.close().await;
}
