//! What a binding asks of a lock by owner instead of keeping guards: the
//! current grant's fencing token and hold count, and a loss signal per
//! grant that fires on loss and ends quietly on release. Real servers.

use crate::support;

use std::time::Duration;

use futures::FutureExt;
use polylock::{ClientOptions, Error, HoldInfo, LossReason, OwnerId};
use support::*;

/// Token and count follow each owner through re-entry and release, on both
/// backends, with no guard kept (`into_token` forgets it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hold_reports_token_and_count_per_owner_through_reentry_and_release() {
    for (backend, url) in backends() {
        let client = client(&url).await;
        let lock = client.lock(&unique(&format!("hold-info-{backend}"))).unwrap();
        let (me, other) = (OwnerId(1), OwnerId(2));
        assert_eq!(lock.hold(me), None, "{backend}");
        let first = lock.acquire_as(me, None).await.unwrap();
        assert!(!first.is_reentry(), "{backend}: a first acquire is a new grant");
        let token = first.into_token();
        assert_eq!(lock.hold(me), Some(HoldInfo { token, count: 1 }), "{backend}");
        let again = lock.acquire_as(me, None).await.unwrap();
        assert!(again.is_reentry(), "{backend}");
        assert_eq!(again.into_token(), token, "{backend}: a re-entry shares its grant's token");
        assert_eq!(lock.hold(me), Some(HoldInfo { token, count: 2 }), "{backend}");
        assert_eq!(lock.fencing_token_of(me).unwrap(), token, "{backend}");
        assert_eq!(lock.hold(other), None, "{backend}: another owner holds nothing");
        assert!(matches!(lock.fencing_token_of(other), Err(Error::NotHeld(_))), "{backend}");
        lock.release_as(me).await.unwrap();
        assert_eq!(lock.hold(me), Some(HoldInfo { token, count: 1 }), "{backend}");
        lock.release_as(me).await.unwrap();
        assert_eq!(lock.hold(me), None, "{backend}");
        assert!(matches!(lock.fencing_token_of(me), Err(Error::NotHeld(_))), "{backend}");
        let theirs = lock.acquire_as(other, None).await.unwrap().into_token();
        assert!(theirs > token, "{backend}: token {theirs} after {token}");
        assert_eq!(lock.hold(other), Some(HoldInfo { token: theirs, count: 1 }), "{backend}");
        lock.release_as(other).await.unwrap();
        client.close().await;
    }
}

/// The loss signal of a grant outlives its guard: it fires when the key is
/// deleted server-side, and from then on the owner is told by the lock
/// (no hold, `Lost` for its token and its release) until it released.
/// A newer grant of the same owner is not touched by the stale release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_loss_watch_fires_on_loss_and_the_lock_reports_it_until_released() {
    let name = unique("hold-loss");
    let opts = ClientOptions { lease: Duration::from_millis(300), ..Default::default() };
    let client = client_with(&redis_url(), opts).await;
    let lock = client.lock(&name).unwrap();
    let me = OwnerId(7);
    let guard = lock.acquire_as(me, None).await.unwrap();
    let watch = guard.loss_watch();
    let lost_token = guard.into_token();
    let mut raw = raw_redis(&redis_url()).await;
    let _: () = redis::cmd("DEL").arg(&name).query_async(&mut raw).await.unwrap();
    let reason =
        tokio::time::timeout(Duration::from_secs(5), watch.clone().ended()).await.expect("loss never reported");
    assert_eq!(reason, Some(LossReason::RenewalRefused));
    assert_eq!(watch.reason(), Some(LossReason::RenewalRefused));
    assert_eq!(lock.hold(me), None, "a lost grant is not held");
    assert!(matches!(lock.fencing_token_of(me), Err(Error::Lost { reason: LossReason::RenewalRefused, .. })));
    // The owner acquires again before releasing the lost grant.
    let newer = lock.acquire_as(me, None).await.unwrap();
    assert!(!newer.is_reentry(), "a grant after a loss is a new one");
    let newer_token = newer.into_token();
    assert!(newer_token > lost_token);
    assert_eq!(lock.fencing_token_of(me).unwrap(), newer_token);
    let stale = lock.release_grant(me, lost_token).await;
    assert!(matches!(stale, Err(Error::Lost { reason: LossReason::RenewalRefused, .. })), "{stale:?}");
    assert_eq!(
        lock.hold(me),
        Some(HoldInfo { token: newer_token, count: 1 }),
        "the stale release ended the newer grant"
    );
    lock.release_as(me).await.unwrap();
    assert!(matches!(lock.fencing_token_of(me), Err(Error::NotHeld(_))));
    client.close().await;
}

/// Released, not lost: the signal ends quietly, and only with the last
/// hold of its grant (a re-entry's release leaves it waiting).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_loss_watch_ends_quietly_with_the_last_release() {
    for (backend, url) in backends() {
        let client = client(&url).await;
        let lock = client.lock(&unique(&format!("hold-quiet-{backend}"))).unwrap();
        let me = OwnerId(3);
        let guard = lock.acquire_as(me, None).await.unwrap();
        let mut ended = Box::pin(guard.loss_watch().ended());
        guard.into_token();
        lock.acquire_as(me, None).await.unwrap().into_token();
        lock.release_as(me).await.unwrap();
        assert!((&mut ended).now_or_never().is_none(), "{backend}: ended while a re-entry still held the grant");
        lock.release_as(me).await.unwrap();
        let end = tokio::time::timeout(Duration::from_secs(5), ended).await.expect("the signal outlived the hold");
        assert_eq!(end, None, "{backend}: a released grant reported a loss");
        client.close().await;
    }
}

/// `LossWatch::on_loss`: the callback runs once on a loss, also when it is
/// registered after the loss (the grant's state gone by then), and is
/// dropped uncalled on a release, on both backends. It costs no task per
/// held grant: 200 held grants with a callback each leave the runtime's
/// task count where it was (a task per grant, awaiting `ended()`, would add 200).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_loss_runs_once_on_a_loss_is_dropped_on_release_and_costs_no_task() {
    let name = unique("hold-on-loss");
    let opts = ClientOptions { lease: Duration::from_millis(300), ..Default::default() };
    let leased = client_with(&redis_url(), opts).await;
    let lock = leased.lock(&name).unwrap();
    let guard = lock.acquire_as(OwnerId(1), None).await.unwrap();
    let watch = guard.loss_watch();
    guard.into_token();
    let (tx, mut calls) = tokio::sync::mpsc::unbounded_channel();
    let before = tx.clone();
    watch.on_loss(move |reason| before.send(("before", reason)).unwrap());
    let mut raw = raw_redis(&redis_url()).await;
    let _: () = redis::cmd("DEL").arg(&name).query_async(&mut raw).await.unwrap();
    let first = tokio::time::timeout(Duration::from_secs(5), calls.recv()).await.expect("loss never reported");
    assert_eq!(first, Some(("before", LossReason::RenewalRefused)));
    let after = tx.clone();
    watch.on_loss(move |reason| after.send(("after", reason)).unwrap());
    let second = tokio::time::timeout(Duration::from_secs(5), calls.recv()).await.expect("late callback never ran");
    assert_eq!(second, Some(("after", LossReason::RenewalRefused)));
    drop(tx);
    // Each sender went with its callback once it ran: nothing else was reported.
    assert_eq!(calls.recv().await, None, "a loss reported more than once per callback");
    let _ = lock.release_as(OwnerId(1)).await;
    leased.close().await;

    for (backend, url) in backends() {
        let client = client(&url).await;
        let lock = client.lock(&unique(&format!("hold-on-loss-release-{backend}"))).unwrap();
        let guard = lock.acquire_as(OwnerId(2), None).await.unwrap();
        let (tx, mut calls) = tokio::sync::mpsc::unbounded_channel::<LossReason>();
        guard.loss_watch().on_loss(move |reason| tx.send(reason).unwrap());
        guard.into_token();
        lock.release_as(OwnerId(2)).await.unwrap();
        let end =
            tokio::time::timeout(Duration::from_secs(5), calls.recv()).await.expect("callback kept after release");
        assert_eq!(end, None, "{backend}: a released grant's callback ran");

        let metrics = tokio::runtime::Handle::current().metrics();
        let tasks_before = metrics.num_alive_tasks();
        let mut owners = Vec::new();
        for i in 0..200u64 {
            let lock = client.lock(&unique(&format!("hold-on-loss-many-{backend}-{i}"))).unwrap();
            let guard = lock.acquire_as(OwnerId(10 + i), None).await.unwrap();
            guard.loss_watch().on_loss(|_| {});
            guard.into_token();
            owners.push((lock, OwnerId(10 + i)));
        }
        let grown = metrics.num_alive_tasks().saturating_sub(tasks_before);
        assert!(grown < 20, "{backend}: 200 held grants with a loss callback added {grown} tasks");
        for (lock, owner) in owners {
            lock.release_as(owner).await.unwrap();
        }
        client.close().await;
    }
}
