//! ZooKeeper watches against a real server: a claim that stops watching
//! leaves no watch behind, and a holder whose node someone else deletes is
//! told.

use crate::support;

use std::time::Duration;

use polylock::{ClientOptions, Error, LossReason, OwnerId};
use support::*;

/// Tasks alive on the test's runtime, once background work has settled.
async fn settled_task_count(at_most: usize) -> usize {
    let metrics = tokio::runtime::Handle::current().metrics();
    let mut alive = metrics.num_alive_tasks();
    for _ in 0..100 {
        if alive <= at_most {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        alive = metrics.num_alive_tasks();
    }
    alive
}

/// 200 acquires with a 20 ms timeout against a lock held by another client:
/// each one watches its predecessor and then gives up. Whatever watching
/// costs must go with it, so the runtime's task count returns to what it
/// was before the loop instead of growing by one per attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timed_acquires_against_a_held_lock_leave_no_watch_behind() {
    let url = zk_url();
    let name = unique("watch-churn");
    let holder = client(&url).await;
    let contender = client(&url).await;
    let guard = holder.lock(&name).unwrap().acquire().await.unwrap();
    let lock = contender.lock(&name).unwrap();
    // One attempt first, so that whatever is made once per client exists.
    assert!(lock.try_acquire(Duration::from_millis(20)).await.unwrap().is_none());
    let baseline = settled_task_count(0).await;
    let watches = contender.debug_live_watches();
    for _ in 0..200 {
        assert!(lock.try_acquire(Duration::from_millis(20)).await.unwrap().is_none());
    }
    let after = settled_task_count(baseline).await;
    assert!(after <= baseline, "{} tasks alive after 200 timed acquires, {baseline} before", after);
    assert!(
        eventually(Duration::from_secs(2), || async { contender.debug_live_watches() <= watches }).await,
        "{} watches live after 200 timed acquires, {watches} before",
        contender.debug_live_watches()
    );
    assert_eq!(zk_children(&url, &name).await.len(), 1, "only the holder's node is left");
    guard.release().await.unwrap();
}

/// Someone deletes the holder's node (an admin's `deleteall`, a buggy peer):
/// the holder is told `NodeDeleted`, its release reports the loss, and the
/// next waiter is granted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_whose_node_is_deleted_is_told() {
    let url = zk_url();
    let name = unique("node-deleted");
    let holder = client(&url).await;
    let other = client(&url).await;
    let guard = holder.lock(&name).unwrap().acquire().await.unwrap();
    let waiting_lock = other.lock(&name).unwrap();
    let waiter = tokio::spawn(async move { waiting_lock.acquire_as(OwnerId(2), None).await.map(|g| g.into_token()) });
    assert!(eventually(Duration::from_secs(5), || async { zk_children(&url, &name).await.len() == 2 }).await);

    let raw = raw_zk(&url).await;
    let mut nodes = polylock_core::zk::sorted_contenders(raw.list_children(&name).await.unwrap());
    let holders_node = nodes.remove(0);
    raw.delete(&format!("{name}/{holders_node}"), None).await.unwrap();

    let reason = tokio::time::timeout(Duration::from_secs(5), guard.lost()).await.expect("the holder was never told");
    assert_eq!(reason, LossReason::NodeDeleted);
    let token = tokio::time::timeout(Duration::from_secs(5), waiter).await.expect("waiter hung").unwrap().unwrap();
    assert!(token > guard.fencing_token(), "the next grant has a larger token");
    assert!(matches!(guard.release().await, Err(Error::Lost { .. })), "release after the loss reports it");
    other.lock(&name).unwrap().release_as(OwnerId(2)).await.unwrap();
}

/// A session expiry takes the session's watches with it on the server, and
/// nothing fires them afterwards: the client must not keep routing entries
/// for them. A holder (watching its own node) and a waiter (watching its
/// predecessor) on one client whose session expires: once the claims are
/// over, no watch of the old session is left in the client's routing table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_expiry_leaves_no_watch_routing_behind() {
    let url = zk_url();
    let (held, waited) = (unique("expiry-watch-held"), unique("expiry-watch-waited"));
    let opts = ClientOptions { session_timeout: Duration::from_secs(2), debug_faults: true, ..Default::default() };
    let expiring = client_with(&url, opts).await;
    let other = client(&url).await;
    let guard = expiring.lock(&held).unwrap().acquire().await.unwrap();
    let blocker = other.lock(&waited).unwrap().acquire().await.unwrap();
    let waiting_lock = expiring.lock(&waited).unwrap();
    let waiter = tokio::spawn(async move { waiting_lock.acquire_as(OwnerId(2), Some(Duration::from_secs(30))).await });
    assert!(
        eventually(Duration::from_secs(5), || async { expiring.debug_live_watches() >= 2 }).await,
        "the holder and the waiter watch: {} watches",
        expiring.debug_live_watches()
    );

    expiring.debug_expire_session().await.unwrap();
    let reason = tokio::time::timeout(Duration::from_secs(10), guard.lost()).await.expect("no loss after expiry");
    assert!(matches!(reason, LossReason::SessionExpired | LossReason::Disconnected), "{reason:?}");
    assert!(matches!(guard.release().await, Err(Error::Lost { .. })));
    // The waiter contends again on the new session; let it through, then end it.
    blocker.release().await.unwrap();
    let regranted = tokio::time::timeout(Duration::from_secs(10), waiter).await.expect("waiter hung").unwrap().unwrap();
    regranted.release().await.unwrap();

    assert!(
        eventually(Duration::from_secs(5), || async { expiring.debug_watch_routes() == 0 }).await,
        "{} watch routing entries ({} of them live watches) left after the session expired and every claim ended",
        expiring.debug_watch_routes(),
        expiring.debug_live_watches()
    );
}
