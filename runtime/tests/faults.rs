//! Faults against real servers: partitions (a TCP proxy cut between one
//! client and the server), session expiry, cancellation storms and a Redis
//! restart. Loss must reach the holder before anyone else is granted.

mod support;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use polylock::{ClientOptions, Error, LossReason, OwnerId};
use support::*;

/// A holder cut off from the server learns it lost the lock before a
/// second client, still connected, is granted it.
async fn partition_reports_loss_before_the_next_grant(scheme: &str, url: &str) {
    let name = unique(&format!("partition-{scheme}"));
    let proxy = Proxy::start(&host_port(url)).await;
    let opts = ClientOptions {
        lease: Duration::from_secs(1),
        session_timeout: Duration::from_secs(2),
        request_timeout: Duration::from_millis(500),
        ..Default::default()
    };
    let cut_off = client_with(&proxy.url(scheme), opts.clone()).await;
    let other = client_with(url, opts).await;
    let guard = cut_off.lock(&name).unwrap().acquire().await.unwrap();
    let waiter_lock = other.lock(&name).unwrap();
    let waiter = tokio::spawn(async move {
        let g = waiter_lock.acquire_as(OwnerId(2), None).await.unwrap();
        let at = Instant::now();
        (at, g.into_token())
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let cut_at = Instant::now();
    proxy.cut();
    let reason = tokio::time::timeout(Duration::from_secs(10), guard.lost()).await.expect("loss never reported");
    let lost_at = Instant::now();
    let (granted_at, token) =
        tokio::time::timeout(Duration::from_secs(15), waiter).await.expect("waiter hung").unwrap();
    assert!(
        lost_at < granted_at,
        "{scheme}: holder told of loss {:?} after the cut, but the other client was granted at {:?}",
        lost_at - cut_at,
        granted_at - cut_at
    );
    assert!(token > guard.fencing_token(), "{scheme}: the new grant has a larger token");
    match scheme {
        "redis" => assert_eq!(reason, LossReason::LeaseExpired),
        _ => assert!(matches!(reason, LossReason::Disconnected | LossReason::SessionExpired), "{reason:?}"),
    }
    assert!(matches!(guard.release().await, Err(Error::Lost { .. })));
    other.lock(&name).unwrap().release_as(OwnerId(2)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_partition_reports_loss_before_the_next_grant() {
    partition_reports_loss_before_the_next_grant("redis", &redis_url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_partition_reports_loss_before_the_next_grant() {
    partition_reports_loss_before_the_next_grant("zk", &zk_url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_session_expiry_fires_lost_and_hands_over() {
    let url = zk_url();
    let name = unique("expiry");
    let opts = ClientOptions { session_timeout: Duration::from_secs(2), debug_faults: true, ..Default::default() };
    let a = client_with(&url, opts).await;
    let b = client(&url).await;
    let g = a.lock(&name).unwrap().acquire().await.unwrap();
    let bl = b.lock(&name).unwrap();
    let waiter = tokio::spawn(async move { bl.acquire_as(OwnerId(2), None).await.map(|g| g.into_token()) });
    a.debug_expire_session().await.unwrap();
    let reason = tokio::time::timeout(Duration::from_secs(10), g.lost()).await.expect("no loss after expiry");
    assert!(matches!(reason, LossReason::SessionExpired | LossReason::Disconnected), "{reason:?}");
    let t = tokio::time::timeout(Duration::from_secs(10), waiter).await.expect("waiter hung").unwrap().unwrap();
    assert!(t > g.fencing_token());
    // The client works again on its new session.
    b.lock(&name).unwrap().release_as(OwnerId(2)).await.unwrap();
    let g2 = tokio::time::timeout(Duration::from_secs(10), a.lock(&name).unwrap().acquire()).await.unwrap().unwrap();
    g2.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_lease_deleted_server_side_fires_lost() {
    let url = redis_url();
    let name = unique("deleted");
    let c = client_with(&url, ClientOptions { lease: Duration::from_secs(1), ..Default::default() }).await;
    let g = c.lock(&name).unwrap().acquire().await.unwrap();
    let mut raw = raw_redis(&url).await;
    let _: i64 = redis::cmd("DEL").arg(&name).query_async(&mut raw).await.unwrap();
    let reason = tokio::time::timeout(Duration::from_secs(3), g.lost()).await.expect("no loss");
    assert_eq!(reason, LossReason::RenewalRefused);
}

/// 200 acquires cancelled at random moments (while queued, subscribing,
/// or racing a grant) leave no key and no node behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cancelled_acquires_leave_nothing_behind() {
    for (backend, url) in backends() {
        let name = unique("cancel");
        let holder = client(&url).await;
        let clients = [client(&url).await, client(&url).await, client(&url).await];
        let churn = holder.lock(&name).unwrap();
        // The lock changes hands all the time, so cancellations hit every phase.
        let stop = Arc::new(AtomicU64::new(0));
        let s2 = stop.clone();
        let churner = tokio::spawn(async move {
            while s2.load(Ordering::SeqCst) == 0 {
                let g = churn.acquire().await.unwrap();
                tokio::time::sleep(Duration::from_millis(3)).await;
                g.release().await.unwrap();
            }
        });
        let mut tasks = Vec::new();
        for i in 0..200u64 {
            let lock = clients[(i % 3) as usize].lock(&name).unwrap();
            tasks.push(tokio::spawn(async move {
                let cancel_after = Duration::from_micros((i * 7919) % 6000);
                let _ = tokio::time::timeout(cancel_after, lock.acquire_as(OwnerId(1000 + i), None)).await;
                // Granted in time: release normally (the point is the cancelled ones).
                let _ = lock.release_as(OwnerId(1000 + i)).await;
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        stop.store(1, Ordering::SeqCst);
        churner.await.unwrap();
        let clean = eventually(Duration::from_secs(10), || async {
            if backend == "redis" {
                redis_leftovers(&url, &name).await.is_empty()
            } else {
                zk_children(&url, &name).await.is_empty()
            }
        })
        .await;
        let left = if backend == "redis" { redis_leftovers(&url, &name).await } else { zk_children(&url, &name).await };
        assert!(clean, "{backend}: left behind {left:?}");
    }
}

/// Redis restarted without persistence while one client holds and another
/// waits. Documented behaviour: the holder's next renewal is refused, so it
/// is told `Lost(RenewalRefused)`; the waiter's pub/sub reconnects and
/// resubscribes, and it retries at once and is granted, with a fencing
/// token still larger than before the restart (the counter restarts from
/// the server clock).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_restart_while_held_and_awaited() {
    let Some(url) = redis2_url() else {
        eprintln!("POLYLOCK_TEST_REDIS2 not set: skipping the restart test");
        return;
    };
    let name = unique("restart");
    let opts = ClientOptions { lease: Duration::from_secs(2), ..Default::default() };
    let a = client_with(&url, opts.clone()).await;
    let b = client_with(&url, opts).await;
    let g = a.lock(&name).unwrap().acquire().await.unwrap();
    let before = g.fencing_token();
    let bl = b.lock(&name).unwrap();
    let waiter = tokio::spawn(async move { bl.acquire_as(OwnerId(2), None).await.map(|g| g.into_token()) });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/services");
    let status = std::process::Command::new("bash").arg(script).args(["restart-redis", "redis2"]).status().unwrap();
    assert!(status.success(), "restart failed");
    let reason = tokio::time::timeout(Duration::from_secs(10), g.lost()).await.expect("holder not told");
    assert!(matches!(reason, LossReason::RenewalRefused | LossReason::LeaseExpired), "{reason:?}");
    let after = tokio::time::timeout(Duration::from_secs(15), waiter).await.expect("waiter hung").unwrap().unwrap();
    assert!(after > before, "token went backwards across a restart: {after} <= {before}");
    b.lock(&name).unwrap().release_as(OwnerId(2)).await.unwrap();
}
