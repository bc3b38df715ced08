//! The Rust API on a real Redis Cluster of six nodes (three masters, three
//! replicas): `eval "$(scripts/services start-cluster)"` exports
//! POLYLOCK_TEST_CLUSTER. Without it these tests say so and pass.

mod support;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use polylock::{Client, ClientOptions, Error, LockOptions, OwnerId};
use polylock_core::keyslot::{brace_shaped_names, key_slot, tag_for_slot};
use support::*;

fn cluster_url() -> Option<String> {
    let url = std::env::var("POLYLOCK_TEST_CLUSTER").ok();
    if url.is_none() {
        eprintln!("skipped: POLYLOCK_TEST_CLUSTER is unset (run `eval \"$(scripts/services start-cluster)\"`)");
    }
    url
}

/// The tests that count every key of the cluster hold this exclusively;
/// the others share it, so nothing of theirs is counted.
static KEYSPACE: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

/// A short lease, so the fencing counters (which live as long as the last
/// grant's lease) are gone soon after a test.
const LEASE: Duration = Duration::from_secs(1);

async fn cluster_client(url: &str) -> Client {
    client_with(url, ClientOptions { lease: LEASE, ..Default::default() }).await
}

/// A master of the cluster, as `CLUSTER NODES` lists it.
#[derive(Debug, Clone)]
struct Master {
    id: String,
    /// `redis://host:port`
    url: String,
    host: String,
    port: u16,
    slots: Vec<(u16, u16)>,
}

impl Master {
    fn owns(&self, slot: u16) -> bool {
        self.slots.iter().any(|&(a, b)| (a..=b).contains(&slot))
    }
}

/// The masters, read from the first seed node.
async fn masters(url: &str) -> Vec<Master> {
    let seed = url.split("://").nth(1).unwrap().split(',').next().unwrap();
    let mut c = raw_redis(&format!("redis://{seed}")).await;
    let nodes: String = redis::cmd("CLUSTER").arg("NODES").query_async(&mut c).await.unwrap();
    let mut out = Vec::new();
    for line in nodes.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 8 || !f[2].split(',').any(|flag| flag == "master") || f[2].contains("fail") {
            continue;
        }
        let addr = f[1].split('@').next().unwrap();
        let (host, port) = addr.rsplit_once(':').unwrap();
        let slots = f[8..]
            .iter()
            .filter(|s| !s.starts_with('['))
            .map(|s| match s.split_once('-') {
                Some((a, b)) => (a.parse().unwrap(), b.parse().unwrap()),
                None => (s.parse().unwrap(), s.parse().unwrap()),
            })
            .collect();
        out.push(Master {
            id: f[0].into(),
            url: format!("redis://{addr}"),
            host: host.into(),
            port: port.parse().unwrap(),
            slots,
        });
    }
    out
}

async fn raw_cluster(url: &str) -> redis::cluster_async::ClusterConnection {
    let seeds: Vec<String> = url.split("://").nth(1).unwrap().split(',').map(|hp| format!("redis://{hp}")).collect();
    redis::cluster::ClusterClient::new(seeds).unwrap().get_async_connection().await.unwrap()
}

/// The lock key, the queue keys of a name without braces, on the cluster.
async fn cluster_leftovers(url: &str, name: &str) -> Vec<String> {
    let mut c = raw_cluster(url).await;
    let mut left = Vec::new();
    for key in support::lock_keys(name) {
        let n: i64 = redis::cmd("EXISTS").arg(&key).query_async(&mut c).await.unwrap();
        if n > 0 {
            left.push(key);
        }
    }
    left
}

/// How long one acquire or release may take before the test fails naming
/// it: longer than any timeout the tests pass, so only a hang trips it.
const HANG: Duration = Duration::from_secs(40);

/// One test's watch over its acquires and releases.
#[derive(Clone)]
struct Watch {
    url: String,
    test: &'static str,
}

impl Watch {
    fn new(url: &str, test: &'static str) -> Watch {
        Watch { url: url.to_owned(), test }
    }

    /// Awaits `fut` (the `what` of lock `name`), or fails after [`HANG`]
    /// naming the test, the lock, its slot and the master serving that
    /// slot then: a hang is reported, never waited out by CI.
    async fn on<T>(&self, what: &str, name: &str, fut: impl std::future::Future<Output = T>) -> T {
        if let Ok(out) = tokio::time::timeout(HANG, fut).await {
            return out;
        }
        let slot = key_slot(name);
        let node = match tokio::time::timeout(Duration::from_secs(2), masters(&self.url)).await {
            Ok(now) => now.iter().find(|m| m.owns(slot)).map_or_else(|| "none".to_owned(), |m| m.url.clone()),
            Err(_) => "unknown (CLUSTER NODES hangs too)".to_owned(),
        };
        panic!("{}: {what} of {name} (slot {slot}, master {node}) hung for {HANG:?}", self.test);
    }
}

#[tokio::test]
async fn no_node_answering_is_a_connect_error_naming_every_address() {
    let opts = ClientOptions { connect_timeout: Duration::from_millis(500), ..Default::default() };
    let started = std::time::Instant::now();
    match Client::connect_with("redis+cluster://127.0.0.1:1,127.0.0.1:2", opts).await {
        Err(Error::Connect { addr, .. }) => assert_eq!(addr, "127.0.0.1:1,127.0.0.1:2"),
        other => panic!("{other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(3), "took {:?}", started.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn twenty_tasks_over_three_clients_lose_no_update() {
    let Some(url) = cluster_url() else { return };
    let _shared = KEYSPACE.read().await;
    let clients = [cluster_client(&url).await, cluster_client(&url).await, cluster_client(&url).await];
    // One name per master, so each shard's routing is used.
    let masters = masters(&url).await;
    let names: Vec<String> = masters
        .iter()
        .map(|m| format!("/polylock-test/counter{{{}}}-{}", tag_for_slot(m.slots[0].0), std::process::id()))
        .collect();
    let counters: Arc<Vec<AtomicU64>> = Arc::new(names.iter().map(|_| AtomicU64::new(0)).collect());
    let mut tasks = Vec::new();
    let watch = Watch::new(&url, "twenty_tasks_over_three_clients_lose_no_update");
    for i in 0..20 {
        let locks: Vec<_> = names.iter().map(|n| (n.clone(), clients[i % 3].lock(n).unwrap())).collect();
        let counters = counters.clone();
        let watch = watch.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..5 {
                for (k, (name, lock)) in locks.iter().enumerate() {
                    let g = watch.on("acquire", name, lock.acquire()).await.unwrap();
                    // A read-modify-write that loses updates unless excluded.
                    let v = counters[k].load(Ordering::SeqCst);
                    tokio::task::yield_now().await;
                    tokio::time::sleep(Duration::from_micros(200)).await;
                    counters[k].store(v + 1, Ordering::SeqCst);
                    watch.on("release", name, g.release()).await.unwrap();
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    for (k, n) in names.iter().enumerate() {
        assert_eq!(counters[k].load(Ordering::SeqCst), 100, "{n}: lost updates");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reentrancy_try_and_cancel_as_on_one_server() {
    let Some(url) = cluster_url() else { return };
    let _shared = KEYSPACE.read().await;
    let name = unique("reentry");
    let w = Watch::new(&url, "reentrancy_try_and_cancel_as_on_one_server");
    let c = cluster_client(&url).await;
    let other = cluster_client(&url).await;
    let lock = c.lock(&name).unwrap();
    let me = OwnerId(7);
    let g1 = w.on("acquire", &name, lock.acquire_as(me, None)).await.unwrap();
    let g2 = w.on("re-entry", &name, lock.acquire_as(me, None)).await.unwrap();
    assert_eq!(g1.fencing_token(), g2.fencing_token(), "re-entry is the same grant");
    assert_eq!(lock.hold_count(me), 2);
    w.on("release", &name, g2.release()).await.unwrap();
    let theirs = other.lock(&name).unwrap();
    let tried = w.on("try_acquire(0)", &name, theirs.try_acquire(Duration::ZERO)).await.unwrap();
    assert!(tried.is_none(), "still held after 1 of 2 releases");
    let started = std::time::Instant::now();
    assert!(w.on("try_acquire(300ms)", &name, theirs.try_acquire(Duration::from_millis(300))).await.unwrap().is_none());
    assert!(started.elapsed() >= Duration::from_millis(300), "gave up early");
    // Cancelled while queued: dropping the acquire future.
    assert!(tokio::time::timeout(Duration::from_millis(200), theirs.acquire_as(OwnerId(9), None)).await.is_err());
    match w.on("acquire_as(0)", &name, theirs.acquire_as(OwnerId(1), Some(Duration::ZERO))).await {
        Err(Error::WouldBlock(_)) => {}
        other => panic!("{other:?}"),
    }
    let token = g1.fencing_token();
    w.on("last release", &name, g1.release()).await.unwrap();
    let g = w.on("try_acquire(5s)", &name, theirs.try_acquire(Duration::from_secs(5))).await.unwrap();
    let g = g.expect("free after the last release");
    assert!(g.fencing_token() > token, "token {} after {token}", g.fencing_token());
    w.on("release", &name, g.release()).await.unwrap();
    let clean = eventually(Duration::from_secs(3), || async { cluster_leftovers(&url, &name).await.is_empty() }).await;
    assert!(clean, "left behind: {:?}", cluster_leftovers(&url, &name).await);
}

/// Whether every master has its replica online within 15 s: a node the
/// failover test restarted syncs as a replica for a while after the
/// cluster reports `ok`.
async fn replicas_online(url: &str) -> bool {
    eventually(Duration::from_secs(15), || async {
        for m in masters(url).await {
            let mut c = raw_redis(&m.url).await;
            let info: String = redis::cmd("INFO").arg("replication").query_async(&mut c).await.unwrap();
            if !info.contains("connected_slaves:1") || !info.contains("state=online") {
                return false;
            }
        }
        true
    })
    .await
}

/// `replicas=K` from the URL reaches the lock: every master has one
/// replica, so with `replicas=2` no grant is ever acknowledged by two and
/// the acquire fails `Unavailable` naming the count, leaving nothing behind;
/// with `replicas=1` the EVAL + WAIT on the lock's master is granted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_k_waits_for_the_replicas_of_the_locks_master() {
    let Some(url) = cluster_url() else { return };
    let _shared = KEYSPACE.read().await;
    assert!(replicas_online(&url).await, "a master has no replica online");
    let name = unique("cluster-acks");
    let w = Watch::new(&url, "replicas_k_waits_for_the_replicas_of_the_locks_master");
    let opts = ClientOptions { lease: LEASE, request_timeout: Duration::from_secs(1), ..Default::default() };
    let two = client_with(&format!("{url}?replicas=2"), opts.clone()).await;
    let lock = two.lock(&name).unwrap();
    match w.on("acquire with replicas=2", &name, lock.acquire_as(OwnerId(1), Some(Duration::from_millis(1500)))).await {
        Err(Error::Unavailable { reply, .. }) => assert!(reply.contains("1 of 2 replicas"), "{reply}"),
        other => panic!("granted without the acknowledgements asked for: {other:?}"),
    }
    let clean = eventually(Duration::from_secs(3), || async { cluster_leftovers(&url, &name).await.is_empty() }).await;
    assert!(clean, "an unacknowledged grant was left: {:?}", cluster_leftovers(&url, &name).await);
    let one = client_with(&format!("{url}?replicas=1"), opts).await;
    let lock = one.lock(&name).unwrap();
    let g = w.on("acquire with replicas=1", &name, lock.try_acquire(Duration::from_secs(5))).await.unwrap();
    let g = g.expect("one replica acknowledges");
    w.on("release with replicas=1", &name, g.release()).await.unwrap();
}

/// 10,000 names: every brace shape, plain names, and names aimed at 5,000
/// slots spread evenly over the whole range, so every master serves a third.
/// What every key of [`ten_thousand_names`] contains, and no other test's
/// name: that test counts the keys left of its own names, whatever the
/// other tests of this binary leave to expire meanwhile.
fn ten_thousand_marker() -> String {
    format!("tenk{}", std::process::id())
}

/// How many keys containing `marker` the node at `node_url` holds.
async fn keys_containing(node_url: &str, marker: &str) -> usize {
    let mut c = raw_redis(node_url).await;
    let (mut cursor, mut found) = (0u64, 0usize);
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(format!("*{marker}*"))
            .arg("COUNT")
            .arg(1000)
            .query_async(&mut c)
            .await
            .unwrap();
        found += keys.len();
        if next == 0 {
            return found;
        }
        cursor = next;
    }
}

fn ten_thousand_names() -> Vec<String> {
    let pid = ten_thousand_marker();
    let mut names: Vec<String> = brace_shaped_names().into_iter().map(|n| format!("{pid}-{n}")).collect();
    let aimed = 5_000;
    for i in 0..aimed {
        let slot = (i * 16_384 / aimed) as u16;
        names.push(format!("{pid}/slot{{{}}}-{i}", tag_for_slot(slot)));
    }
    let mut i = 0;
    while names.len() < 10_000 {
        names.push(match i % 3 {
            0 => format!("{pid}/plain-{i}"),
            1 => format!("{pid}/close}}{i}"),
            _ => format!("{pid}/open{{{i}"),
        });
        i += 1;
    }
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ten_thousand_names_over_every_slot_leave_nothing_behind() {
    let Some(url) = cluster_url() else { return };
    let _exclusive = KEYSPACE.write().await;
    let masters = masters(&url).await;
    let names = ten_thousand_names();
    let slots: HashSet<u16> = names.iter().map(|n| key_slot(n)).collect();
    assert!(slots.len() >= 5_000, "only {} slots", slots.len());
    for m in &masters {
        let served = names.iter().filter(|n| m.owns(key_slot(n))).count();
        assert!(served > 2_000, "master {} serves only {served} names", m.url);
    }
    let clients = [cluster_client(&url).await, cluster_client(&url).await];
    // The lease is the suite's (1 s): at 200 ms a loaded machine (CI on two
    // cores) let a few holders' renewals miss it between acquire and release.
    let opts = LockOptions { lease: Some(LEASE), ..Default::default() };
    let w = Watch::new(&url, "ten_thousand_names_over_every_slot_leave_nothing_behind");
    let failures = futures::stream::iter(names.iter().enumerate())
        .map(|(i, name)| {
            let lock = clients[i % 2].lock_with(name, opts.clone()).unwrap();
            let w = &w;
            async move {
                let g = w.on("acquire", name, lock.acquire()).await.map_err(|e| format!("{name}: acquire: {e}"))?;
                w.on("release", name, g.release()).await.map_err(|e| format!("{name}: release: {e}"))
            }
        })
        .buffer_unordered(64)
        .filter_map(|r| async move { r.err() })
        .collect::<Vec<_>>()
        .await;
    assert!(failures.is_empty(), "{} failed, first: {:?}", failures.len(), failures.first());
    // The fencing counters expire with the last lease (1 s); nothing else of
    // these names may stay (other tests' keys expire on their own leases).
    let marker = ten_thousand_marker();
    let empty = eventually(Duration::from_secs(10), || {
        let (masters, marker) = (masters.clone(), marker.clone());
        async move {
            for m in &masters {
                if keys_containing(&m.url, &marker).await != 0 {
                    return false;
                }
            }
            true
        }
    })
    .await;
    let mut sizes = HashMap::new();
    for m in &masters {
        sizes.insert(m.url.clone(), keys_containing(&m.url, &marker).await);
    }
    assert!(empty, "keys left per master: {sizes:?}");
}

/// Moves `slot` from `from` to `to` the way `redis-cli --cluster reshard`
/// does, with `between` run after the key `first` (if any) has moved and
/// before the rest do.
async fn migrate_slot<F, Fut>(
    masters: &[Master],
    slot: u16,
    from: &Master,
    to: &Master,
    first: Option<&str>,
    between: F,
) where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let mut src = raw_redis(&from.url).await;
    let mut dst = raw_redis(&to.url).await;
    let setslot = |state: &str, id: &str| {
        let mut cmd = redis::cmd("CLUSTER");
        cmd.arg("SETSLOT").arg(slot).arg(state).arg(id);
        cmd
    };
    let () = setslot("IMPORTING", &from.id).query_async(&mut dst).await.unwrap();
    let () = setslot("MIGRATING", &to.id).query_async(&mut src).await.unwrap();
    let move_keys = |only: Option<String>| {
        let mut src = src.clone();
        async move {
            let keys: Vec<String> =
                redis::cmd("CLUSTER").arg("GETKEYSINSLOT").arg(slot).arg(1000).query_async(&mut src).await.unwrap();
            let keys: Vec<String> = keys.into_iter().filter(|k| only.as_ref().is_none_or(|o| k == o)).collect();
            if keys.is_empty() {
                return 0;
            }
            let mut cmd = redis::cmd("MIGRATE");
            cmd.arg(&to.host).arg(to.port).arg("").arg(0).arg(5000).arg("KEYS").arg(&keys);
            let _: redis::Value = cmd.query_async(&mut src).await.unwrap();
            keys.len()
        }
    };
    if let Some(first) = first {
        assert_eq!(move_keys(Some(first.to_owned())).await, 1, "{first} was not in slot {slot}");
    }
    between().await;
    move_keys(None).await;
    // The new owner first, then the old one, then the rest (as redis-cli
    // does): the old owner never redirects to a node that does not yet
    // claim the slot.
    let others = masters.iter().filter(|m| m.id != to.id && m.id != from.id);
    for m in [to, from].into_iter().chain(others) {
        let mut c = raw_redis(&m.url).await;
        let () = setslot("NODE", &to.id).query_async(&mut c).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_slot_migrated_while_its_locks_are_held_and_awaited() {
    let Some(url) = cluster_url() else { return };
    let _exclusive = KEYSPACE.write().await;
    let masters = masters(&url).await;
    let pid = std::process::id();
    // Two locks in one slot, each held by one client and awaited by two others.
    let tag = format!("migrate-{pid}");
    let names = [format!("/polylock-test/a{{{tag}}}"), format!("/polylock-test/b{{{tag}}}")];
    let slot = key_slot(&names[0]);
    let from = masters.iter().find(|m| m.owns(slot)).unwrap().clone();
    let to = masters.iter().find(|m| m.id != from.id).unwrap().clone();
    let clients = [cluster_client(&url).await, cluster_client(&url).await, cluster_client(&url).await];
    let w = Watch::new(&url, "a_slot_migrated_while_its_locks_are_held_and_awaited");
    let mut holders = Vec::new();
    for name in &names {
        holders.push(w.on("acquire", name, clients[0].lock(name).unwrap().acquire()).await.unwrap());
    }
    let inside: Arc<Vec<AtomicBool>> = Arc::new(names.iter().map(|_| AtomicBool::new(false)).collect());
    let mut waiters = Vec::new();
    for (k, name) in names.iter().enumerate() {
        for c in &clients[1..] {
            let lock = c.lock(name).unwrap();
            let inside = inside.clone();
            let (w, name) = (w.clone(), name.clone());
            waiters.push(tokio::spawn(async move {
                let g = w.on("waiter's try_acquire(20s)", &name, lock.try_acquire(Duration::from_secs(20))).await;
                let g = g.unwrap().expect("granted after the migration");
                assert!(!inside[k].swap(true, Ordering::SeqCst), "two holders at once");
                tokio::time::sleep(Duration::from_millis(20)).await;
                inside[k].store(false, Ordering::SeqCst);
                let token = g.fencing_token();
                w.on("waiter's release", &name, g.release()).await.unwrap();
                token
            }));
        }
    }
    // Both waiters of each lock are queued before the slot moves.
    let raw = raw_cluster(&url).await;
    let queued = eventually(Duration::from_secs(5), || {
        let mut raw = raw.clone();
        let names = names.clone();
        async move {
            for n in &names {
                let queue =
                    format!("polylock_queue:{{{tag}}}:{n}", tag = n.split('{').nth(1).unwrap().trim_end_matches('}'));
                let waiting: i64 = redis::cmd("ZCARD").arg(&queue).query_async(&mut raw).await.unwrap();
                if waiting != 2 {
                    return false;
                }
            }
            true
        }
    })
    .await;
    assert!(queued, "the waiters did not queue");
    let held_tokens: Vec<u64> = holders.iter().map(|g| g.fencing_token()).collect();
    // The first lock's hash moves alone; its holder releases while the rest
    // of its keys are still on the old master (TRYAGAIN until they follow),
    // the second holder renews meanwhile.
    let first_holder = holders.remove(0);
    let (w1, first) = (w.clone(), names[0].clone());
    let released =
        tokio::spawn(async move { w1.on("release during the migration", &first, first_holder.release()).await });
    migrate_slot(&masters, slot, &from, &to, Some(&names[0]), || async {
        tokio::time::sleep(LEASE / 2).await;
    })
    .await;
    released.await.unwrap().unwrap();
    let second = holders.remove(0);
    assert!(second.lost_reason().is_none(), "the second holder lost its lock during the migration");
    w.on("release after the migration", &names[1], second.release()).await.unwrap();
    let mut tokens = Vec::new();
    for w in waiters {
        tokens.push(w.await.unwrap());
    }
    for (k, held) in held_tokens.iter().enumerate() {
        for t in &tokens[k * 2..k * 2 + 2] {
            assert!(t > held, "{}: token {t} after {held}", names[k]);
        }
    }
    // Everything of these locks is on the new master, and then nothing is.
    let dst = raw_redis(&to.url).await;
    let gone = eventually(LEASE * 4, || {
        let mut dst = dst.clone();
        async move {
            let n: i64 = redis::cmd("CLUSTER").arg("COUNTKEYSINSLOT").arg(slot).query_async(&mut dst).await.unwrap();
            n == 0
        }
    })
    .await;
    assert!(gone, "keys left in slot {slot}");
    // Give the (empty) slot back, so the cluster looks as it did.
    migrate_slot(&masters, slot, &to, &from, None, || async {}).await;
}

/// After a slot refresh the redis crate restores each node's subscriptions
/// with one multi-channel SUBSCRIBE that it reads one reply for, while the
/// node confirms every channel: the extra confirmations answer whatever was
/// sent next on that connection. Scripts must never be among them.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replies_stay_with_their_requests_when_the_cluster_resubscribes() {
    let Some(url) = cluster_url() else { return };
    let _exclusive = KEYSPACE.write().await;
    let masters = masters(&url).await;
    let pid = std::process::id();
    let node = masters[0].clone();
    // Eight locks on one master, held by one client and awaited by another,
    // so the waiter has several subscriptions on that master.
    let names: Vec<String> =
        (0..8).map(|i| format!("/polylock-test/resub{{{}}}-{pid}", tag_for_slot(node.slots[0].0 + i))).collect();
    let holder = cluster_client(&url).await;
    let waiter = cluster_client(&url).await;
    let w = Watch::new(&url, "replies_stay_with_their_requests_when_the_cluster_resubscribes");
    let mut held = Vec::new();
    for n in &names {
        held.push(w.on("acquire", n, holder.lock(n).unwrap().acquire()).await.unwrap());
    }
    let mut waits = Vec::new();
    for n in &names {
        let lock = waiter.lock(n).unwrap();
        let (w, n) = (w.clone(), n.clone());
        waits.push(tokio::spawn(async move {
            w.on("try_acquire(20s)", &n, lock.try_acquire(Duration::from_secs(20))).await
        }));
    }
    let raw = raw_cluster(&url).await;
    let queued = eventually(Duration::from_secs(5), || {
        let mut raw = raw.clone();
        let names = names.clone();
        async move {
            for n in &names {
                let tag = n.split('{').nth(1).unwrap().split('}').next().unwrap();
                let waiting: i64 = redis::cmd("ZCARD")
                    .arg(format!("polylock_queue:{{{tag}}}:{n}"))
                    .query_async(&mut raw)
                    .await
                    .unwrap();
                if waiting != 1 {
                    return false;
                }
            }
            true
        }
    })
    .await;
    assert!(queued, "the waiters did not queue");
    // Move an empty slot of another master, then make the waiter's client
    // use it: MOVED, a slot refresh, every subscription restored; meanwhile
    // requests go to the master with the subscriptions, and each must get
    // its own reply. Three rounds, the slot moving back and forth.
    let (a, b) = (masters[1].clone(), masters[2].clone());
    let slot = a.slots[0].0;
    let moved_name = format!("/polylock-test/moved{{{}}}-{pid}", tag_for_slot(slot));
    for round in 0..3u16 {
        let (from, to) = if round % 2 == 0 { (&a, &b) } else { (&b, &a) };
        migrate_slot(&masters, slot, from, to, None, || async {}).await;
        let lock = waiter.lock(&moved_name).unwrap();
        let g = w.on("try_acquire(5s) after MOVED", &moved_name, lock.try_acquire(Duration::from_secs(5))).await;
        let g = g.unwrap().expect("free");
        w.on("release after MOVED", &moved_name, g.release()).await.unwrap();
        // The refresh and the resubscription run in the background: keep
        // 32 lanes of requests going for a second.
        let until = tokio::time::Instant::now() + Duration::from_secs(1);
        let lanes = (0..32u16).map(|lane| {
            let n =
                format!("/polylock-test/after{{{}}}-{pid}-{round}-{lane}", tag_for_slot(node.slots[0].0 + 10 + lane));
            let lock = waiter.lock(&n).unwrap();
            let w = &w;
            async move {
                while tokio::time::Instant::now() < until {
                    let g = w.on("lane try_acquire(5s)", &n, lock.try_acquire(Duration::from_secs(5))).await;
                    let g = g.unwrap().unwrap_or_else(|| panic!("{n} is free"));
                    w.on("lane release", &n, g.release()).await.unwrap_or_else(|e| panic!("{n}: release: {e}"));
                }
            }
        });
        futures::future::join_all(lanes).await;
    }
    for (g, n) in held.into_iter().zip(&names) {
        w.on("holder's release", n, g.release()).await.unwrap();
    }
    for (waiting, n) in waits.into_iter().zip(&names) {
        let g = waiting.await.unwrap().unwrap().expect("granted once released");
        w.on("waiter's release", n, g.release()).await.unwrap();
    }
    // Three rounds left the slot on b: give it back.
    migrate_slot(&masters, slot, &b, &a, None, || async {}).await;
}

/// Every node of the cluster, masters and replicas: `redis://host:port`.
async fn all_nodes(url: &str) -> Vec<String> {
    let seed = url.split("://").nth(1).unwrap().split(',').next().unwrap();
    let mut c = raw_redis(&format!("redis://{seed}")).await;
    let nodes: String = redis::cmd("CLUSTER").arg("NODES").query_async(&mut c).await.unwrap();
    nodes
        .lines()
        .filter(|l| !l.contains("fail"))
        .filter_map(|l| l.split_whitespace().nth(1))
        .map(|addr| format!("redis://{}", addr.split('@').next().unwrap()))
        .collect()
}

/// The classic pub/sub channels matching `pattern` that any node has a subscriber on.
async fn subscribed_anywhere(url: &str, pattern: &str) -> Vec<String> {
    let mut found = Vec::new();
    for node in all_nodes(url).await {
        let mut c = raw_redis(&node).await;
        let channels: Vec<String> =
            redis::cmd("PUBSUB").arg("CHANNELS").arg(pattern).query_async(&mut c).await.unwrap();
        found.extend(channels.into_iter().map(|ch| format!("{node} {ch}")));
    }
    found
}

/// A waiter listens on its own channel and Redisson's with one SUBSCRIBE
/// and stops with one UNSUBSCRIBE, and the crate routes each by its first
/// channel's slot. The two share a slot except for a name with an unclosed
/// brace (`a{`): there an UNSUBSCRIBE routed by the other channel would
/// reach another node than its SUBSCRIBE did and leave that subscription
/// in place for the connection's life. After a waiter of every brace shape
/// has been granted, no node keeps a channel of theirs.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_granted_waiter_leaves_no_subscription_on_any_node() {
    let Some(url) = cluster_url() else { return };
    let _shared = KEYSPACE.read().await;
    let prefix = format!("sub{}-", std::process::id());
    let holder = cluster_client(&url).await;
    let waiter = cluster_client(&url).await;
    let w = Watch::new(&url, "a_granted_waiter_leaves_no_subscription_on_any_node");
    // The listed shapes, not the 400 generated `order-N` / `order}N` names.
    let shapes = brace_shaped_names().into_iter().filter(|n| !n.starts_with("order"));
    for name in shapes.map(|n| format!("{prefix}{n}")) {
        let held = w.on("acquire", &name, holder.lock(&name).unwrap().acquire()).await.unwrap();
        let lock = waiter.lock(&name).unwrap();
        let waiting = tokio::spawn(async move { lock.try_acquire(Duration::from_secs(20)).await });
        // Queued and listening: its own channel (`<Redisson's>:<member>`,
        // Redisson's holding the name as it is or in braces) is up.
        let own = format!("*{name}*:*");
        let listening = eventually(Duration::from_secs(10), || {
            let (url, own) = (url.clone(), own.clone());
            async move { !subscribed_anywhere(&url, &own).await.is_empty() }
        })
        .await;
        assert!(listening, "{name}: the waiter never subscribed");
        w.on("release", &name, held.release()).await.unwrap();
        let granted = w.on("waiter's try_acquire", &name, waiting).await.unwrap().unwrap().expect("granted");
        w.on("waiter's release", &name, granted.release()).await.unwrap();
    }
    let pattern = format!("*{prefix}*");
    let gone = eventually(Duration::from_secs(5), || {
        let (url, pattern) = (url.clone(), pattern.clone());
        async move { subscribed_anywhere(&url, &pattern).await.is_empty() }
    })
    .await;
    assert!(gone, "subscriptions left: {:?}", subscribed_anywhere(&url, &pattern).await);
    holder.close().await;
    waiter.close().await;
}

/// Issue 46, item 5: a read-write lock or a semaphore of every brace shape
/// on the cluster is either granted (all its keys, Redisson's included, in
/// the lock key's slot) or refused at once with `InvalidName` when
/// Redisson's keys of the name would be in another slot (`a{`, `a}`,
/// `a{}b`), leaving nothing on the server; never a CROSSSLOT turned into a
/// protocol error.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn read_write_locks_and_semaphores_of_every_brace_shape_are_placed_or_refused() {
    use polylock_core::redis::keys::redisson_keys_share_the_slot;
    use polylock_core::redis::RedisKeys;
    use polylock_core::LockName;
    let Some(url) = cluster_url() else { return };
    let _shared = KEYSPACE.read().await;
    let c = cluster_client(&url).await;
    let mut raw = raw_cluster(&url).await;
    let w = Watch::new(&url, "read_write_locks_and_semaphores_of_every_brace_shape_are_placed_or_refused");
    let prefix = format!("bs{}-", std::process::id());
    let (mut placed, mut refused) = (0, 0);
    for shape in brace_shaped_names() {
        let name = format!("{prefix}{shape}");
        let n = LockName::new(&name).unwrap();
        let fits = redisson_keys_share_the_slot(&n);
        let rw = c.rw_lock(&name).unwrap();
        let sem = c.semaphore(&name, 2).unwrap();
        for what in ["read", "write", "permits"] {
            let outcome: Result<(), Error> = match what {
                "read" => w.on("read acquire", &name, async { rw.read().acquire().await?.release().await }).await,
                "write" => w.on("write acquire", &name, async { rw.write().acquire().await?.release().await }).await,
                _ => w.on("semaphore acquire", &name, async { sem.acquire(1).await?.release().await }).await,
            };
            match outcome {
                Ok(()) => {
                    assert!(fits, "{name:?}: {what} granted, yet Redisson's keys are in another slot");
                    placed += 1;
                }
                Err(Error::InvalidName(why)) if !fits => {
                    assert!(why.contains("hash tag"), "{name:?}: {why}");
                    refused += 1;
                }
                other => panic!("{name:?}: {what}: {other:?} (Redisson's keys in the lock key's slot: {fits})"),
            }
        }
        if !fits {
            let rw_keys = RedisKeys::of_read_write(&n);
            let sem_keys = RedisKeys::of_semaphore(&n);
            let mut ours = vec![rw_keys.lock(), rw_keys.fence(), rw_keys.queue(), rw_keys.queue_deadline()];
            ours.extend([sem_keys.queue(), sem_keys.queue_deadline(), sem_keys.permit_total().unwrap()]);
            for key in ours {
                let n: i64 = redis::cmd("EXISTS").arg(key).query_async(&mut raw).await.unwrap();
                assert_eq!(n, 0, "{name:?} was refused but left {key:?}");
            }
        }
    }
    assert!(placed > 0 && refused > 0, "placed {placed}, refused {refused}");
    c.close().await;
}

/// `status` reads the mutex's, the read-write lock's and the semaphore's
/// keys of a name in one script: on the cluster it answers for a name of
/// every brace shape, held or free, never CROSSSLOT.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn status_answers_for_names_of_every_brace_shape() {
    let Some(url) = cluster_url() else { return };
    let _shared = KEYSPACE.read().await;
    let c = cluster_client(&url).await;
    let w = Watch::new(&url, "status_answers_for_names_of_every_brace_shape");
    let prefix = format!("st{}-", std::process::id());
    for shape in brace_shaped_names().into_iter().filter(|n| !n.starts_with("order")) {
        let name = format!("{prefix}{shape}");
        let free = w.on("status", &name, c.status(&name)).await;
        assert!(matches!(&free, Ok(s) if !s.held), "{name:?} free: {free:?}");
        let g = w.on("acquire", &name, c.lock(&name).unwrap().acquire()).await.unwrap();
        let held = w.on("status", &name, c.status(&name)).await;
        assert!(matches!(&held, Ok(s) if s.held), "{name:?} held: {held:?}");
        w.on("release", &name, g.release()).await.unwrap();
    }
    c.close().await;
}

/// `scripts/services` with this environment (the cluster's ports and state directory).
fn services(args: &[&str]) {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/services");
    let out = std::process::Command::new(script).args(args).output().unwrap();
    assert!(out.status.success(), "services {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// A master SIGKILLed while one of its locks is held and awaited: its
/// replica takes over, the holder's renewals and release reach it, and the
/// waiter (subscribed on the dead node) is subscribed again and granted.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_waiter_whose_master_fails_over_is_granted() {
    let Some(url) = cluster_url() else { return };
    let _exclusive = KEYSPACE.write().await;
    // The previous run's victim may still be syncing: a replica without the
    // grant would be promoted without it.
    assert!(replicas_online(&url).await, "a master has no replica online");
    let before = masters(&url).await;
    // Not a seed node, so the clients can always reach the cluster.
    let seeds: Vec<String> = url.split("://").nth(1).unwrap().split(',').map(str::to_owned).collect();
    let victim = before.iter().find(|m| !seeds.contains(&format!("{}:{}", m.host, m.port))).unwrap().clone();
    let name = format!("/polylock-test/failover{{{}}}-{}", tag_for_slot(victim.slots[0].0), std::process::id());
    let opts = LockOptions { lease: Some(Duration::from_secs(10)), ..Default::default() };
    let holder = cluster_client(&url).await;
    let waiter = cluster_client(&url).await;
    let w = Watch::new(&url, "a_waiter_whose_master_fails_over_is_granted");
    let g = w.on("acquire", &name, holder.lock_with(&name, opts.clone()).unwrap().acquire()).await.unwrap();
    let held = g.fencing_token();
    let lock = waiter.lock_with(&name, opts).unwrap();
    let (w2, n2) = (w.clone(), name.clone());
    let waiting = tokio::spawn(async move {
        w2.on("waiter's try_acquire(30s)", &n2, lock.try_acquire(Duration::from_secs(30))).await
    });
    let raw = raw_cluster(&url).await;
    let queue = format!("polylock_queue:{{{}}}:{name}", tag_for_slot(victim.slots[0].0));
    let queued = eventually(Duration::from_secs(5), || {
        let (mut raw, queue) = (raw.clone(), queue.clone());
        async move { redis::cmd("ZCARD").arg(&queue).query_async::<i64>(&mut raw).await.unwrap() == 1 }
    })
    .await;
    assert!(queued, "the waiter did not queue");
    // Let the replica receive the grant and the queue entry, then kill the master.
    // (WAIT on a connection of our own would count only our own writes.)
    let m = raw_redis(&victim.url).await;
    let caught_up = eventually(Duration::from_secs(5), || {
        let mut m = m.clone();
        async move {
            let info: String = redis::cmd("INFO").arg("replication").query_async(&mut m).await.unwrap();
            let field = |key: &str| -> Option<u64> {
                info.split(['\r', '\n', ',']).find_map(|f| f.strip_prefix(key)).and_then(|v| v.parse().ok())
            };
            // `slave0:ip=..,port=..,state=online,offset=N,lag=..`
            matches!((field("master_repl_offset:"), field("offset=")), (Some(at), Some(got)) if got >= at)
        }
    })
    .await;
    assert!(caught_up, "the replica did not catch up with the grant");
    services(&["cluster-node-kill", &victim.port.to_string()]);
    // Restarted however the test ends, so a failure leaves the cluster whole.
    let _restart = RestartOnDrop(victim.port);
    let promoted = eventually(Duration::from_secs(15), || {
        let url = url.clone();
        let victim = victim.clone();
        async move { masters(&url).await.iter().any(|m| m.id != victim.id && m.owns(victim.slots[0].0)) }
    })
    .await;
    assert!(promoted, "no replica took over");
    assert!(g.lost_reason().is_none(), "the holder lost its lock across the failover");
    let released = std::time::Instant::now();
    w.on("release after the failover", &name, g.release()).await.unwrap();
    let granted = waiting.await.unwrap().unwrap().expect("the waiter is granted after the failover");
    assert!(granted.fencing_token() > held, "token {} after {held}", granted.fencing_token());
    // Handed over on its channel: its fallback retry would come only a
    // third of the lease (3.3 s) after its last try.
    let woken = released.elapsed();
    assert!(woken < Duration::from_secs(2), "woken {woken:?} after the release: not by its notification");
    w.on("waiter's release", &name, granted.release()).await.unwrap();
}

/// Restarts the cluster node on its port when dropped, also while a failed
/// test unwinds (so it never panics itself).
struct RestartOnDrop(u16);

impl Drop for RestartOnDrop {
    fn drop(&mut self) {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/services");
        let out = std::process::Command::new(script).args(["cluster-node-start", &self.0.to_string()]).output();
        if !matches!(&out, Ok(o) if o.status.success()) {
            eprintln!("cluster-node-start {} failed: {out:?}", self.0);
        }
    }
}

/// Sets a slot back to STABLE on the two nodes of a migration when dropped,
/// also while a failed test unwinds, so the cluster is never left with a
/// slot half moved (sync connections: a drop cannot await).
struct StableOnDrop {
    slot: u16,
    nodes: [String; 2],
}

impl StableOnDrop {
    fn restore(&self) {
        for node in &self.nodes {
            let stable = redis::Client::open(node.as_str()).and_then(|c| c.get_connection()).and_then(|mut c| {
                redis::cmd("CLUSTER").arg("SETSLOT").arg(self.slot).arg("STABLE").query::<()>(&mut c)
            });
            if let Err(e) = stable {
                eprintln!("CLUSTER SETSLOT {} STABLE on {node} failed: {e}", self.slot);
            }
        }
    }
}

impl Drop for StableOnDrop {
    fn drop(&mut self) {
        self.restore();
    }
}

/// The core is the one retry authority: a request the cluster refuses for
/// now (`TRYAGAIN`: a multi-key script on a slot being migrated, whose keys
/// are split between the nodes) comes back to it, and the transport never
/// sends it again by itself. Were the redis crate to retry it after its own
/// sleep, a waiter whose deadline passed meanwhile would send its LEAVE
/// first, and the ACQUIRE running after it would queue (or grant) a member
/// nobody waits for, for a whole waiter TTL.
///
/// X holds L; L's slot is marked MIGRATING on its master and IMPORTING on
/// another, then STABLE again 250 ms later (no key moves). Y asks for L
/// for 300 ms: told it timed out (or, refused until its deadline, that the
/// cluster was unavailable), it must leave nothing on the server, at once
/// and a second later, in any of 30 trials.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_refused_acquire_is_never_resent_behind_the_cores_back() {
    let Some(url) = cluster_url() else { return };
    // SETSLOT on a slot of this test's name only, with no other test of
    // this binary running meanwhile.
    let _exclusive = KEYSPACE.write().await;
    let masters = masters(&url).await;
    let name = unique("resend");
    let slot = key_slot(&name);
    let from = masters.iter().find(|m| m.owns(slot)).unwrap().clone();
    let to = masters.iter().find(|m| m.id != from.id).unwrap().clone();
    let stable = StableOnDrop { slot, nodes: [to.url.clone(), from.url.clone()] };
    // Leases far beyond the test's trials: an orphaned queue entry lives
    // as long as the waiter's lease, so the check a second later sees it.
    let opts = ClientOptions { lease: Duration::from_secs(20), ..Default::default() };
    let x = client_with(&url, opts.clone()).await;
    let y = client_with(&url, opts).await;
    let w = Watch::new(&url, "a_refused_acquire_is_never_resent_behind_the_cores_back");
    let held = x.lock(&name).unwrap();
    let g = w.on("X's acquire", &name, held.acquire_as(OwnerId(1), None)).await.unwrap();
    let x_field = held.holder_id(OwnerId(1));
    let [_, queue, deadlines] = support::lock_keys(&name);
    let raw = raw_cluster(&url).await;
    // Y's traces: queue entries, and hash fields other than X's.
    let traces_of_y = || {
        let (mut raw, name, queue, deadlines, x_field) =
            (raw.clone(), name.clone(), queue.clone(), deadlines.clone(), x_field.clone());
        async move {
            let queued: Vec<String> =
                redis::cmd("ZRANGE").arg(&queue).arg(0).arg(-1).query_async(&mut raw).await.unwrap();
            let due: Vec<String> =
                redis::cmd("ZRANGE").arg(&deadlines).arg(0).arg(-1).query_async(&mut raw).await.unwrap();
            let fields: Vec<String> = redis::cmd("HKEYS").arg(&name).query_async(&mut raw).await.unwrap();
            let others: Vec<String> = fields.into_iter().filter(|f| *f != x_field).collect();
            let mut traces = Vec::new();
            traces.extend(queued.into_iter().map(|m| format!("queued {m}")));
            traces.extend(due.into_iter().map(|m| format!("waiter deadline {m}")));
            traces.extend(others.into_iter().map(|f| format!("hash field {f}")));
            traces
        }
    };
    let mut src = raw_redis(&from.url).await;
    let mut dst = raw_redis(&to.url).await;
    let setslot = |state: &str, id: &str| {
        let mut cmd = redis::cmd("CLUSTER");
        cmd.arg("SETSLOT").arg(slot).arg(state).arg(id);
        cmd
    };
    let waiting = y.lock(&name).unwrap();
    let mut refused = 0;
    for trial in 0..30 {
        let () = setslot("IMPORTING", &from.id).query_async(&mut dst).await.unwrap();
        let () = setslot("MIGRATING", &to.id).query_async(&mut src).await.unwrap();
        let (to_url, from_url) = (to.url.clone(), from.url.clone());
        let settles = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(250)).await;
            for node in [to_url, from_url] {
                let mut c = raw_redis(&node).await;
                let () =
                    redis::cmd("CLUSTER").arg("SETSLOT").arg(slot).arg("STABLE").query_async(&mut c).await.unwrap();
            }
        });
        let outcome =
            w.on("Y's acquire(300 ms)", &name, waiting.acquire_as(OwnerId(2), Some(Duration::from_millis(300))));
        match outcome.await {
            // Unavailable: its deadline passed while the slot still said TRYAGAIN.
            Err(Error::Timeout(_) | Error::Unavailable { .. }) => refused += 1,
            other => panic!("trial {trial}: Y's acquire of a held lock: {other:?}"),
        }
        settles.await.unwrap();
        let now = traces_of_y().await;
        assert!(now.is_empty(), "trial {trial}: Y timed out, yet the server holds {now:?}");
    }
    assert_eq!(refused, 30);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let later = traces_of_y().await;
    assert!(later.is_empty(), "a second after Y's last timeout the server holds {later:?}");
    stable.restore();
    assert!(g.lost_reason().is_none(), "X lost its lock while the slot was migrating");
    w.on("X's release", &name, g.release()).await.unwrap();
}
