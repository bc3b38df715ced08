//! Counting semaphores against the real servers (Redis in Redisson's
//! layout, ZooKeeper in Curator's `InterProcessSemaphoreV2`): permits are
//! counted, `k` at a time; a release wakes as many waiters as permits
//! freed; a holder that died frees its permits when its lease (ZooKeeper:
//! its session) runs out; clients that
//! disagree on the number of permits are refused; every grant is fenced;
//! nothing is left behind.

use crate::support;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use polylock::{ClientOptions, Error, LockOptions, LossReason};
use support::*;

/// The backends with semaphores.
fn semaphore_backends() -> Vec<(&'static str, String)> {
    backends()
}

/// The available permits (`-1`: none recorded on the server yet) and the
/// permits held, as a peer reads them. Redis: Redisson's counter and its
/// permit ids. ZooKeeper: our record `<name>/polylock_permits` less the
/// children of `<name>/leases`, and those children (Curator's leases).
async fn counts(backend: &str, url: &str, name: &str) -> (i64, i64) {
    if backend == "zookeeper" {
        let zk = raw_zk(url).await;
        let leases = zk.list_children(&format!("{name}/leases")).await.map_or(0, |k| k.len() as i64);
        let total = match zk.get_data(&format!("{name}/polylock_permits")).await {
            Ok((data, _)) => String::from_utf8(data).unwrap().parse::<i64>().unwrap(),
            Err(_) => return (-1, leases),
        };
        return (total - leases, leases);
    }
    let mut c = raw_redis(url).await;
    let available: Option<i64> = redis::cmd("GET").arg(name).query_async(&mut c).await.unwrap();
    let held: i64 = redis::cmd("ZCARD").arg(format!("{{{name}}}:timeout")).query_async(&mut c).await.unwrap();
    (available.unwrap_or(-1), held)
}

/// What waiters left behind. Redis: polylock's waiter queue keys of the
/// semaphore. ZooKeeper: nodes of the internal mutex `<name>/locks` (only
/// its holder waits; the others queue there).
async fn queue_left(backend: &str, url: &str, name: &str) -> Vec<String> {
    if backend == "zookeeper" {
        return raw_zk(url).await.list_children(&format!("{name}/locks")).await.unwrap_or_default();
    }
    let mut c = raw_redis(url).await;
    let mut left = Vec::new();
    for key in [format!("polylock_semqueue:{{{name}}}"), format!("polylock_semqueue_deadline:{{{name}}}")] {
        let n: i64 = redis::cmd("EXISTS").arg(&key).query_async(&mut c).await.unwrap();
        if n > 0 {
            left.push(key);
        }
    }
    left
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permits_are_counted_k_at_a_time() {
    for (backend, url) in semaphore_backends() {
        let name = unique("sem-count");
        let (a, b) = (client(&url).await, client(&url).await);
        let (sa, sb) = (a.semaphore(&name, 3).unwrap(), b.semaphore(&name, 3).unwrap());
        assert_eq!(sa.available_permits().await.unwrap(), 3, "{backend}: a fresh semaphore");
        let two = sa.try_acquire(2, Duration::ZERO).await.unwrap().expect("2 of 3 free");
        assert_eq!(two.count(), 2);
        assert_eq!(sb.available_permits().await.unwrap(), 1, "{backend}: another client's view");
        let one = sb.try_acquire(1, Duration::ZERO).await.unwrap().expect("the third");
        assert!(one.fencing_token() > two.fencing_token(), "{backend}: tokens must grow");
        assert!(sa.try_acquire(1, Duration::ZERO).await.unwrap().is_none(), "{backend}: a fourth permit of three");
        assert_eq!(counts(backend, &url, &name).await, (0, 3), "{backend}");
        one.release().await.unwrap();
        // One free: an ask for two still waits, an ask for one does not.
        assert!(sb.try_acquire(2, Duration::ZERO).await.unwrap().is_none(), "{backend}: 2 granted with 1 free");
        let again = sb.try_acquire(1, Duration::ZERO).await.unwrap().expect("the freed permit");
        assert!(again.fencing_token() > two.fencing_token());
        two.release().await.unwrap();
        again.release().await.unwrap();
        assert_eq!(counts(backend, &url, &name).await, (3, 0), "{backend}: every permit back");
        assert!(queue_left(backend, &url, &name).await.is_empty(), "{backend}: queue left behind");
    }
}

/// Issue 46, item 6: a try without waiting fails only when too few permits
/// are free (CPython's `BoundedSemaphore.acquire(blocking=False)`). 4
/// permits, 1 held, ten clients try at once: the 3 free are all granted, on
/// ZooKeeper too, where each acquirer holds Curator's internal mutex for a
/// few round trips.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_tries_at_once_get_every_free_permit() {
    for (backend, url) in semaphore_backends() {
        let name = unique("sem-tries");
        let holder = client(&url).await;
        let held = holder
            .semaphore(&name, 4)
            .unwrap()
            .try_acquire(1, Duration::ZERO)
            .await
            .unwrap()
            .expect("a fresh semaphore");
        let mut clients = Vec::new();
        for _ in 0..10 {
            clients.push(client(&url).await);
        }
        let barrier = Arc::new(tokio::sync::Barrier::new(clients.len()));
        let tries: Vec<_> = clients
            .iter()
            .map(|c| {
                let (sem, barrier) = (c.semaphore(&name, 4).unwrap(), barrier.clone());
                tokio::spawn(async move {
                    barrier.wait().await;
                    sem.try_acquire(1, Duration::ZERO).await
                })
            })
            .collect();
        let mut granted = Vec::new();
        for t in tries {
            if let Some(p) = t.await.unwrap().unwrap() {
                granted.push(p);
            }
        }
        assert_eq!(granted.len(), 3, "{backend}: 3 of 4 permits were free");
        assert_eq!(counts(backend, &url, &name).await, (0, 4), "{backend}");
        for p in granted {
            p.release().await.unwrap();
        }
        held.release().await.unwrap();
        assert_eq!(counts(backend, &url, &name).await, (4, 0), "{backend}: every permit back");
        assert!(queue_left(backend, &url, &name).await.is_empty(), "{backend}: queue left behind");
    }
}

/// A blocking acquire that its caller interrupts (Java's interrupt and
/// Python's Ctrl-C end in `Sliced::cancel`) returns only once the server
/// holds nothing of it: right after, its queue entry (ZooKeeper: its mutex
/// node and its lease) is gone, as after Curator's and Redisson's
/// interrupted acquires. Looked at over connections opened beforehand, at
/// once: a withdrawal left to the background loses that race.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupted_blocking_acquire_returns_once_it_left_the_server() {
    for (backend, url) in semaphore_backends() {
        let name = unique("sem-interrupted");
        let (a, b) = (client(&url).await, client(&url).await);
        let held = a.semaphore(&name, 1).unwrap().acquire_for(1, None).await.unwrap();
        let sem = b.semaphore(&name, 1).unwrap();
        let mut looks = Looks::open(backend, &url, &name).await;
        for round in 0..10 {
            let (s, handle) = (sem.clone(), tokio::runtime::Handle::current());
            let waiting = tokio::task::spawn_blocking(move || {
                polylock::blocking::Sliced::spawn(&handle, async move { s.acquire_held(1, None).await })
            })
            .await
            .unwrap();
            let deadline = std::time::Instant::now() + Duration::from_secs(5);
            while looks.waiter_left().await.is_empty() {
                assert!(std::time::Instant::now() < deadline, "{backend}: the waiter never queued");
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            let outcome = tokio::task::spawn_blocking(move || waiting.cancel()).await.unwrap();
            let left = looks.waiter_left().await;
            assert!(matches!(outcome, Some(Err(Error::Cancelled))), "{backend} round {round}: {outcome:?}");
            assert_eq!(left, Vec::<String>::new(), "{backend} round {round}: left on the server");
        }
        assert_eq!(sem.held_permits(), 0, "{backend}: the withdrawn acquires hold nothing");
        held.release().await.unwrap();
        assert_eq!(counts(backend, &url, &name).await.1, 0, "{backend}");
    }
}

/// One connection to look at what a waiter leaves on the server, opened
/// before the waiter: Redis, the semaphore's queue keys; ZooKeeper, the
/// mutex nodes and any lease beyond the holder's one.
enum Looks {
    Redis(redis::aio::MultiplexedConnection, String),
    Zk(zookeeper_client::Client, String),
}

impl Looks {
    async fn open(backend: &str, url: &str, name: &str) -> Self {
        if backend == "zookeeper" {
            Looks::Zk(raw_zk(url).await, name.to_owned())
        } else {
            Looks::Redis(raw_redis(url).await, name.to_owned())
        }
    }

    async fn waiter_left(&mut self) -> Vec<String> {
        match self {
            Looks::Zk(zk, name) => {
                let mut left = zk.list_children(&format!("{name}/locks")).await.unwrap_or_default();
                let leases = zk.list_children(&format!("{name}/leases")).await.unwrap_or_default();
                if leases.len() > 1 {
                    left.extend(leases);
                }
                left
            }
            Looks::Redis(c, name) => {
                let keys = [format!("polylock_semqueue:{{{name}}}"), format!("polylock_semqueue_deadline:{{{name}}}")];
                let n: Vec<i64> = redis::pipe().exists(&keys[0]).exists(&keys[1]).query_async(c).await.unwrap();
                keys.into_iter().zip(n).filter(|(_, n)| *n > 0).map(|(k, _)| k).collect()
            }
        }
    }
}

/// A release of `k` permits grants at most `k` waiters, in arrival order,
/// without them polling: the freed permits are handed over in the script.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_wakes_as_many_waiters_as_permits_freed() {
    for (backend, url) in semaphore_backends() {
        let name = unique("sem-wake");
        let holder = client(&url).await;
        let all = holder.semaphore(&name, 3).unwrap().acquire(3).await.unwrap();
        let granted = Arc::new(AtomicU32::new(0));
        let mut waiters = Vec::new();
        let mut clients = Vec::new();
        for _ in 0..5 {
            let c = client(&url).await;
            let sem = c.semaphore(&name, 3).unwrap();
            clients.push(c);
            let granted = granted.clone();
            waiters.push(tokio::spawn(async move {
                let p = sem.acquire(1).await.unwrap();
                granted.fetch_add(1, Ordering::SeqCst);
                p
            }));
        }
        // All five queued: each has asked once and waits.
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(granted.load(Ordering::SeqCst), 0, "{backend}: granted while all permits were held");
        all.release().await.unwrap();
        let three = eventually(Duration::from_secs(3), || async { granted.load(Ordering::SeqCst) == 3 }).await;
        assert!(three, "{backend}: {} of 3 freed permits granted", granted.load(Ordering::SeqCst));
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(granted.load(Ordering::SeqCst), 3, "{backend}: more waiters woken than permits freed");
        let mut done = Vec::new();
        for w in waiters.iter_mut().filter(|w| w.is_finished()) {
            done.push(w.await.unwrap());
        }
        for p in done {
            p.release().await.unwrap();
        }
        for w in waiters.into_iter().filter(|w| !w.is_finished()) {
            let p = tokio::time::timeout(Duration::from_secs(3), w).await.expect("granted after the release").unwrap();
            p.release().await.unwrap();
        }
        assert_eq!(counts(backend, &url, &name).await, (3, 0), "{backend}");
        assert!(queue_left(backend, &url, &name).await.is_empty(), "{backend}: queue left behind");
    }
}

/// Clients made with another number of permits are refused with a typed
/// error and take nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_with_another_number_of_permits_is_refused() {
    for (backend, url) in semaphore_backends() {
        let name = unique("sem-mismatch");
        let (a, b) = (client(&url).await, client(&url).await);
        let held = a.semaphore(&name, 3).unwrap().acquire(1).await.unwrap();
        match b.semaphore(&name, 4).unwrap().try_acquire(1, Duration::from_secs(1)).await {
            Err(e @ Error::PermitsMismatch { .. }) => {
                assert_eq!(e.permits(), Some((3, 4)), "{backend}");
                assert_eq!(e.kind().as_str(), "permits_mismatch");
            }
            other => panic!("{backend}: another number of permits was not refused: {other:?}"),
        }
        assert_eq!(counts(backend, &url, &name).await, (2, 1), "{backend}: the refused client changed something");
        let more = b.semaphore(&name, 3).unwrap().try_acquire(2, Duration::ZERO).await.unwrap();
        assert!(more.is_some(), "{backend}: the agreeing client is served");
        more.unwrap().release().await.unwrap();
        held.release().await.unwrap();
    }
}

/// Bad asks fail at once, typed, with nothing sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_asks_are_refused_at_once() {
    for (backend, url) in semaphore_backends() {
        let c = client(&url).await;
        let name = unique("sem-bad");
        assert!(matches!(c.semaphore(&name, 0), Err(Error::InvalidOption(_))), "{backend}: zero permits");
        let sem = c.semaphore(&name, 2).unwrap();
        for k in [0, 3] {
            match sem.try_acquire(k, Duration::ZERO).await {
                Err(Error::InvalidOption(m)) => assert!(m.contains("permits"), "{m}"),
                other => panic!("{backend}: asking {k} of 2: {other:?}"),
            }
        }
        assert!(matches!(sem.release(1).await, Err(Error::InvalidOption(_))), "{backend}: released nothing held");
        assert_eq!(counts(backend, &url, &name).await, (-1, 0), "{backend}: a refused ask touched the server");
    }
}

/// A holder that dies without releasing (its permit ids stay in the set,
/// as a killed Redisson or polylock process leaves them) frees its permits
/// once their expiry passes: the next acquire takes them back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_holders_permits_come_back_when_its_lease_ends() {
    for (backend, url) in semaphore_backends() {
        let name = unique("sem-dead");
        let c = client(&url).await;
        let sem = c.semaphore(&name, 2).unwrap();
        sem.acquire(1).await.unwrap().release().await.unwrap();
        // A dead holder of both permits, its lease ending 400 ms from now.
        if backend == "zookeeper" {
            // Curator's leases of another session, which ends in 400 ms (a
            // killed process's session ends at its timeout).
            let raw = raw_zk(&url).await;
            let opts =
                zookeeper_client::CreateMode::EphemeralSequential.with_acls(zookeeper_client::Acls::anyone_all());
            for uuid in ["0000dead-0000-4000-8000-000000000001", "0000dead-0000-4000-8000-000000000002"] {
                raw.create(&format!("{name}/leases/_c_{uuid}-lease-"), b"", &opts).await.unwrap();
            }
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(400)).await;
                drop(raw); // closes the session: its ephemeral leases go
            });
        } else {
            dead_redisson_holder(&url, &name, 2, 400).await;
        }
        assert!(sem.try_acquire(1, Duration::ZERO).await.unwrap().is_none(), "{backend}: the dead holder's permits");
        let started = std::time::Instant::now();
        let back = sem.try_acquire(2, Duration::from_secs(5)).await.unwrap().expect("granted once the lease ends");
        assert!(started.elapsed() < Duration::from_secs(2), "{backend}: waited {:?}", started.elapsed());
        assert_eq!(counts(backend, &url, &name).await, (0, 2), "{backend}");
        back.release().await.unwrap();
        assert_eq!(counts(backend, &url, &name).await, (2, 0), "{backend}");
    }
}

/// Two permit ids of a dead Redisson holder of `name`, their lease ending
/// `ms` from now (by the server's clock, as Redisson scores them).
async fn dead_redisson_holder(url: &str, name: &str, permits: i64, ms: i64) {
    let mut raw = raw_redis(url).await;
    let (secs, micros): (i64, i64) = redis::cmd("TIME").query_async(&mut raw).await.unwrap();
    let expiry = secs * 1000 + micros / 1000 + ms;
    let dead_ids = [b"\x01dead-permit-one".to_vec(), b"\x02dead-permit-two".to_vec()];
    for id in dead_ids.iter().take(permits as usize) {
        let _: i64 = redis::cmd("ZADD")
            .arg(format!("{{{name}}}:timeout"))
            .arg(expiry)
            .arg(id)
            .query_async(&mut raw)
            .await
            .unwrap();
    }
    let _: i64 = redis::cmd("DECRBY").arg(name).arg(permits).query_async(&mut raw).await.unwrap();
}

/// A lease shorter than the time held is renewed: the permits stay ours.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permits_are_renewed_while_held() {
    for (backend, url) in semaphore_backends() {
        let name = unique("sem-renew");
        let c = client(&url).await;
        let opts = LockOptions { lease: Some(Duration::from_millis(600)), ..Default::default() };
        let sem = c.semaphore_with(&name, 1, opts).unwrap();
        let p = sem.acquire(1).await.unwrap();
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert_eq!(p.lost_reason(), None, "{backend}");
        let other = client(&url).await.semaphore(&name, 1).unwrap();
        assert!(other.try_acquire(1, Duration::ZERO).await.unwrap().is_none(), "{backend}: renewed permit taken");
        p.release().await.unwrap();
    }
}

/// The `threading.Semaphore` / `java.util.concurrent.Semaphore` shape:
/// acquire keeps the grant in the handle, release(n) gives back whole
/// grants (the newest that fit), and a count that only a split grant could
/// make up releases nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_grants_are_released_by_count() {
    for (backend, url) in semaphore_backends() {
        let name = unique("sem-held");
        let c = client(&url).await;
        let sem = c.semaphore(&name, 4).unwrap();
        let t1 = sem.acquire_held(1, None).await.unwrap().unwrap();
        let t2 = sem.acquire_held(2, None).await.unwrap().unwrap();
        assert!(t2 > t1);
        assert_eq!(sem.held_permits(), 3);
        assert_eq!(sem.newest_token(), Some(t2));
        let watch = sem.newest_loss_watch().expect("a held grant's loss signal");
        assert_eq!(watch.reason(), None);
        // One caller's release of its one permit is not stopped by a newer grant of two.
        sem.release(1).await.unwrap();
        assert_eq!(sem.newest_token(), Some(t2), "{backend}: the grant of 2 was released for a release of 1");
        assert!(matches!(sem.release(1).await, Err(Error::InvalidOption(_))), "{backend}: split a grant of 2");
        assert!(matches!(sem.release(3).await, Err(Error::InvalidOption(_))), "{backend}: more than held");
        assert_eq!(sem.held_permits(), 2, "{backend}: a refused release released something");
        sem.release(2).await.unwrap();
        assert_eq!(watch.ended().await, None, "{backend}: a released grant's signal ends without a loss");
        assert_eq!(sem.newest_token(), None);
        assert!(sem.acquire_held(4, Some(Duration::ZERO)).await.unwrap().is_some(), "{backend}: 4 of 4 free");
        sem.release(4).await.unwrap();
        assert_eq!(counts(backend, &url, &name).await, (4, 0), "{backend}");
    }
}

/// ZooKeeper: the nodes are Curator's `InterProcessSemaphoreV2` (leases
/// `_c_<uuid>-lease-<seq>` under `leases`, the mutex under `locks`, free
/// once granted) plus our record of N; a holder whose session expires is
/// told, its leases go with the session, and the waiter is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_permits_are_curators_leases_and_go_with_the_session() {
    let url = zk_url();
    let name = unique("sem-zk-session");
    let opts = ClientOptions { session_timeout: Duration::from_secs(2), debug_faults: true, ..Default::default() };
    let a = client_with(&url, opts).await;
    let b = client(&url).await;
    let held = a.semaphore(&name, 2).unwrap().acquire(2).await.unwrap();
    let raw = raw_zk(&url).await;
    let (record, _) = raw.get_data(&format!("{name}/polylock_permits")).await.unwrap();
    assert_eq!(record, b"2");
    let leases = raw.list_children(&format!("{name}/leases")).await.unwrap();
    assert_eq!(leases.len(), 2, "{leases:?}");
    for lease in &leases {
        let (uuid, seq) = lease.strip_prefix("_c_").and_then(|l| l.split_once("-lease-")).expect(lease);
        assert!(uuid.len() == 36 && seq.len() == 10 && seq.bytes().all(|b| b.is_ascii_digit()), "{lease}");
    }
    assert!(queue_left("zookeeper", &url, &name).await.is_empty(), "the mutex is kept after the grant");
    let sem_b = b.semaphore(&name, 2).unwrap();
    let waiter = tokio::spawn(async move { sem_b.acquire(1).await.unwrap() });
    a.debug_expire_session().await.unwrap();
    let reason = tokio::time::timeout(Duration::from_secs(10), held.lost()).await.expect("no loss after expiry");
    assert!(matches!(reason, LossReason::SessionExpired | LossReason::Disconnected), "{reason:?}");
    let next = tokio::time::timeout(Duration::from_secs(10), waiter).await.expect("waiter hung").unwrap();
    assert!(next.fencing_token() > held.fencing_token());
    assert!(matches!(held.release().await, Err(Error::Lost { .. })));
    next.release().await.unwrap();
    assert_eq!(counts("zookeeper", &url, &name).await, (2, 0));
    assert!(queue_left("zookeeper", &url, &name).await.is_empty());
}

/// Redis keeps a lock's hash and a semaphore's counter at the name itself,
/// so one name cannot be both (Redisson's `RLock` and `RSemaphore` cannot
/// share one either). The second kind is refused with a typed
/// `InvalidName`, the first keeps its hold, and the refused one leaves
/// nothing on the server. (ZooKeeper keeps them apart: a lock's nodes sit
/// under the name, a semaphore's under `<name>/leases` and `<name>/locks`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_one_name_cannot_be_a_lock_and_a_semaphore() {
    let url = redis_url();
    let (a, b) = (client(&url).await, client(&url).await);
    let refused = |what: &str, r: Result<bool, Error>| match r {
        Err(Error::InvalidName(why)) => assert!(why.contains("another kind"), "{what}: {why}"),
        other => panic!("{what}: not refused as a name in use by another kind: {other:?}"),
    };

    let name = unique("kinds-lock-first");
    let held = a.lock(&name).unwrap().acquire().await.unwrap();
    refused(
        "a semaphore",
        b.semaphore(&name, 2).unwrap().try_acquire(1, Duration::from_secs(1)).await.map(|p| p.is_some()),
    );
    assert!(queue_left("redis", &url, &name).await.is_empty(), "the refused semaphore queued");
    let mut c = raw_redis(&url).await;
    let timeouts: i64 = redis::cmd("EXISTS").arg(format!("{{{name}}}:timeout")).query_async(&mut c).await.unwrap();
    assert_eq!(timeouts, 0, "the refused semaphore left a permit");
    held.release().await.expect("the lock kept its hold");
    assert!(redis_leftovers(&url, &name).await.is_empty());

    let name = unique("kinds-semaphore-first");
    let permits = a.semaphore(&name, 2).unwrap().acquire(1).await.unwrap();
    refused("a lock", b.lock(&name).unwrap().try_acquire(Duration::from_secs(1)).await.map(|g| g.is_some()));
    refused(
        "a read lock",
        b.rw_lock(&name).unwrap().read().try_acquire(Duration::from_secs(1)).await.map(|g| g.is_some()),
    );
    assert!(
        redis_leftovers(&url, &name)
            .await
            .iter()
            .all(|k| !k.starts_with("polylock_queue") && !k.starts_with("polylock_rwqueue")),
        "the refused lock queued"
    );
    permits.release().await.expect("the semaphore kept its permit");
}
