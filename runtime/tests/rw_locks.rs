//! Read-write locks against the real servers: readers share, a writer
//! excludes, a waiting writer blocks new readers, downgrade works and
//! upgrade is refused at once, every grant is fenced, nothing is left behind.

use crate::support;

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use polylock::{Error, LockMode, OwnerId};
use support::*;

/// What a test finds of the lock on the server once everyone released.
async fn leftovers(backend: &str, url: &str, name: &str) -> Vec<String> {
    if backend == "redis" {
        redis_leftovers(url, name).await
    } else {
        zk_children(url, name).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_share_and_a_writer_excludes_them() {
    for (backend, url) in backends() {
        let name = unique("rw-share");
        let (a, b) = (client(&url).await, client(&url).await);
        let (rw_a, rw_b) = (a.rw_lock(&name).unwrap(), b.rw_lock(&name).unwrap());
        // Two clients, and two owners of one client, read at once.
        let r1 = rw_a.read().acquire_as(OwnerId(1), Some(Duration::ZERO)).await.unwrap();
        let r2 = rw_a.read().acquire_as(OwnerId(2), Some(Duration::ZERO)).await.unwrap();
        let r3 = rw_b.read().acquire_as(OwnerId(1), Some(Duration::ZERO)).await.unwrap();
        assert_eq!(rw_a.read().hold_count(OwnerId(1)), 1, "{backend}");
        assert!(rw_a.read().is_held_locally(), "{backend}");
        assert!(!rw_a.write().is_held_locally(), "{backend}: readers shown as a write hold");
        assert_eq!(rw_a.write().hold_count(OwnerId(1)), 0, "{backend}: a read hold is not a write hold");
        match rw_b.write().acquire_as(OwnerId(9), Some(Duration::ZERO)).await {
            Err(Error::WouldBlock(n)) => assert_eq!(n, name),
            other => panic!("{backend}: a writer got in beside readers: {other:?}"),
        }
        for g in [r1, r2, r3] {
            g.release().await.unwrap();
        }
        let w = rw_b.write().acquire_as(OwnerId(9), Some(Duration::ZERO)).await.unwrap();
        for (who, rw) in [("another client", &rw_a), ("the writer's client", &rw_b)] {
            match rw.read().acquire_as(OwnerId(5), Some(Duration::ZERO)).await {
                Err(Error::WouldBlock(_)) => {}
                other => panic!("{backend}: a reader of {who} got in beside a writer: {other:?}"),
            }
        }
        match rw_a.write().acquire_as(OwnerId(5), Some(Duration::ZERO)).await {
            Err(Error::WouldBlock(_)) => {}
            other => panic!("{backend}: two writers: {other:?}"),
        }
        w.release().await.unwrap();
        assert!(leftovers(backend, &url, &name).await.is_empty(), "{backend}: left behind");
    }
}

/// Both anchors prefer a waiting writer over new readers; so do we: a
/// stream of readers cannot starve a writer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_writer_blocks_new_readers() {
    for (backend, url) in backends() {
        let name = unique("rw-starve");
        let (a, b, c) = (client(&url).await, client(&url).await, client(&url).await);
        let first = a.rw_lock(&name).unwrap().read().acquire().await.unwrap();
        let writer = b.rw_lock(&name).unwrap();
        let waiting = tokio::spawn(async move {
            let g = writer.write().acquire().await.unwrap();
            let token = g.fencing_token();
            g.release().await.unwrap();
            token
        });
        // The writer is queued once a try by a fresh reader fails.
        let late = c.rw_lock(&name).unwrap();
        let blocked = eventually(Duration::from_secs(5), || async {
            matches!(late.read().acquire_as(OwnerId(3), Some(Duration::ZERO)).await, Err(Error::WouldBlock(_)))
        })
        .await;
        assert!(blocked, "{backend}: a new reader got in ahead of a waiting writer");
        assert!(!waiting.is_finished(), "{backend}: the writer got in beside a reader");
        let read_token = first.fencing_token();
        first.release().await.unwrap();
        let write_token = tokio::time::timeout(Duration::from_secs(5), waiting).await.unwrap().unwrap();
        assert!(write_token > read_token, "{backend}: tokens went back ({read_token} then {write_token})");
        // And a reader gets in once the writer is gone.
        late.read().acquire_as(OwnerId(3), Some(Duration::from_secs(5))).await.unwrap().release().await.unwrap();
        assert!(leftovers(backend, &url, &name).await.is_empty(), "{backend}: left behind");
    }
}

/// A writer may take the read lock and keep it after the write release
/// (Curator's and Redisson's downgrade); while it reads, no writer gets in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_downgrades_and_keeps_its_read_hold() {
    for (backend, url) in backends() {
        let name = unique("rw-down");
        let (a, b) = (client(&url).await, client(&url).await);
        let rw = a.rw_lock(&name).unwrap();
        let me = OwnerId(1);
        let w = rw.write().acquire_as(me, Some(Duration::ZERO)).await.unwrap();
        // A writer queued behind us, before the downgrade.
        let other = b.rw_lock(&name).unwrap();
        let queued = {
            let other = other.clone();
            tokio::spawn(async move { other.write().acquire_as(OwnerId(2), None).await.map(|g| g.into_token()) })
        };
        tokio::time::sleep(Duration::from_millis(200)).await;
        let r = rw.read().acquire_as(me, Some(Duration::from_secs(2))).await.unwrap();
        let read_token = r.fencing_token();
        assert!(read_token >= w.fencing_token(), "{backend}: the downgrade's token went back");
        w.release().await.unwrap();
        assert_eq!(rw.read().hold_count(me), 1, "{backend}: the read hold outlives the write hold");
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(!queued.is_finished(), "{backend}: a writer got in while the downgraded reader reads");
        // A new reader queues behind the waiting writer, downgrade or not.
        match other.read().acquire_as(OwnerId(3), Some(Duration::ZERO)).await {
            Err(Error::WouldBlock(_)) => {}
            other => panic!("{backend}: a new reader got in ahead of a waiting writer: {other:?}"),
        }
        r.release().await.unwrap();
        let token = tokio::time::timeout(Duration::from_secs(5), queued).await.unwrap().unwrap().unwrap();
        // Queued before the downgrade, granted after it: its token must
        // exceed the downgraded read's, or a fencing resource refuses it.
        assert!(token > read_token, "{backend}: writer token {token} after the downgraded read's {read_token}");
        other.write().release_as(OwnerId(2)).await.unwrap();
        assert!(leftovers(backend, &url, &name).await.is_empty(), "{backend}: left behind");
    }
}

/// Read to write is refused at once with a typed error (in Curator and
/// Redisson it waits for itself forever), and leaves nothing on the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upgrade_is_refused_at_once() {
    for (backend, url) in backends() {
        let name = unique("rw-up");
        let c = client(&url).await;
        let rw = c.rw_lock(&name).unwrap();
        let r = rw.read().acquire().await.unwrap();
        let before = leftovers(backend, &url, &name).await;
        let started = std::time::Instant::now();
        let refused = tokio::time::timeout(Duration::from_secs(2), rw.write().acquire()).await;
        match refused.expect("the upgrade waits for itself") {
            Err(e @ Error::UpgradeRefused(_)) => {
                assert_eq!(e.kind().as_str(), "upgrade_refused");
                assert_eq!(e.lock_name(), Some(name.as_str()));
            }
            other => panic!("{backend}: {other:?}"),
        }
        assert!(started.elapsed() < Duration::from_millis(100), "{backend}: not refused at once");
        assert_eq!(leftovers(backend, &url, &name).await, before, "{backend}: the refused upgrade left something");
        // Another owner of the same client is not refused: it waits, as any writer.
        assert!(matches!(rw.write().acquire_as(OwnerId(77), Some(Duration::ZERO)).await, Err(Error::WouldBlock(_))));
        r.release().await.unwrap();
        rw.write().acquire().await.unwrap().release().await.unwrap();
        assert!(leftovers(backend, &url, &name).await.is_empty(), "{backend}: left behind");
    }
}

/// Readers and writers over three clients: never a writer with anyone
/// else inside, and the tokens of the writers' grants only grow.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn readers_and_writers_never_overlap() {
    for (backend, url) in backends() {
        let name = unique("rw-mix");
        let readers = Arc::new(AtomicI64::new(0));
        let writers = Arc::new(AtomicI64::new(0));
        let reads = Arc::new(AtomicI64::new(0));
        let mut tasks = Vec::new();
        let mut clients = Vec::new();
        for c in 0..3 {
            let client = client(&url).await;
            for t in 0..4 {
                let rw = client.rw_lock(&name).unwrap();
                let (readers, writers, reads) = (readers.clone(), writers.clone(), reads.clone());
                tasks.push(tokio::spawn(async move {
                    let mut last_write = 0;
                    for i in 0..6 {
                        if (c + t + i) % 3 == 0 {
                            let g = rw.write().acquire().await.unwrap();
                            assert!(g.fencing_token() > last_write, "write tokens went back");
                            last_write = g.fencing_token();
                            assert_eq!(writers.fetch_add(1, Ordering::SeqCst), 0, "two writers inside");
                            assert_eq!(readers.load(Ordering::SeqCst), 0, "a writer beside a reader");
                            tokio::time::sleep(Duration::from_millis(2)).await;
                            writers.fetch_sub(1, Ordering::SeqCst);
                            g.release().await.unwrap();
                        } else {
                            let g = rw.read().acquire().await.unwrap();
                            readers.fetch_add(1, Ordering::SeqCst);
                            assert_eq!(writers.load(Ordering::SeqCst), 0, "a reader beside a writer");
                            reads.fetch_add(1, Ordering::SeqCst);
                            tokio::time::sleep(Duration::from_millis(2)).await;
                            readers.fetch_sub(1, Ordering::SeqCst);
                            g.release().await.unwrap();
                        }
                    }
                }));
            }
            clients.push(client);
        }
        for t in tasks {
            tokio::time::timeout(Duration::from_secs(60), t).await.expect("stalled").expect("an invariant broke");
        }
        assert!(reads.load(Ordering::SeqCst) > 0);
        assert!(
            eventually(Duration::from_secs(5), || async { leftovers(backend, &url, &name).await.is_empty() }).await,
            "{backend}: left behind"
        );
    }
}

/// ZooKeeper: Curator's `InterProcessReadWriteLock` nodes, the token is the
/// node's czxid, and a downgrade's read node carries the writer's sequence.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_layout_is_curators() {
    let url = zk_url();
    let name = unique("rw-layout");
    let c = client(&url).await;
    let rw = c.rw_lock(&name).unwrap();
    assert_eq!(rw.read().mode(), LockMode::Read);
    let w = rw.write().acquire().await.unwrap();
    let r = rw.read().acquire().await.unwrap();
    let kids = zk_children(&url, &name).await;
    assert_eq!(kids.len(), 2, "{kids:?}");
    let writer = kids.iter().find(|k| k.contains("-__WRIT__")).expect("a writer node");
    let reader = kids.iter().find(|k| k.contains("-__READ__")).expect("a reader node");
    for node in [writer, reader] {
        assert!(node.starts_with("_c_") && node[3..39].len() == 36, "{node}");
    }
    assert_eq!(writer.rsplit("__WRIT__").next(), reader.rsplit("__READ__").next(), "the downgrade's sequence");
    let raw = raw_zk(&url).await;
    let (_, stat) = raw.get_data(&format!("{name}/{writer}")).await.unwrap();
    assert_eq!(stat.czxid as u64, w.fencing_token());
    let (_, stat) = raw.get_data(&format!("{name}/{reader}")).await.unwrap();
    assert_ne!(stat.ephemeral_owner, 0, "an ephemeral node");
    // A downgrade's grant carries the write hold's token, not its newer node's czxid.
    assert_eq!(r.fencing_token(), w.fencing_token());
    w.release().await.unwrap();
    r.release().await.unwrap();
    // Any other read grant: its node's czxid.
    let r = rw.read().acquire().await.unwrap();
    let reader = zk_children(&url, &name).await.pop().unwrap();
    let (_, stat) = raw.get_data(&format!("{name}/{reader}")).await.unwrap();
    assert_eq!(stat.czxid as u64, r.fencing_token());
    r.release().await.unwrap();
    assert!(zk_children(&url, &name).await.is_empty());
}

/// Redis: Redisson's `RReadWriteLock` layout: a hash at the name with
/// `mode`, a field per reader and `<id>:write` for the writer, a timeout key
/// per reader with its lease; the fence counter grows across both halves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_layout_is_redissons() {
    let url = redis_url();
    let name = unique("rw-layout");
    let c = client(&url).await;
    let rw = c.rw_lock(&name).unwrap();
    let mut raw = raw_redis(&url).await;
    let hash = |raw: &mut redis::aio::MultiplexedConnection| {
        let name = name.clone();
        let mut raw = raw.clone();
        async move {
            let h: std::collections::HashMap<String, String> =
                redis::cmd("HGETALL").arg(&name).query_async(&mut raw).await.unwrap();
            h
        }
    };
    let (r1, r2) = (OwnerId(1), OwnerId(2));
    let g1 = rw.read().acquire_as(r1, None).await.unwrap();
    let g2 = rw.read().acquire_as(r2, None).await.unwrap();
    let h = hash(&mut raw).await;
    assert_eq!(h.get("mode").map(String::as_str), Some("read"), "{h:?}");
    assert_eq!(h.get(&rw.read().holder_id(r1)).map(String::as_str), Some("1"), "{h:?}");
    assert_eq!(h.len(), 3, "mode and two readers: {h:?}");
    let timeout = format!("{{{name}}}:{}:rwlock_timeout:1", rw.read().holder_id(r1));
    let ttl: i64 = redis::cmd("PTTL").arg(&timeout).query_async(&mut raw).await.unwrap();
    assert!(ttl > 25_000 && ttl <= 30_000, "{timeout}: {ttl}");
    let read_token = g2.fencing_token();
    assert!(read_token > g1.fencing_token());
    g1.release().await.unwrap();
    let n: i64 = redis::cmd("EXISTS").arg(&timeout).query_async(&mut raw).await.unwrap();
    assert_eq!(n, 0, "a released reader's timeout key stays");
    g2.release().await.unwrap();
    let w = rw.write().acquire_as(r1, None).await.unwrap();
    assert!(w.fencing_token() > read_token, "one token sequence for both halves");
    let h = hash(&mut raw).await;
    assert_eq!(h.get("mode").map(String::as_str), Some("write"), "{h:?}");
    assert_eq!(h.get(&format!("{}:write", rw.write().holder_id(r1))).map(String::as_str), Some("1"), "{h:?}");
    w.release().await.unwrap();
    assert!(redis_leftovers(&url, &name).await.is_empty());
}

/// Redis: readers queued behind a writer are all granted when it releases
/// (the release hands the lock to each, in Redisson's layout, with tokens
/// above the writer's), and a Redisson-shaped reader's hold (count 2, with
/// its timeout keys) keeps our writer out and survives our reader's release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_handoff_and_a_redisson_reader() {
    let url = redis_url();
    let name = unique("rw-hand");
    let (a, b, c) = (client(&url).await, client(&url).await, client(&url).await);
    let w = a.rw_lock(&name).unwrap().write().acquire().await.unwrap();
    let readers: Vec<_> = [&b, &c]
        .into_iter()
        .map(|cl| {
            let rw = cl.rw_lock(&name).unwrap();
            tokio::spawn(async move { rw.read().acquire().await.map(|g| g.into_token()) })
        })
        .collect();
    let mut raw = raw_redis(&url).await;
    let queue = format!("polylock_rwqueue:{{{name}}}");
    let queued = eventually(Duration::from_secs(5), || {
        let (mut raw, queue) = (raw.clone(), queue.clone());
        async move { redis::cmd("ZCARD").arg(&queue).query_async::<i64>(&mut raw).await.unwrap() == 2 }
    })
    .await;
    assert!(queued, "both readers queue behind the writer");
    let token = w.fencing_token();
    w.release().await.unwrap();
    for r in readers {
        let t = tokio::time::timeout(Duration::from_secs(5), r).await.unwrap().unwrap().unwrap();
        assert!(t > token, "a reader's token {t} is not above the writer's {token}");
    }
    // Both hold now: the release granted them, in Redisson's layout.
    let fields: i64 = redis::cmd("HLEN").arg(&name).query_async(&mut raw).await.unwrap();
    assert_eq!(fields, 3, "mode and two readers");
    // Closing a client gives back its holds.
    b.close().await;
    c.close().await;
    assert!(
        eventually(Duration::from_secs(5), || async { redis_leftovers(&url, &name).await.is_empty() }).await,
        "left behind"
    );

    // A Redisson reader (uuid:thread, count 2, its two timeout keys) holds.
    let name = unique("rw-redisson");
    let field = "3f1c9a7e-0000-4000-8000-000000000001:77";
    let _: () = redis::pipe()
        .cmd("HSET")
        .arg(&name)
        .arg("mode")
        .arg("read")
        .arg(field)
        .arg(2)
        .ignore()
        .cmd("PEXPIRE")
        .arg(&name)
        .arg(30_000)
        .ignore()
        .cmd("SET")
        .arg(format!("{{{name}}}:{field}:rwlock_timeout:1"))
        .arg(1)
        .arg("PX")
        .arg(30_000)
        .ignore()
        .cmd("SET")
        .arg(format!("{{{name}}}:{field}:rwlock_timeout:2"))
        .arg(1)
        .arg("PX")
        .arg(30_000)
        .ignore()
        .query_async(&mut raw)
        .await
        .unwrap();
    let rw = a.rw_lock(&name).unwrap();
    match rw.write().acquire_as(OwnerId(1), Some(Duration::ZERO)).await {
        Err(Error::WouldBlock(_)) => {}
        other => panic!("our writer beside a Redisson reader: {other:?}"),
    }
    let ours = rw.read().acquire_as(OwnerId(2), Some(Duration::ZERO)).await.unwrap();
    ours.release().await.unwrap();
    let count: Option<i64> = redis::cmd("HGET").arg(&name).arg(field).query_async(&mut raw).await.unwrap();
    assert_eq!(count, Some(2), "our reader's release touched Redisson's hold");
    let _: i64 = redis::cmd("DEL").arg(&name).query_async(&mut raw).await.unwrap();
}

/// A Redisson-shaped reader's hold: field `field` with count 1 and its
/// timeout key, both living `ms`.
async fn redisson_reader(raw: &mut redis::aio::MultiplexedConnection, name: &str, field: &str, ms: i64) {
    let _: () = redis::pipe()
        .cmd("HSET")
        .arg(name)
        .arg("mode")
        .arg("read")
        .arg(field)
        .arg(1)
        .ignore()
        .cmd("SET")
        .arg(format!("{{{name}}}:{field}:rwlock_timeout:1"))
        .arg(1)
        .arg("PX")
        .arg(ms)
        .ignore()
        .query_async(raw)
        .await
        .unwrap();
}

/// Redisson's read unlock of a reader holding once (RedissonReadLock's
/// script): its field and key go, the hash lives as long as the longest
/// remaining reader's timeout key, and with none alive it is deleted and
/// `0` published on `redisson_rwlock:{name}`.
const REDISSON_READ_UNLOCK: &str = r#"
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('DEL', KEYS[2] .. ':' .. ARGV[1] .. ':rwlock_timeout:1')
local max = -3
for _, f in ipairs(redis.call('HKEYS', KEYS[1])) do
  local n = tonumber(redis.call('HGET', KEYS[1], f))
  if type(n) == 'number' then
    for i = n, 1, -1 do
      max = math.max(max, redis.call('PTTL', KEYS[2] .. ':' .. f .. ':rwlock_timeout:' .. i))
    end
  end
end
if max > 0 then
  redis.call('PEXPIRE', KEYS[1], max)
  return 0
end
if redis.call('HGET', KEYS[1], 'mode') == 'write' then return 0 end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', KEYS[3], '0')
return 1
"#;

/// Issue 46, item 4: a Redisson reader's renewal sets every reader's
/// timeout key to its own watchdog time; once ours ran out, a Redisson
/// reader's unlock judges our reader dead and lets a writer in. Our
/// renewal must make the key again and tell our reader it lost the lock,
/// so a waiting writer is never granted before our reader is told. (The
/// key running out is done here by deleting it; our lease is 3 s, renewed
/// every second.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_a_reader_whose_timeout_key_ran_out_is_told_before_a_writer_gets_in() {
    let url = redis_url();
    let name = unique("rw-watchdog");
    let ours = client_with(&url, polylock::ClientOptions { lease: Duration::from_secs(3), ..Default::default() }).await;
    let writer = client(&url).await;
    let mut raw = raw_redis(&url).await;
    let redisson = "3f1c9a7e-0000-4000-8000-000000000002:1";
    redisson_reader(&mut raw, &name, redisson, 30_000).await;
    let rw = ours.rw_lock(&name).unwrap();
    let reader = rw.read().acquire().await.unwrap();
    let key = format!("{{{name}}}:{}:rwlock_timeout:1", rw.read().holder_id(reader.owner()));
    let w = writer.rw_lock(&name).unwrap();
    let waiting = tokio::spawn(async move { w.write().try_acquire(Duration::from_secs(20)).await });
    // The Redisson watchdog's doing: our key ran out while our field holds.
    let _: i64 = redis::cmd("DEL").arg(&key).query_async(&mut raw).await.unwrap();
    // Our next renewal (within a second) tells us; without the fix it never does.
    let told = tokio::time::timeout(Duration::from_secs(5), reader.lost()).await;
    // The Redisson reader unlocks: with our key gone it would free the lock.
    let _: i64 = redis::Script::new(REDISSON_READ_UNLOCK)
        .key(&name)
        .key(format!("{{{name}}}"))
        .key(format!("redisson_rwlock:{{{name}}}"))
        .arg(redisson)
        .invoke_async(&mut raw)
        .await
        .unwrap();
    let granted = tokio::time::timeout(Duration::from_secs(10), waiting).await.unwrap().unwrap().unwrap();
    let told_at_grant = reader.lost_reason();
    assert!(granted.is_some(), "the writer was never granted");
    assert!(told_at_grant.is_some(), "a writer was granted while our reader still believed it held the lock");
    assert!(told.is_ok(), "our reader was not told within 5 s");
    drop(granted);
    let _ = reader.release().await;
    writer.close().await;
    ours.close().await;
}

/// Redisson's read renewal (RedissonReadLock's watchdog script): while
/// reader `ARGV[2]` holds, the hash and every reader's timeout key get
/// `ARGV[1]` ms, whatever they had.
const REDISSON_READ_RENEW: &str = r#"
if redis.call('HEXISTS', KEYS[1], ARGV[2]) == 0 then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[1])
for _, f in ipairs(redis.call('HKEYS', KEYS[1])) do
  local n = tonumber(redis.call('HGET', KEYS[1], f))
  if type(n) == 'number' then
    for i = n, 1, -1 do
      redis.call('PEXPIRE', KEYS[2] .. ':' .. f .. ':rwlock_timeout:' .. i, ARGV[1])
    end
  end
end
return 1
"#;

/// Issue 46, item 4, the cut itself: a Redisson reader's watchdog (here
/// 900 ms, every 300 ms) keeps cutting the hash and our reader's timeout
/// key below our renewal interval (lease 6 s: every 2 s). Once it unlocks,
/// the hash lives only as long as our cut key. Our renewal reports the cut,
/// and our reader renews by it, so the server never drops our reader while
/// it believes it holds (without that, the hash ran out about 3.9 s in and
/// our reader heard of it at its renewal 4 s in).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_a_reader_renews_by_a_redisson_watchdogs_cut() {
    let url = redis_url();
    let name = unique("rw-cut");
    let ours = client_with(&url, polylock::ClientOptions { lease: Duration::from_secs(6), ..Default::default() }).await;
    let writer = client(&url).await;
    let mut raw = raw_redis(&url).await;
    let redisson = "3f1c9a7e-0000-4000-8000-000000000004:1";
    redisson_reader(&mut raw, &name, redisson, 900).await;
    let rw = ours.rw_lock(&name).unwrap();
    let reader = rw.read().acquire().await.unwrap();
    let start = tokio::time::Instant::now();
    let field = rw.read().holder_id(reader.owner());
    let watchdog = {
        let (mut raw, name) = (raw.clone(), name.clone());
        tokio::spawn(async move {
            loop {
                let _: i64 = redis::Script::new(REDISSON_READ_RENEW)
                    .key(&name)
                    .key(format!("{{{name}}}"))
                    .arg(900)
                    .arg(redisson)
                    .invoke_async(&mut raw)
                    .await
                    .unwrap();
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
        })
    };
    let w = writer.rw_lock(&name).unwrap();
    let waiting =
        tokio::spawn(async move { w.write().try_acquire(Duration::from_secs(20)).await.map(|g| g.is_some()) });
    tokio::time::sleep_until(start + Duration::from_secs(3)).await;
    watchdog.abort();
    let _ = watchdog.await;
    let _: i64 = redis::Script::new(REDISSON_READ_UNLOCK)
        .key(&name)
        .key(format!("{{{name}}}"))
        .key(format!("redisson_rwlock:{{{name}}}"))
        .arg(redisson)
        .invoke_async(&mut raw)
        .await
        .unwrap();
    while start.elapsed() < Duration::from_millis(4_500) {
        // Dropped first, not told after: the server let go of a reader that still believes it holds.
        let kept: bool = redis::cmd("HEXISTS").arg(&name).arg(&field).query_async(&mut raw).await.unwrap();
        let told = reader.lost_reason();
        assert!(
            kept || told.is_some(),
            "{} ms in, the server dropped our reader, which still believes it holds the lock",
            start.elapsed().as_millis()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(reader.lost_reason().is_none(), "our reader, renewing by the cut, lost the lock");
    assert!(!waiting.is_finished(), "the writer got in beside our reader");
    reader.release().await.unwrap();
    let granted = tokio::time::timeout(Duration::from_secs(5), waiting).await;
    assert!(matches!(granted, Ok(Ok(Ok(true)))), "the writer after our release: {granted:?}");
    writer.close().await;
    ours.close().await;
}

/// Issue 46: a reader that crashed leaves its field in the hash, and its
/// timeout key runs out. The last live reader's release removes it, as
/// Redisson's read unlock does, so a waiting writer is granted at once, not
/// when the hash's expiry (the longest lease) passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_a_crashed_readers_field_goes_with_the_last_live_reader() {
    let url = redis_url();
    let name = unique("rw-crashed");
    let (a, b) = (client(&url).await, client(&url).await);
    let mut raw = raw_redis(&url).await;
    let reader = a.rw_lock(&name).unwrap().read().acquire().await.unwrap();
    // A crashed reader: its field, and no timeout key any more.
    let _: i64 = redis::cmd("HSET")
        .arg(&name)
        .arg("3f1c9a7e-0000-4000-8000-000000000003:1")
        .arg(1)
        .query_async(&mut raw)
        .await
        .unwrap();
    let w = b.rw_lock(&name).unwrap();
    let waiting =
        tokio::spawn(
            async move { w.write().try_acquire(Duration::from_secs(10)).await.map(|g| g.map(|g| g.into_token())) },
        );
    let queue = format!("polylock_rwqueue:{{{name}}}");
    let queued = eventually(Duration::from_secs(5), || {
        let (mut raw, queue) = (raw.clone(), queue.clone());
        async move { redis::cmd("ZCARD").arg(&queue).query_async::<i64>(&mut raw).await.unwrap() == 1 }
    })
    .await;
    assert!(queued, "the writer did not queue");
    reader.release().await.unwrap();
    let granted = tokio::time::timeout(Duration::from_secs(3), waiting).await;
    assert!(
        matches!(granted, Ok(Ok(Ok(Some(_))))),
        "the writer was not granted within 3 s of the last live reader's release: {granted:?}"
    );
    a.close().await;
    b.close().await;
    assert!(
        eventually(Duration::from_secs(5), || async { redis_leftovers(&url, &name).await.is_empty() }).await,
        "left behind: {:?}",
        redis_leftovers(&url, &name).await
    );
}
