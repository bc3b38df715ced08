//! `redis+sentinel://` against a real Sentinel set (`scripts/services start
//! --sentinel`: one master, two replicas, three sentinels): the locks work
//! as on one server, and a failover during a held lock never lets two
//! holders believe at once, nor a token go back.
//!
//! The tests take turns (`SERIAL`): a failover would disturb the others.

mod support;

use std::time::{Duration, Instant};

use polylock::{ClientOptions, Error, OwnerId};
use support::*;

static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The Sentinel URL, or `None` (the test says it is skipped).
fn sentinel_or_skip(test: &str) -> Option<String> {
    let url = support::sentinel_url();
    if url.is_none() {
        eprintln!("POLYLOCK_TEST_SENTINEL not set (scripts/services start --sentinel): skipping {test}");
    }
    url
}

async fn master_conn(url: &str) -> redis::aio::MultiplexedConnection {
    raw_redis(&format!("redis://{}", master_addr(url).await)).await
}

fn services(args: &[&str]) -> String {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/services");
    let out = std::process::Command::new("bash").arg(script).args(args).output().unwrap();
    assert!(out.status.success(), "services {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Waits until the sentinels name a master other than `old`, with both replicas in sync.
async fn await_new_master(url: &str, old: &str) -> String {
    let moved = eventually(Duration::from_secs(30), || async { master_addr(url).await != old }).await;
    assert!(moved, "no failover away from {old} within 30 s");
    master_addr(url).await
}

/// Waits until the master has both replicas connected and caught up, so a
/// following failover has a replica to promote.
async fn await_replicas_in_sync(url: &str) {
    let synced = eventually(Duration::from_secs(30), || async {
        let mut c = master_conn(url).await;
        let info: String = redis::cmd("INFO").arg("replication").query_async(&mut c).await.unwrap_or_default();
        info.lines().filter(|l| l.starts_with("slave") && l.contains("state=online")).count() == 2
    })
    .await;
    assert!(synced, "the master's replicas did not come back in sync within 30 s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn twenty_tasks_over_three_clients_keep_the_counter_exact() {
    let Some(url) = sentinel_or_skip("the counter test") else { return };
    let _turn = SERIAL.lock().await;
    assert_eq!(count_under_lock(&url, &unique("sentinel-counter")).await, 200, "lost updates");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reentrancy_try_and_cancel_as_on_one_server() {
    let Some(url) = sentinel_or_skip("the reentrancy test") else { return };
    let _turn = SERIAL.lock().await;
    let name = unique("sentinel-reentry");
    let c = client(&url).await;
    let other = client(&url).await;
    let lock = c.lock(&name).unwrap();
    let me = OwnerId(7);
    let g1 = lock.acquire_as(me, None).await.unwrap();
    let g2 = lock.acquire_as(me, None).await.unwrap();
    assert_eq!(g1.fencing_token(), g2.fencing_token(), "re-entry is the same grant");
    g2.release().await.unwrap();
    let theirs = other.lock(&name).unwrap();
    assert!(theirs.try_acquire(Duration::from_millis(200)).await.unwrap().is_none(), "held after 1 of 2 releases");
    // A cancelled acquire (its future dropped) leaves nothing queued.
    let pending = tokio::time::timeout(Duration::from_millis(200), theirs.acquire_as(OwnerId(9), None)).await;
    assert!(pending.is_err(), "granted while held");
    let first = g1.fencing_token();
    g1.release().await.unwrap();
    let g = theirs.try_acquire(Duration::from_secs(5)).await.unwrap().expect("free after the last release");
    assert!(g.fencing_token() > first);
    g.release().await.unwrap();
    let master = format!("redis://{}", master_addr(&url).await);
    let clean = eventually(Duration::from_secs(3), || async { redis_leftovers(&master, &name).await.is_empty() }).await;
    assert!(clean, "a timed-out or cancelled waiter left something on the master");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_sentinel_or_an_unknown_master_is_a_connect_error_naming_the_addresses() {
    let Some(url) = sentinel_or_skip("the connect error test") else { return };
    let opts = ClientOptions { connect_timeout: Duration::from_secs(2), ..Default::default() };
    let started = Instant::now();
    match polylock::Client::connect_with("redis+sentinel://127.0.0.1:1,127.0.0.1:2/polylock", opts.clone()).await {
        Err(Error::Connect { addr, reason }) => {
            assert_eq!(addr, "127.0.0.1:1,127.0.0.1:2");
            assert!(reason.contains("127.0.0.1:1:") && reason.contains("127.0.0.1:2:"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    let unknown = format!("{}/no-such-master", url.rsplit_once('/').unwrap().0);
    match polylock::Client::connect_with(&unknown, opts).await {
        Err(Error::Connect { reason, .. }) => assert!(reason.contains("does not know master"), "{reason}"),
        other => panic!("{other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(4), "took {:?}", started.elapsed());
}

/// How the master goes away.
#[derive(Debug, Clone, Copy)]
enum Failover {
    /// `SENTINEL FAILOVER`: the master is demoted, a replica promoted.
    Ordered,
    /// SIGKILL of the master: the sentinels see it down after 1 s.
    Killed,
}

/// A holder and a waiter on two clients across a failover: the holder's
/// renewals reach the new master (the grant is still there a lease after
/// the switch, which only a renewal there can do) or the holder is told
/// `Lost` before the waiter is granted; the waiter's token is larger than
/// the holder's. The lease (6 s, renewed every 2 s) outlasts a failover
/// (1 to 3 s here), so a grant that reached the replicas survives it.
async fn failover_during_a_held_lock(url: &str, how: Failover) {
    let name = unique("sentinel-failover");
    let lease = Duration::from_secs(6);
    let opts = ClientOptions { lease, request_timeout: Duration::from_secs(1), ..Default::default() };
    let a = client_with(url, opts.clone()).await;
    let b = client_with(url, opts).await;
    let held = a.lock(&name).unwrap();
    let g = held.acquire_as(OwnerId(1), None).await.unwrap();
    let field = held.holder_id(OwnerId(1));
    let before = g.fencing_token();
    let loss = g.loss_watch();
    let lost_at = tokio::spawn(async move { loss.ended().await.map(|r| (r, Instant::now())) });
    let bl = b.lock(&name).unwrap();
    let waiter =
        tokio::spawn(async move { bl.acquire_as(OwnerId(2), None).await.map(|g| (g.into_token(), Instant::now())) });
    tokio::time::sleep(Duration::from_millis(200)).await;

    let old = master_addr(url).await;
    match how {
        Failover::Ordered => {
            let mut s = raw_redis(&format!("redis://{}", sentinels(url)[0])).await;
            let ok: String =
                redis::cmd("SENTINEL").arg("FAILOVER").arg(master_name(url)).query_async(&mut s).await.unwrap();
            assert_eq!(ok, "OK");
        }
        Failover::Killed => {
            services(&["kill-sentinel-master"]);
        }
    }
    let new = await_new_master(url, &old).await;
    eprintln!("{how:?}: the master moved from {old} to {new}");
    // The waiter's subscription moved with it: its channel is live on the new master.
    let pattern = format!("redisson_lock__channel:{{{name}}}:*");
    let resubscribed = eventually(Duration::from_secs(10), || async {
        let mut m = raw_redis(&format!("redis://{new}")).await;
        let chans: Vec<String> = redis::cmd("PUBSUB").arg("CHANNELS").arg(&pattern).query_async(&mut m).await.unwrap();
        chans.len() == 1
    })
    .await;
    assert!(resubscribed, "{how:?}: the waiter's channel is not subscribed on the new master {new}");
    // A lease later: if the grant is still on the new master, only the
    // holder's renewals there can have kept it.
    tokio::time::sleep(lease + Duration::from_millis(500)).await;
    if g.lost_reason().is_none() {
        let mut m = raw_redis(&format!("redis://{new}")).await;
        let there: i64 = redis::cmd("HEXISTS").arg(&name).arg(&field).query_async(&mut m).await.unwrap();
        assert_eq!(there, 1, "{how:?}: the holder believes it holds, the new master {new} has no grant");
        assert!(!waiter.is_finished(), "{how:?}: the waiter was granted while the holder holds");
        eprintln!("{how:?}: the holder kept its grant, renewed on {new}");
        g.release().await.unwrap();
    }
    let (token, granted_at) =
        tokio::time::timeout(Duration::from_secs(15), waiter).await.expect("waiter hung").unwrap().unwrap();
    if let Some((reason, at)) = lost_at.await.unwrap() {
        eprintln!("{how:?}: the holder was told {reason:?}");
        assert!(at <= granted_at, "{how:?}: the waiter was granted before the holder was told {reason:?}");
    }
    assert!(token > before, "{how:?}: token went back across the failover: {token} <= {before}");
    b.lock(&name).unwrap().release_as(OwnerId(2)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn failovers_during_a_held_lock_keep_one_holder_and_growing_tokens() {
    let Some(url) = sentinel_or_skip("the failover test") else { return };
    let _turn = SERIAL.lock().await;
    await_replicas_in_sync(&url).await;
    failover_during_a_held_lock(&url, Failover::Ordered).await;
    await_replicas_in_sync(&url).await;
    failover_during_a_held_lock(&url, Failover::Killed).await;
    // Bring the killed node back, as a replica of the new master.
    services(&["start", "--sentinel"]);
    await_replicas_in_sync(&url).await;
}

/// `replicas=3` with two replicas: no grant is ever acknowledged by three,
/// so none is reported; the acquire fails `Unavailable` naming the count
/// at its deadline and leaves nothing on the master. `replicas=2` is granted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_fewer_replicas_acknowledge_than_asked_is_not_granted() {
    let Some(url) = sentinel_or_skip("the replica acknowledgement test") else { return };
    let _turn = SERIAL.lock().await;
    await_replicas_in_sync(&url).await;
    let name = unique("sentinel-acks");
    let opts = ClientOptions { request_timeout: Duration::from_secs(1), ..Default::default() };
    let c = client_with(&format!("{url}?replicas=3"), opts.clone()).await;
    match c.lock(&name).unwrap().acquire_as(OwnerId(1), Some(Duration::from_millis(1500))).await {
        Err(Error::Unavailable { reply, .. }) => assert!(reply.contains("2 of 3 replicas"), "{reply}"),
        other => panic!("granted without the acknowledgements asked for: {other:?}"),
    }
    let master = format!("redis://{}", master_addr(&url).await);
    let clean = eventually(Duration::from_secs(3), || async { redis_leftovers(&master, &name).await.is_empty() }).await;
    assert!(clean, "an unacknowledged grant was left on the master");
    let two = client_with(&format!("{url}?replicas=2"), opts).await;
    let g = two.lock(&name).unwrap().try_acquire(Duration::from_secs(3)).await.unwrap().expect("two replicas ack");
    g.release().await.unwrap();
}
