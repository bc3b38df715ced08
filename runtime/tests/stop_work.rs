//! `Guard::while_held` and `Permits::while_held`: work run while a hold
//! lasts is dropped when the hold is lost, before a second client waiting
//! for it is granted; it runs to its end when the hold is not lost; and it
//! never starts under a hold already lost. Every primitive (a mutex, each
//! half of a read-write lock, a semaphore's permits) on both backends, on
//! real servers. The holder is cut off by a proxy (a partition), so its
//! lease (Redis) or session (ZooKeeper) runs out on the server.

use crate::support;

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use polylock::{Client, ClientOptions, Error, Guard, LossReason, OwnerId, Permits};
use support::*;

/// What happened, in the order it happened, across tasks.
#[derive(Clone, Default)]
struct Log(Arc<Mutex<Vec<&'static str>>>);

impl Log {
    fn push(&self, event: &'static str) {
        self.0.lock().unwrap().push(event);
    }

    fn events(&self) -> Vec<&'static str> {
        self.0.lock().unwrap().clone()
    }
}

/// Logs its event when dropped: moved into a work future, it tells when
/// that future was dropped, polled or not.
struct OnDrop(Log, &'static str);

impl Drop for OnDrop {
    fn drop(&mut self) {
        self.0.push(self.1);
    }
}

/// Work that never ends by itself (a step every 10 ms), logging its drop.
fn endless_work(log: &Log) -> impl Future<Output = ()> {
    let dropped = OnDrop(log.clone(), "work dropped");
    async move {
        let _dropped = dropped;
        loop {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Kind {
    Mutex,
    Read,
    Write,
    Semaphore,
}

const KINDS: [Kind; 4] = [Kind::Mutex, Kind::Read, Kind::Write, Kind::Semaphore];

/// One hold of any primitive: a lock guard (a mutex or a read-write half) or permits.
enum Held {
    Guard(Guard),
    Permits(Permits),
}

impl Held {
    async fn while_held<F: Future>(&self, work: F) -> polylock::Result<F::Output> {
        match self {
            Held::Guard(g) => g.while_held(work).await,
            Held::Permits(p) => p.while_held(work).await,
        }
    }

    fn fencing_token(&self) -> u64 {
        match self {
            Held::Guard(g) => g.fencing_token(),
            Held::Permits(p) => p.fencing_token(),
        }
    }

    async fn release(self) -> polylock::Result<()> {
        match self {
            Held::Guard(g) => g.release().await,
            Held::Permits(p) => p.release().await,
        }
    }
}

/// Takes `kind` of `name` (a semaphore of one permit), waiting as long as it takes.
async fn hold(client: &Client, kind: Kind, name: &str) -> Held {
    let owner = OwnerId::fresh();
    let held = match kind {
        Kind::Mutex => client.lock(name).unwrap().acquire_as(owner, None).await.map(Held::Guard),
        Kind::Read => client.rw_lock(name).unwrap().read().acquire_as(owner, None).await.map(Held::Guard),
        Kind::Write => client.rw_lock(name).unwrap().write().acquire_as(owner, None).await.map(Held::Guard),
        Kind::Semaphore => client.semaphore(name, 1).unwrap().acquire(1).await.map(Held::Permits),
    };
    held.unwrap_or_else(|e| panic!("{kind:?} {name}: {e}"))
}

/// What a second client waits for while `kind` is held: what `kind`
/// excludes (a writer, when a reader holds).
fn excluded_by(kind: Kind) -> Kind {
    match kind {
        Kind::Read => Kind::Write,
        other => other,
    }
}

fn partitioned_options() -> ClientOptions {
    ClientOptions {
        lease: Duration::from_secs(1),
        session_timeout: Duration::from_secs(2),
        request_timeout: Duration::from_millis(500),
        ..Default::default()
    }
}

/// A holder cut off from the server while its work runs: the work is
/// dropped, and `while_held` says `Lost`, before the second client is granted.
async fn loss_drops_the_work_before_the_next_grant(kind: Kind, scheme: &str, url: &str) {
    let name = unique(&format!("stop-work-{kind:?}-{scheme}"));
    let proxy = Proxy::start(&host_port(url)).await;
    let cut_off = client_with(&proxy.url(scheme), partitioned_options()).await;
    let other = client_with(url, partitioned_options()).await;
    let held = hold(&cut_off, kind, &name).await;
    let log = Log::default();
    let waiter = {
        let (other, log, name) = (other.clone(), log.clone(), name.clone());
        tokio::spawn(async move {
            let next = hold(&other, excluded_by(kind), &name).await;
            log.push("next holder granted");
            next
        })
    };
    let (stopped, ()) =
        tokio::join!(tokio::time::timeout(Duration::from_secs(10), held.while_held(endless_work(&log))), async {
            tokio::time::sleep(Duration::from_millis(100)).await;
            proxy.cut();
        },);
    let stopped = stopped.unwrap_or_else(|_| panic!("{kind:?} on {scheme}: the work outlived the cut by 10 s"));
    let reason = match stopped {
        Err(Error::Lost { name: lost, reason }) => {
            assert_eq!(lost, name, "{kind:?} on {scheme}: the loss names another lock");
            reason
        }
        other => panic!("{kind:?} on {scheme}: while_held ended with {other:?}, not Lost"),
    };
    match scheme {
        "redis" => assert_eq!(reason, LossReason::LeaseExpired, "{kind:?}"),
        _ => assert!(matches!(reason, LossReason::Disconnected | LossReason::SessionExpired), "{kind:?}: {reason:?}"),
    }
    let next = tokio::time::timeout(Duration::from_secs(15), waiter)
        .await
        .unwrap_or_else(|_| panic!("{kind:?} on {scheme}: the second client was never granted"))
        .unwrap();
    assert_eq!(
        log.events(),
        ["work dropped", "next holder granted"],
        "{kind:?} on {scheme}: the lost holder's work must stop before anyone else holds"
    );
    assert!(next.fencing_token() > held.fencing_token(), "{kind:?} on {scheme}");
    next.release().await.unwrap();
    assert!(matches!(held.release().await, Err(Error::Lost { .. })), "{kind:?} on {scheme}");
    other.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_loss_drops_the_work_before_the_next_grant() {
    for kind in KINDS {
        loss_drops_the_work_before_the_next_grant(kind, "redis", &redis_url()).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_loss_drops_the_work_before_the_next_grant() {
    for kind in KINDS {
        loss_drops_the_work_before_the_next_grant(kind, "zk", &zk_url()).await;
    }
}

/// Held throughout: the work runs to its end, `while_held` gives its
/// output, and the hold is released normally afterwards (the work's drop
/// comes after its end, with the future, not as a stop).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn work_that_ends_while_held_gives_its_output_and_the_hold_releases_normally() {
    for (backend, url) in backends() {
        let client = client(&url).await;
        for kind in KINDS {
            let held = hold(&client, kind, &unique(&format!("stop-work-held-{kind:?}-{backend}"))).await;
            let log = Log::default();
            let dropped = OnDrop(log.clone(), "work dropped");
            let work_log = log.clone();
            let output = held
                .while_held(async move {
                    let _dropped = dropped;
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    work_log.push("work finished");
                    7
                })
                .await;
            assert_eq!(output, Ok(7), "{kind:?} on {backend}");
            assert_eq!(log.events(), ["work finished", "work dropped"], "{kind:?} on {backend}");
            held.release().await.unwrap_or_else(|e| panic!("{kind:?} on {backend}: {e}"));
        }
        client.close().await;
    }
}

/// Under a hold already lost, the work is dropped without ever running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn work_under_a_hold_already_lost_never_starts() {
    let url = redis_url();
    let name = unique("stop-work-lost");
    let opts = ClientOptions { lease: Duration::from_millis(300), ..Default::default() };
    let client = client_with(&url, opts).await;
    let guard = client.lock(&name).unwrap().acquire().await.unwrap();
    // Ends the hold behind the holder's back: its next renewal is refused.
    let mut raw = raw_redis(&url).await;
    let _: () = redis::cmd("DEL").arg(&name).query_async(&mut raw).await.unwrap();
    let reason = tokio::time::timeout(Duration::from_secs(5), guard.lost()).await.expect("loss never reported");
    let log = Log::default();
    let dropped = OnDrop(log.clone(), "work dropped");
    let work_log = log.clone();
    let stopped = guard
        .while_held(async move {
            let _dropped = dropped;
            work_log.push("work started");
        })
        .await;
    assert_eq!(stopped, Err(Error::Lost { name, reason }));
    assert_eq!(log.events(), ["work dropped"], "work ran under a lost hold");
    assert!(matches!(guard.release().await, Err(Error::Lost { .. })));
    client.close().await;
}
