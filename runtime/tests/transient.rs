//! Transient server trouble against a real Redis (the second one,
//! `POLYLOCK_TEST_REDIS2`, which these tests make busy, turn into a replica
//! and flush the script cache of): waiters wait through it inside their
//! timeout, holders survive what is shorter than their lease, a timeout
//! that passes meanwhile names the server's reply, and the order of one
//! lock's commands survives a script cache flush.

mod support;

use std::time::{Duration, Instant};

use polylock::{Client, ClientOptions, Error, LossReason, OwnerId};
use polylock_core::LockName;
use support::*;

/// The tests of this file take turns: each makes the whole server misbehave.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The second Redis, or None (the test is skipped, as the restart test is).
fn redis2() -> Option<String> {
    let url = redis2_url();
    if url.is_none() {
        eprintln!("POLYLOCK_TEST_REDIS2 not set (scripts/services start --redis2): skipping");
    }
    url
}

async fn client_leased(url: &str, lease: Duration) -> Client {
    client_with(url, ClientOptions { lease, ..ClientOptions::default() }).await
}

async fn query(url: &str, cmd: &mut redis::Cmd) -> redis::RedisResult<redis::Value> {
    let mut c = redis::Client::open(url).unwrap().get_multiplexed_async_connection().await.unwrap();
    cmd.query_async(&mut c).await
}

/// A Lua script spinning on the server until `SCRIPT KILL`: every other
/// client gets `BUSY` once `busy-reply-threshold` (100 ms here) has passed.
struct BusyScript {
    url: String,
}

impl BusyScript {
    async fn start(url: &str) -> BusyScript {
        query(url, redis::cmd("CONFIG").arg("SET").arg("busy-reply-threshold").arg(100)).await.unwrap();
        let spin_url = url.to_owned();
        tokio::spawn(async move {
            // Its reply (an error once killed, or a client-side timeout) does not matter.
            let _ = query(&spin_url, redis::cmd("EVAL").arg("while true do end").arg(0)).await;
        });
        // Wait until the server answers BUSY.
        loop {
            match query(url, &mut redis::cmd("PING")).await {
                Err(e) if e.code() == Some("BUSY") => break,
                _ => tokio::time::sleep(Duration::from_millis(10)).await,
            }
        }
        BusyScript { url: url.to_owned() }
    }

    async fn kill(self) {
        loop {
            match query(&self.url, redis::cmd("SCRIPT").arg("KILL")).await {
                Ok(_) => break,
                Err(e) if e.code() == Some("NOTBUSY") => break,
                Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_waits_through_a_busy_script_and_is_granted_once_it_is_killed() {
    let _turn = SERIAL.lock().await;
    let Some(url) = redis2() else { return };
    let name = unique("busy-waiter");
    let c = client(&url).await;
    let lock = c.lock(&name).unwrap();
    let busy = BusyScript::start(&url).await;
    let killer = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(600)).await;
        busy.kill().await;
    });
    let started = Instant::now();
    let outcome = lock.acquire_as(OwnerId(1), Some(Duration::from_secs(2))).await;
    killer.await.unwrap();
    let g = outcome.expect("granted once the script is killed, inside the 2 s timeout");
    assert!(started.elapsed() >= Duration::from_millis(500), "it waited for the script: {:?}", started.elapsed());
    g.release().await.unwrap();
    assert!(redis_leftovers(&url, &name).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_refused_busy_until_its_timeout_gets_unavailable_naming_busy() {
    let _turn = SERIAL.lock().await;
    let Some(url) = redis2() else { return };
    let name = unique("busy-timeout");
    let c = client(&url).await;
    let lock = c.lock(&name).unwrap();
    let busy = BusyScript::start(&url).await;
    let started = Instant::now();
    let outcome = lock.acquire_as(OwnerId(1), Some(Duration::from_secs(2))).await;
    let waited = started.elapsed();
    let status = c.status(&name).await;
    busy.kill().await;
    assert!(matches!(&status, Err(Error::Unavailable { reply, .. }) if reply.starts_with("BUSY")), "{status:?}");
    match outcome {
        Err(e @ Error::Unavailable { .. }) => {
            // What a binding reads to build its error: kind, name, reply.
            assert_eq!(e.kind().as_str(), "unavailable");
            assert_eq!(e.lock_name(), Some(name.as_str()));
            let reply = e.reply().expect("an Unavailable carries the server's reply");
            assert!(reply.starts_with("BUSY"), "names the server's reply: {reply}");
        }
        other => panic!("expected Unavailable naming BUSY, got {other:?}"),
    }
    assert!(waited >= Duration::from_millis(1900), "at its timeout, not at once: {waited:?}");
    // The name stays usable on this client.
    let g = lock.acquire_as(OwnerId(1), Some(Duration::from_secs(5))).await.expect("usable after the spell");
    g.release().await.unwrap();
    assert!(eventually(Duration::from_secs(3), || async { redis_leftovers(&url, &name).await.is_empty() }).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_survives_a_busy_spell_shorter_than_its_lease() {
    let _turn = SERIAL.lock().await;
    let Some(url) = redis2() else { return };
    let name = unique("busy-holder");
    let c = client_leased(&url, Duration::from_secs(3)).await;
    let g = c.lock(&name).unwrap().acquire().await.unwrap();
    // A spell of 1.5 s covers the first renewal (at 1 s) but ends before the lease.
    let busy = BusyScript::start(&url).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    busy.kill().await;
    // Past the original lease: only a renewal retried after the spell keeps it.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(g.lost_reason(), None, "lost during a BUSY spell shorter than the lease");
    let mut raw = raw_redis(&url).await;
    let field: Option<String> = redis::cmd("HGET")
        .arg(&name)
        .arg(c.lock(&name).unwrap().holder_id(g.owner()))
        .query_async(&mut raw)
        .await
        .unwrap();
    assert!(field.is_some(), "still held on the server");
    g.release().await.expect("released normally");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_refused_past_its_lease_is_told_lease_expired_at_its_deadline() {
    let _turn = SERIAL.lock().await;
    let Some(url) = redis2() else { return };
    let name = unique("busy-expired");
    let lease = Duration::from_secs(1);
    let c = client_leased(&url, lease).await;
    let lock = c.lock(&name).unwrap();
    let granted = Instant::now();
    let g = lock.acquire_as(OwnerId(1), None).await.unwrap();
    let busy = BusyScript::start(&url).await;
    let reason = tokio::time::timeout(Duration::from_secs(5), g.lost()).await;
    let told_after = granted.elapsed();
    busy.kill().await;
    assert_eq!(reason, Ok(LossReason::LeaseExpired), "lost at its deadline, not as a protocol error");
    assert!(told_after >= lease - Duration::from_millis(100), "told at once ({told_after:?}), not at its deadline");
    assert!(matches!(g.release().await, Err(Error::Lost { .. })));
    // The name stays usable on this client once the server answers again.
    let again = lock.acquire_as(OwnerId(1), Some(Duration::from_secs(5))).await.expect("usable after the spell");
    again.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readonly_replica_waiters_wait_holders_are_told_lost() {
    let _turn = SERIAL.lock().await;
    let Some(url) = redis2() else { return };
    let main = redis_url();
    let name = unique("readonly");
    let holder_client = client_leased(&url, Duration::from_secs(2)).await;
    let waiter_client = client(&url).await;
    let g = holder_client.lock(&name).unwrap().acquire().await.unwrap();
    let waiter = waiter_client.lock(&name).unwrap();
    // The holder's lock is in the data the server drops once it has synced
    // from its primary (at once: no diskless-sync delay on our own primary;
    // loaded from the socket, so no dump.rdb is left for a later restart).
    query(&main, redis::cmd("CONFIG").arg("SET").arg("repl-diskless-sync-delay").arg(0)).await.unwrap();
    query(&url, redis::cmd("CONFIG").arg("SET").arg("repl-diskless-load").arg("swapdb")).await.unwrap();
    let (host, port) = host_port(&main).split_once(':').map(|(h, p)| (h.to_owned(), p.to_owned())).unwrap();
    query(&url, redis::cmd("REPLICAOF").arg(&host).arg(&port)).await.unwrap();
    let waiting = tokio::spawn(async move {
        let started = Instant::now();
        (waiter.acquire_as(OwnerId(2), Some(Duration::from_secs(8))).await, started.elapsed(), waiter)
    });
    // A try with a short timeout meanwhile names READONLY (or LOADING while it syncs).
    let probe = waiter_client.lock(&name).unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let probed = probe.acquire_as(OwnerId(3), Some(Duration::from_millis(400))).await;
    let synced = eventually(Duration::from_secs(10), || async {
        let info = query(&url, redis::cmd("INFO").arg("replication")).await;
        matches!(info, Ok(redis::Value::BulkString(ref b)) if String::from_utf8_lossy(b).contains("master_link_status:up"))
            || matches!(info, Ok(redis::Value::VerbatimString { ref text, .. }) if text.contains("master_link_status:up"))
    })
    .await;
    query(&url, redis::cmd("REPLICAOF").arg("NO").arg("ONE")).await.unwrap();
    query(&url, redis::cmd("CONFIG").arg("SET").arg("repl-diskless-load").arg("disabled")).await.unwrap();
    assert!(synced, "the replica synced from its primary");
    match probed {
        Err(Error::Unavailable { reply, .. }) => {
            assert!(reply.starts_with("READONLY") || reply.starts_with("LOADING"), "{reply}")
        }
        other => panic!("expected Unavailable naming READONLY, got {other:?}"),
    }
    let (outcome, waited, _waiter) = waiting.await.unwrap();
    let g2 = outcome.expect("the waiter is granted once the server is a primary again");
    assert!(waited >= Duration::from_millis(500), "it waited through the replica spell: {waited:?}");
    // The holder's data is gone: its next renewal is refused and it is told.
    let reason = tokio::time::timeout(Duration::from_secs(3), g.lost()).await.expect("told within the lease");
    assert!(g2.fencing_token() > 0, "granted with a token {reason:?}");
    assert!(matches!(g.release().await, Err(Error::Lost { .. })));
    g2.release().await.unwrap();
}

/// Item 6: a cancel must never run before the acquire it cancels, even when
/// the acquire's script is missing from the server's cache and the cancel's
/// is not (what a `SCRIPT FLUSH` followed by another client's load leaves).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_never_overtakes_its_acquire_after_a_script_flush() {
    let _turn = SERIAL.lock().await;
    let Some(url) = redis2() else { return };
    let name = unique("flush-cancel");
    let key = LockName::new(&name).unwrap();
    let holder = client(&url).await;
    let hold = holder.lock(&name).unwrap();
    let g = hold.acquire_as(OwnerId(1), None).await.unwrap();
    let waiter = client(&url).await;
    let lock = waiter.lock(&name).unwrap();
    let mut raw = raw_redis(&url).await;
    for i in 0..40u64 {
        let _: () = redis::cmd("SCRIPT").arg("FLUSH").query_async(&mut raw).await.unwrap();
        let _: String = redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(polylock_core::redis::LEAVE.source)
            .query_async(&mut raw)
            .await
            .unwrap();
        let mut acquire = Box::pin(lock.acquire_as(OwnerId(100 + i), None));
        assert!(futures::poll!(&mut acquire).is_pending(), "the lock is held: the acquire waits");
        drop(acquire); // cancelled at once
    }
    waiter.close().await;
    let queued: i64 = redis::cmd("ZCARD")
        .arg(polylock_core::redis::RedisKeys::of(&key).queue().to_owned())
        .query_async(&mut raw)
        .await
        .unwrap();
    let deadlines: i64 = redis::cmd("ZCARD")
        .arg(polylock_core::redis::RedisKeys::of(&key).queue_deadline().to_owned())
        .query_async(&mut raw)
        .await
        .unwrap();
    let fields: Vec<String> = redis::cmd("HKEYS").arg(&name).query_async(&mut raw).await.unwrap();
    assert_eq!((queued, deadlines), (0, 0), "queue entries of cancelled claims are left");
    assert_eq!(fields, vec![hold.holder_id(OwnerId(1))], "only the holder's field");
    g.release().await.unwrap();
    // No finished claim is handed the lock by that release.
    let fields: Vec<String> = redis::cmd("HKEYS").arg(&name).query_async(&mut raw).await.unwrap();
    assert_eq!(fields, Vec::<String>::new(), "the release handed the lock to a cancelled claim");
    assert!(redis_leftovers(&url, &name).await.is_empty());
}

/// Scripts go by SHA1: after a `SCRIPT FLUSH` (what a restart or a failover
/// to a replica leaves too) a release is refused NOSCRIPT, sent again with
/// its source at once, and still hands the lock to the queued waiter, whose
/// token is higher; the lock is then free, and nothing is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_and_its_handoff_survive_a_script_flush() {
    let _turn = SERIAL.lock().await;
    let Some(url) = redis2() else { return };
    let name = unique("flush-handoff");
    let key = LockName::new(&name).unwrap();
    let holder = client(&url).await;
    let waiter = client(&url).await;
    let mut raw = raw_redis(&url).await;
    let g = holder.lock(&name).unwrap().acquire().await.unwrap();
    let lock = waiter.lock(&name).unwrap();
    let queued = tokio::spawn(async move { lock.acquire().await });
    let queue = polylock_core::redis::RedisKeys::of(&key).queue().to_owned();
    let in_queue = eventually(Duration::from_secs(5), || {
        let (mut raw, queue) = (raw.clone(), queue.clone());
        async move { redis::cmd("ZCARD").arg(&queue).query_async::<u64>(&mut raw).await.unwrap() == 1 }
    })
    .await;
    assert!(in_queue, "the waiter never queued");
    // Calls of `cmd` so far.
    let calls = |mut raw: redis::aio::MultiplexedConnection, cmd: &'static str| async move {
        command_calls(&mut raw).await.get(cmd).copied().unwrap_or(0)
    };
    // The waiter asks once more after subscribing: flushed only after that.
    let mut last = calls(raw.clone(), "evalsha").await;
    loop {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let now = calls(raw.clone(), "evalsha").await;
        if now == last {
            break;
        }
        last = now;
    }
    let _: () = redis::cmd("SCRIPT").arg("FLUSH").query_async(&mut raw).await.unwrap();
    let before = calls(raw.clone(), "eval").await;
    let first = g.fencing_token();
    g.release().await.unwrap();
    let g2 = tokio::time::timeout(Duration::from_secs(5), queued).await.expect("handed over").unwrap().unwrap();
    assert!(g2.fencing_token() > first, "token {} after {first}", g2.fencing_token());
    assert_eq!(calls(raw.clone(), "eval").await - before, 1, "one script sent with its source: the refused release");
    g2.release().await.unwrap();
    let fields: Vec<String> = redis::cmd("HKEYS").arg(&name).query_async(&mut raw).await.unwrap();
    assert!(fields.is_empty(), "the lock is still held: {fields:?}");
    holder.close().await;
    waiter.close().await;
    assert!(redis_leftovers(&url, &name).await.is_empty());
}
