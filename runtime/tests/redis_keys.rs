//! Redis only: the fence counter's rule, the lifetime of every key of a
//! lock, the waiter queue's expiry, and the cluster slot of every key,
//! each against the real server (issue 11, items 1, 2, 7 and 10).

use crate::support;

use std::time::Duration;

use polylock::{Client, LockOptions};
use polylock_core::LockName;
use support::*;

async fn grant_and_release(c: &Client, name: &str) -> u64 {
    let g = c.lock(name).unwrap().acquire().await.unwrap();
    let token = g.fencing_token();
    g.release().await.unwrap();
    token
}

/// What a Redis restarted from an older snapshot (or a replica that missed
/// the last writes) leaves: the counter at a value it had before later grants.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_grow_after_the_fence_counter_goes_back_to_an_older_value() {
    let url = redis_url();
    let name = unique("fence-rollback");
    let fence = polylock_core::redis::RedisKeys::of(&LockName::new(&name).unwrap()).fence().to_owned();
    let c = client(&url).await;
    let mut raw = raw_redis(&url).await;
    let first = grant_and_release(&c, &name).await;
    let snapshot: String = redis::cmd("GET").arg(&fence).query_async(&mut raw).await.unwrap();
    let second = grant_and_release(&c, &name).await;
    let third = grant_and_release(&c, &name).await;
    let _: () = redis::cmd("SET").arg(&fence).arg(&snapshot).query_async(&mut raw).await.unwrap();
    let fourth = grant_and_release(&c, &name).await;
    assert!(first < second && second < third, "tokens before the rollback: {first}, {second}, {third}");
    assert!(fourth > third, "token {fourth} after {third}: the counter went back to {snapshot}");
}

/// What a failover to a primary whose clock is behind the old one's
/// leaves: a counter ahead of the server's clock. Grants then count on from
/// the counter, and each stores its token (a grant that only answered
/// counter + 1 would leave the clock's smaller value behind, and the next
/// token would go back). Both grants by ACQUIRE and by LEAVE's handoff.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_count_on_from_a_counter_ahead_of_the_server_clock() {
    let url = redis_url();
    let name = unique("fence-ahead");
    let fence = polylock_core::redis::RedisKeys::of(&LockName::new(&name).unwrap()).fence().to_owned();
    let c = client(&url).await;
    let waiter = client(&url).await;
    let mut raw = raw_redis(&url).await;
    let now_us = grant_and_release(&c, &name).await;
    // A day ahead of the server clock, as a token.
    let ahead = now_us + 86_400_000_000;
    let _: () = redis::cmd("SET").arg(&fence).arg(ahead).query_async(&mut raw).await.unwrap();
    // Each token counts on from the one before: a token from the clock (a
    // day behind) would be far below. (A grant may skip a value: a waiter's
    // recheck that finds the lock handed to it is granted again.)
    let mut last = ahead;
    let mut next = |token: u64, how: &str| {
        assert!(token > last && token < ahead + 100, "{how}: token {token} after {last} (counter set to {ahead})");
        last = token;
    };
    next(grant_and_release(&c, &name).await, "a grant by ACQUIRE");
    next(grant_and_release(&c, &name).await, "the next grant by ACQUIRE");
    let held = c.lock(&name).unwrap().acquire().await.unwrap();
    next(held.fencing_token(), "a grant by ACQUIRE, held");
    let wl = waiter.lock(&name).unwrap();
    let queued = tokio::spawn(async move { wl.acquire().await.unwrap() });
    let queue = polylock_core::redis::RedisKeys::of(&LockName::new(&name).unwrap()).queue().to_owned();
    let queued_up = eventually(Duration::from_secs(5), || {
        let (mut raw, queue) = (raw.clone(), queue.clone());
        async move { redis::cmd("ZCARD").arg(&queue).query_async::<u64>(&mut raw).await.unwrap() == 1 }
    })
    .await;
    assert!(queued_up, "the waiter never queued");
    held.release().await.unwrap();
    let handed = queued.await.unwrap();
    next(handed.fencing_token(), "a grant by LEAVE's handoff");
    handed.release().await.unwrap();
    next(grant_and_release(&c, &name).await, "a grant by ACQUIRE after the handoff");
}

/// The scripts compare the counter and the clock as decimal strings (see
/// `lua_next_token!` in core): by length first, then byte by byte. A
/// counter with fewer digits than the clock's µs but bytes that sort later
/// ("999999999999999") is behind the clock; one with more digits but bytes
/// that sort earlier ("10999999999999999") is ahead of it. A comparison of
/// bytes alone gets both wrong: the first would count on from the counter,
/// below the clock, and the second would go back to the clock. The second
/// is above 2^53, where a Lua number (a double) would round `last + 1`. Grants by ACQUIRE and by LEAVE's handoff
/// alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_compare_with_the_clock_as_numbers_not_as_text() {
    let url = redis_url();
    let name = unique("fence-digits");
    let fence = polylock_core::redis::RedisKeys::of(&LockName::new(&name).unwrap()).fence().to_owned();
    let c = client(&url).await;
    let waiter = client(&url).await;
    let mut raw = raw_redis(&url).await;
    let server_us = |mut raw: redis::aio::MultiplexedConnection| async move {
        let (s, us): (u64, u64) = redis::cmd("TIME").query_async(&mut raw).await.unwrap();
        s * 1_000_000 + us
    };

    let behind = "999999999999999";
    let _: () = redis::cmd("SET").arg(&fence).arg(behind).query_async(&mut raw).await.unwrap();
    let before = server_us(raw.clone()).await;
    let token = grant_and_release(&c, &name).await;
    assert!(token >= before, "ACQUIRE: token {token} is below the clock ({before} µs) with the counter at {behind}");

    // Ahead, and above 2^53: one that carries, one that a double would
    // round to 10^16 (so would its + 1).
    let (ahead, odd) = ("10999999999999999", "10000000000000001");
    for (counter, next) in [(ahead, 11_000_000_000_000_000), (odd, 10_000_000_000_000_002)] {
        let _: () = redis::cmd("SET").arg(&fence).arg(counter).query_async(&mut raw).await.unwrap();
        let token = grant_and_release(&c, &name).await;
        assert_eq!(token, next, "ACQUIRE: the counter at {counter} is ahead of the clock");
    }

    // The same two through a handoff: the waiter is granted by the holder's LEAVE.
    let queue = polylock_core::redis::RedisKeys::of(&LockName::new(&name).unwrap()).queue().to_owned();
    for (counter, at_least) in [(behind, None), (odd, Some(10_000_000_000_000_002u64))] {
        let held = c.lock(&name).unwrap().acquire().await.unwrap();
        let wl = waiter.lock(&name).unwrap();
        let queued = tokio::spawn(async move { wl.acquire().await.unwrap() });
        let queued_up = eventually(Duration::from_secs(5), || {
            let (mut raw, queue) = (raw.clone(), queue.clone());
            async move { redis::cmd("ZCARD").arg(&queue).query_async::<u64>(&mut raw).await.unwrap() == 1 }
        })
        .await;
        assert!(queued_up, "the waiter never queued");
        let _: () = redis::cmd("SET").arg(&fence).arg(counter).query_async(&mut raw).await.unwrap();
        let before = server_us(raw.clone()).await;
        held.release().await.unwrap();
        let handed = queued.await.unwrap();
        let token = handed.fencing_token();
        handed.release().await.unwrap();
        match at_least {
            None => assert!(token >= before, "handoff: token {token} below the clock ({before} µs), counter {counter}"),
            // (A waiter's recheck that finds the lock handed to it is
            // granted again: a value may be skipped.)
            Some(next) => {
                assert!(
                    (next..next + 100).contains(&token),
                    "handoff: token {token}, the counter at {counter} is ahead of the clock"
                )
            }
        }
    }
}

/// A retried acquire (its first reply lost) finds the lock already granted
/// to its field: the answer must be a token above every earlier one even if
/// the counter was evicted or deleted meanwhile, never 0 and never a repeat.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_grant_after_the_counter_is_deleted_gets_a_new_larger_token() {
    let url = redis_url();
    let name = unique("fence-deleted");
    let n = LockName::new(&name).unwrap();
    let c = client(&url).await;
    let mut raw = raw_redis(&url).await;
    let g = c.lock(&name).unwrap().acquire().await.unwrap();
    let granted = g.fencing_token();
    let field: Vec<String> = redis::cmd("HKEYS").arg(&name).query_async(&mut raw).await.unwrap();
    let _: () = redis::cmd("DEL")
        .arg(polylock_core::redis::RedisKeys::of(&n).fence().to_owned())
        .query_async(&mut raw)
        .await
        .unwrap();
    // The same request again, as the runtime resends it when a reply is lost.
    let (flag, token): (i64, u64) = redis::Script::new(polylock_core::redis::ACQUIRE.source)
        .key(polylock_core::redis::RedisKeys::of(&n).lock())
        .key(polylock_core::redis::RedisKeys::of(&n).fence().to_owned())
        .key(polylock_core::redis::RedisKeys::of(&n).queue().to_owned())
        .key(polylock_core::redis::RedisKeys::of(&n).queue_deadline().to_owned())
        .arg(&field[0])
        .arg(30_000)
        .arg("1")
        .arg(30_000)
        .arg(polylock_core::redis::RedisKeys::of(&n).channel().to_owned())
        .arg(format!("{}|00000000000000aa", field[0]))
        .invoke_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(flag, 1, "the field still holds the lock");
    assert!(token > granted, "the retried grant answered token {token} after {granted}");
    g.release().await.unwrap();
}

/// redisson#6510: a service locking per order id must not leave a key per
/// id behind. Every key of a lock is gone once its lease has passed, and a
/// name locked again once its counter is gone still gets larger tokens.
///
/// Deterministic on a busy machine: the lease is the default 30 s, which no
/// acquire-and-release outlives (a 100 ms lease did, now and then, and the
/// release then failed as lost), and instead of sleeping past it the test
/// reads what is left: only keys that expire within the lease (the server
/// removes a key when its TTL passes, and no read returns it after), none
/// without a TTL, none living longer. Then the counters of some names are
/// removed as their expiry would, and those names are locked again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn no_key_of_100k_released_names_remains_after_their_lease() {
    const NAMES: usize = 100_000;
    const TASKS: usize = 256;
    let url = redis_url();
    let prefix = unique("many");
    let lease = Duration::from_secs(30);
    let options = LockOptions { lease: Some(lease), ..Default::default() };
    let c = client(&url).await;
    let mut tasks = Vec::new();
    for t in 0..TASKS {
        let (c, prefix, options) = (c.clone(), prefix.clone(), options.clone());
        tasks.push(tokio::spawn(async move {
            let mut tokens = Vec::new();
            for i in (t..NAMES).step_by(TASKS) {
                let name = format!("{prefix}/{i}");
                let g = c.lock_with(&name, options.clone()).unwrap().acquire().await.unwrap();
                if i < 10 {
                    tokens.push((name, g.fencing_token()));
                }
                g.release().await.unwrap();
            }
            tokens
        }));
    }
    let mut reused = Vec::new();
    for t in tasks {
        reused.extend(t.await.unwrap());
    }
    let mut raw = raw_redis(&url).await;
    let mut left: Vec<String> = Vec::new();
    let mut cursor = 0u64;
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(format!("*{prefix}/*"))
            .arg("COUNT")
            .arg(10_000)
            .query_async(&mut raw)
            .await
            .unwrap();
        left.extend(keys);
        if next == 0 {
            break;
        }
        cursor = next;
    }
    // What each key left has to live: -2 gone meanwhile, -1 no expiry.
    let mut outliving = Vec::new();
    for chunk in left.chunks(10_000) {
        let mut pipe = redis::pipe();
        for key in chunk {
            pipe.cmd("PTTL").arg(key);
        }
        let ttls: Vec<i64> = pipe.query_async(&mut raw).await.unwrap();
        for (key, ttl) in chunk.iter().zip(ttls) {
            if ttl == -1 || ttl > lease.as_millis() as i64 {
                outliving.push((key.clone(), ttl));
            }
        }
    }
    assert!(
        outliving.is_empty(),
        "{} of {} keys left outlive the lease, e.g. {:?}",
        outliving.len(),
        left.len(),
        &outliving[..outliving.len().min(3)]
    );
    for (name, before) in reused {
        // The counter gone, as its expiry leaves it.
        let fence = polylock_core::redis::RedisKeys::of(&LockName::new(&name).unwrap()).fence().to_owned();
        let _: i64 = redis::cmd("DEL").arg(&fence).query_async(&mut raw).await.unwrap();
        let g = c.lock_with(&name, options.clone()).unwrap().acquire().await.unwrap();
        assert!(g.fencing_token() > before, "{name}: token {} after {before}", g.fencing_token());
        g.release().await.unwrap();
    }
    // The shared server keeps nothing of the test's for 30 s.
    for chunk in left.chunks(10_000) {
        let _: i64 = redis::cmd("UNLINK").arg(chunk).query_async(&mut raw).await.unwrap();
    }
}

/// A waiter with a short TTL that gives up must not take a long-TTL
/// waiter's place with it: the queue keys live as long as their
/// longest-lived member.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_ttl_waiter_leaves_a_long_ttl_waiters_place_alone() {
    let url = redis_url();
    let name = unique("queue-ttl");
    let queue = polylock_core::redis::RedisKeys::of(&LockName::new(&name).unwrap()).queue().to_owned();
    let (holder, long, short) = (client(&url).await, client(&url).await, client(&url).await);
    let mut raw = raw_redis(&url).await;
    let g = holder.lock(&name).unwrap().acquire().await.unwrap();
    let long_lock =
        long.lock_with(&name, LockOptions { lease: Some(Duration::from_secs(30)), ..Default::default() }).unwrap();
    let long_wait = tokio::spawn(async move { long_lock.acquire().await.map(|g| g.into_token()) });
    let queued = eventually(Duration::from_secs(5), || {
        let mut raw = raw.clone();
        let queue = queue.clone();
        async move { redis::cmd("ZCARD").arg(&queue).query_async::<i64>(&mut raw).await.unwrap() == 1 }
    })
    .await;
    assert!(queued, "the 30 s waiter never queued");
    let first: Vec<String> = redis::cmd("ZRANGE").arg(&queue).arg(0).arg(0).query_async(&mut raw).await.unwrap();
    let short_lock =
        short.lock_with(&name, LockOptions { lease: Some(Duration::from_secs(1)), ..Default::default() }).unwrap();
    let gave_up = short_lock.try_acquire(Duration::from_millis(300)).await.unwrap();
    assert!(gave_up.is_none(), "the lock is held: the 1 s waiter cannot get it");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let now_first: Vec<String> = redis::cmd("ZRANGE").arg(&queue).arg(0).arg(0).query_async(&mut raw).await.unwrap();
    assert_eq!(now_first, first, "2 s after a 1 s waiter queued, the 30 s waiter lost its place");
    let released = g.fencing_token();
    g.release().await.unwrap();
    let handed = tokio::time::timeout(Duration::from_secs(2), long_wait).await;
    let token = handed.expect("the 30 s waiter was not handed the lock on release").unwrap().unwrap();
    assert!(token > released);
}

/// The CRC16 and hash-tag rule of core's slot function against a real
/// server's `CLUSTER KEYSLOT`, for every key of names of every brace shape.
/// The server runs in cluster mode on its own (KEYSLOT needs no cluster
/// formed), on a Unix socket of its own: no port to collide with.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_key_of_a_lock_is_in_the_lock_keys_slot_on_a_real_cluster_node() {
    let dir = std::env::temp_dir().join(format!("polylock-keyslot-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let socket = dir.join("redis.sock");
    let server = std::process::Command::new("redis-server")
        .args(["--port", "0", "--save", "", "--appendonly", "no", "--unixsocket"])
        .arg(&socket)
        .args(["--cluster-enabled", "yes", "--cluster-config-file"])
        .arg(dir.join("nodes.conf"))
        .arg("--dir")
        .arg(&dir)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("redis-server");
    let _server = StopOnDrop(server, dir);
    let url = format!("redis+unix://{}", socket.display());
    let mut raw = None;
    for _ in 0..100 {
        let connect = redis::Client::open(url.as_str()).unwrap();
        if let Ok(Ok(c)) =
            tokio::time::timeout(Duration::from_millis(500), connect.get_multiplexed_async_connection()).await
        {
            raw = Some(c);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut raw = raw.expect("the cluster-mode redis-server did not start");
    let mut checked = 0;
    for name in polylock_core::keyslot::brace_shaped_names() {
        let n = LockName::new(&name).unwrap();
        for key in [
            polylock_core::redis::RedisKeys::of(&n).lock().to_owned(),
            polylock_core::redis::RedisKeys::of(&n).fence().to_owned(),
            polylock_core::redis::RedisKeys::of(&n).queue().to_owned(),
            polylock_core::redis::RedisKeys::of(&n).queue_deadline().to_owned(),
        ] {
            let server: u16 = redis::cmd("CLUSTER").arg("KEYSLOT").arg(&key).query_async(&mut raw).await.unwrap();
            assert_eq!(polylock_core::keyslot::key_slot(&key), server, "core's slot of {key:?}");
            assert_eq!(server, polylock_core::keyslot::key_slot(&name), "{key:?} is not in the slot of {name:?}");
            checked += 1;
        }
    }
    assert!(checked > 100);
}

/// A server this test started, stopped (and its directory removed) however the test ends.
struct StopOnDrop(std::process::Child, std::path::PathBuf);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
        let _ = std::fs::remove_dir_all(&self.1);
    }
}

/// `status` of a lock held past its first lease: polylock's renewals keep
/// the fence counter with the lock, so the token is still shown (an
/// election's term, say). A counter gone while the lock is held (a Redisson
/// holder's, which its watchdog does not extend; an eviction) shows no
/// token (unknown), never a token of 0 (issue 46).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_of_a_lock_held_past_its_lease_shows_its_token_and_none_once_the_counter_is_gone() {
    let url = redis_url();
    let name = unique("status-expired-fence");
    let fence = polylock_core::redis::RedisKeys::of(&LockName::new(&name).unwrap()).fence().to_owned();
    let c = client(&url).await;
    let g = c
        .lock_with(&name, LockOptions { lease: Some(Duration::from_millis(600)), ..Default::default() })
        .unwrap()
        .acquire()
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert!(g.lost_reason().is_none(), "renewals keep the lock");
    let st = c.status(&name).await.unwrap();
    assert_eq!(st.fencing_token, Some(g.fencing_token()), "the renewals did not keep the counter: {st:?}");
    let mut raw = raw_redis(&url).await;
    let _: i64 = redis::cmd("DEL").arg(&fence).query_async(&mut raw).await.unwrap();
    let st = c.status(&name).await.unwrap();
    assert!(st.held, "{st:?}");
    assert_eq!(st.holder.as_deref(), Some(g.lock().holder_id(g.owner()).as_str()), "{st:?}");
    assert_eq!(st.fencing_token, None, "a token claimed for a missing counter: {st:?}");
    assert!(st.ttl_ms.is_some_and(|t| t > 0), "{st:?}");
    g.release().await.unwrap();
}
