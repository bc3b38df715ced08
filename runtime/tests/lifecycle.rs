//! The lifecycle promises of the public API against real servers: what a
//! holder is told when its client closes, what a lost guard's release
//! leaves behind, and two acquires of one owner at once.

use crate::support;

use std::time::{Duration, Instant};

use polylock::{ClientOptions, Error, LossReason, OwnerId};
use support::*;

/// After a loss, releasing through the `Guard` takes the loss report, so
/// the lock's state is dropped and `close` has nothing to wait for: it
/// returns as soon as the server has answered, not after its 5 s bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_guards_release_clears_the_loss_and_close_is_prompt() {
    let name = unique("lost-guard-release");
    let opts = ClientOptions { lease: Duration::from_millis(300), ..Default::default() };
    let client = client_with(&redis_url(), opts).await;
    let guard = client.lock(&name).unwrap().acquire().await.unwrap();
    // Someone deletes the lock: the next renewal (a third of the lease) is refused.
    let mut raw = raw_redis(&redis_url()).await;
    let _: () = redis::cmd("DEL").arg(&name).query_async(&mut raw).await.unwrap();
    let reason = tokio::time::timeout(Duration::from_secs(5), guard.lost()).await.expect("loss never reported");
    assert_eq!(reason, LossReason::RenewalRefused);
    assert!(matches!(guard.release().await, Err(Error::Lost { .. })));
    let started = Instant::now();
    client.close().await;
    let took = started.elapsed();
    assert!(took < Duration::from_millis(500), "close took {took:?}: the lost lock's state was never dropped");
}

/// `Client::close` gives held locks back. Each holder is told
/// `Lost(Closed)` before its release is sent, so by the time another client
/// is granted the lock, the old holder already knows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_tells_every_holder_before_anyone_else_is_granted() {
    for (backend, url) in backends() {
        let name = unique(&format!("close-tells-{backend}"));
        let holder = client(&url).await;
        let other = client(&url).await;
        let guard = holder.lock(&name).unwrap().acquire().await.unwrap();
        let waiter_lock = other.lock(&name).unwrap();
        let waiter = tokio::spawn(async move { waiter_lock.acquire_as(OwnerId(2), None).await });
        tokio::time::sleep(Duration::from_millis(200)).await;
        let closing = tokio::spawn({
            let holder = holder.clone();
            async move { holder.close().await }
        });
        let granted = tokio::time::timeout(Duration::from_secs(10), waiter).await.expect("waiter hung").unwrap();
        assert_eq!(
            guard.lost_reason(),
            Some(LossReason::Closed),
            "{backend}: the holder was not told before the next grant"
        );
        assert!(granted.is_ok(), "{backend}: {granted:?}");
        closing.await.unwrap();
        assert!(matches!(guard.release().await, Err(Error::Lost { reason: LossReason::Closed, .. })));
        other.lock(&name).unwrap().release_as(OwnerId(2)).await.unwrap();
    }
}

/// Two acquires by one owner before the first grant, joined in one task:
/// the second is a re-entry once the first is granted, never a wait on itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_acquires_of_one_owner_at_once_are_a_reentry() {
    for (backend, url) in backends() {
        let name = unique(&format!("joined-acquires-{backend}"));
        let c = client(&url).await;
        let lock = c.lock(&name).unwrap();
        let owner = OwnerId(41);
        let both = tokio::time::timeout(Duration::from_secs(5), async {
            tokio::join!(lock.acquire_as(owner, None), lock.acquire_as(owner, None))
        })
        .await
        .unwrap_or_else(|_| panic!("{backend}: the second acquire waits on its own owner"));
        let (a, b) = (both.0.unwrap(), both.1.unwrap());
        assert_eq!(a.fencing_token(), b.fencing_token(), "{backend}: one grant, two holds");
        assert_eq!(lock.hold_count(owner), 2);
        a.release().await.unwrap();
        assert_eq!(lock.hold_count(owner), 1);
        b.release().await.unwrap();
        assert_eq!(lock.hold_count(owner), 0);
        c.close().await;
    }
}

/// A blocking acquire of a lock that its caller interrupts (Java's
/// `lockInterruptibly()`, Python's Ctrl-C: `Sliced::cancel`) returns only
/// once the server holds nothing of it: looked at at once, over a
/// connection opened beforehand, only the holder is left (Redis: no queue
/// key; ZooKeeper: one child, the holder's).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupted_blocking_acquire_returns_once_it_left_the_server() {
    for (backend, url) in backends() {
        let name = unique(&format!("interrupted-{backend}"));
        let (a, b) = (client(&url).await, client(&url).await);
        let held = a.lock(&name).unwrap().acquire().await.unwrap();
        let lock = b.lock(&name).unwrap();
        let (mut redis, zk) =
            if backend == "zookeeper" { (None, Some(raw_zk(&url).await)) } else { (Some(raw_redis(&url).await), None) };
        let queue = [format!("polylock_queue:{{{name}}}"), format!("polylock_queue_deadline:{{{name}}}")];
        let path = if name.starts_with('/') { name.clone() } else { format!("/{name}") };
        for round in 0..10 {
            // Waiters on the server beside the holder.
            let mut waiters = async || match (&mut redis, &zk) {
                (Some(c), _) => {
                    let n: Vec<i64> = redis::pipe().exists(&queue[0]).exists(&queue[1]).query_async(c).await.unwrap();
                    n.iter().sum::<i64>() as usize
                }
                (_, Some(zk)) => zk.list_children(&path).await.unwrap_or_default().len().saturating_sub(1),
                _ => unreachable!(),
            };
            let (l, handle) = (lock.clone(), tokio::runtime::Handle::current());
            let waiting = tokio::task::spawn_blocking(move || {
                polylock::blocking::Sliced::spawn(&handle, async move { l.acquire_as(OwnerId(7), None).await })
            })
            .await
            .unwrap();
            let deadline = Instant::now() + Duration::from_secs(5);
            while waiters().await == 0 {
                assert!(Instant::now() < deadline, "{backend}: the waiter never queued");
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            let outcome = tokio::task::spawn_blocking(move || waiting.cancel()).await.unwrap();
            let left = waiters().await;
            assert!(matches!(outcome, Some(Err(Error::Cancelled))), "{backend} round {round}: {outcome:?}");
            assert_eq!(left, 0, "{backend} round {round}: the withdrawn waiter is still on the server");
        }
        assert_eq!(lock.hold_count(OwnerId(7)), 0);
        held.release().await.unwrap();
    }
}

/// A closed client lets go of its connections (and the tasks that serve
/// them) once its cleanup is done, even while the application still holds
/// handles made from it (a lock, an election, a guard of a lost grant):
/// counted at a proxy between the client and the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_client_closes_its_connections_while_handles_live() {
    for (backend, url) in backends() {
        let proxy = Proxy::start(&host_port(&url)).await;
        let scheme = if backend == "zookeeper" { "zk" } else { "redis" };
        let c = client(&proxy.url(scheme)).await;
        let name = unique("closed-connections");
        let lock = c.lock(&name).unwrap();
        let election = c.election(&format!("{name}-election")).unwrap();
        let held = lock.acquire().await.unwrap();
        assert!(proxy.open_connections() > 0, "{backend}: no connection through the proxy");
        c.close().await;
        let gone = eventually(Duration::from_secs(5), || async { proxy.open_connections() == 0 }).await;
        assert!(gone, "{backend}: {} connections still open after close", proxy.open_connections());
        // The handles still answer, with Closed.
        assert!(matches!(lock.acquire().await, Err(Error::Closed)), "{backend}");
        assert!(matches!(election.campaign().await, Err(Error::Closed)), "{backend}");
        assert!(matches!(election.leader().await, Err(Error::Closed)), "{backend}");
        assert!(matches!(c.status(&name).await, Err(Error::Closed)), "{backend}");
        assert!(matches!(held.release().await, Err(Error::Lost { reason: LossReason::Closed, .. })), "{backend}");
        assert_eq!(proxy.open_connections(), 0, "{backend}: a closed client's handle opened a connection");
    }
}
