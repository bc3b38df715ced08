//! `redis+sentinel://` against a real Sentinel set (`scripts/services start
//! --sentinel`: one master, two replicas, three sentinels): the locks work
//! as on one server, and a failover during a held lock never lets two
//! holders believe at once, nor a token go back.
//!
//! The tests take turns (`SERIAL`): a failover would disturb the others.

mod support;

use std::time::{Duration, Instant};

use polylock::{ClientOptions, Error, LossReason, OwnerId};
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

/// A `WAIT` that replicas hold up blocks its connection until its timeout,
/// and anything written behind it there waits too. `replicas=3` with two
/// replicas: every `WAIT` waits its whole timeout. While lock A's acquire
/// is blocked in its `WAIT`, lock B's acquire must not queue behind it: its
/// script runs and its own `WAIT` blocks beside A's, so the master sees two
/// of the client's connections blocked in `WAIT` at once (one shared
/// connection can only ever have one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_held_up_by_replicas_does_not_hold_up_another_locks_requests() {
    let Some(url) = sentinel_or_skip("the blocked-WAIT test") else { return };
    let _turn = SERIAL.lock().await;
    await_replicas_in_sync(&url).await;
    let master = master_conn(&url).await;
    assert_eq!(blocked_in_wait(&master).await, 0, "a WAIT from elsewhere is blocked on the master");
    let opts = ClientOptions { request_timeout: Duration::from_secs(4), ..Default::default() };
    let c = client_with(&format!("{url}?replicas=3"), opts).await;
    // A Sentinel client's four command connections take a key by its slot
    // (runtime/src/backend/redis_lanes.rs): B is a name on another one than A.
    let lane = |name: &str| polylock_core::keyslot::key_slot(name) % 4;
    let a_name = unique("lanes-a");
    let b_name = std::iter::repeat_with(|| unique("lanes-b")).find(|b| lane(b) != lane(&a_name)).unwrap();
    let (a, b) = (c.lock(&a_name).unwrap(), c.lock(&b_name).unwrap());
    let a_task = tokio::spawn(async move { a.acquire_as(OwnerId(1), Some(Duration::from_millis(2500))).await });
    let a_waits = eventually(Duration::from_secs(3), || async { blocked_in_wait(&master).await >= 1 }).await;
    assert!(a_waits, "lock A's grant never waited for its replicas");
    let b_task = tokio::spawn(async move { b.acquire_as(OwnerId(2), Some(Duration::from_millis(2500))).await });
    let side_by_side = eventually(Duration::from_secs(3), || async { blocked_in_wait(&master).await >= 2 }).await;
    for task in [a_task, b_task] {
        match task.await.unwrap() {
            Err(Error::Unavailable { reply, .. }) => assert!(reply.contains("2 of 3 replicas"), "{reply}"),
            other => panic!("granted without the acknowledgements asked for: {other:?}"),
        }
    }
    assert!(side_by_side, "lock B's script waited behind lock A's WAIT on one connection");
}

/// How many clients the master has blocked in a `WAIT` now (`CLIENT LIST`).
async fn blocked_in_wait(master: &redis::aio::MultiplexedConnection) -> usize {
    let list: String = redis::cmd("CLIENT").arg("LIST").query_async(&mut master.clone()).await.unwrap();
    list.lines()
        .filter(|l| l.contains(" cmd=wait ") && l.split(' ').any(|f| f.starts_with("flags=") && f.contains('b')))
        .count()
}

/// `replicas=all`: every replica the master lists must acknowledge. With
/// one of its two replicas paused (SIGSTOP: still connected, so still
/// listed, but acknowledging nothing) no grant is reported, where the
/// default (one replica) is granted by the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_all_waits_for_every_replica_the_master_lists() {
    let Some(url) = sentinel_or_skip("the replicas=all test") else { return };
    let _turn = SERIAL.lock().await;
    await_replicas_in_sync(&url).await;
    let name = unique("sentinel-all");
    let opts = ClientOptions { request_timeout: Duration::from_secs(1), ..Default::default() };
    let all = client_with(&format!("{url}?replicas=all"), opts.clone()).await;
    let g = all.lock(&name).unwrap().try_acquire(Duration::from_secs(3)).await.unwrap().expect("both replicas ack");
    g.release().await.unwrap();
    let master = format!("redis://{}", master_addr(&url).await);
    let paused = PausedReplica::pause_one_of(&master).await;
    match all.lock(&name).unwrap().acquire_as(OwnerId(1), Some(Duration::from_millis(1500))).await {
        Err(Error::Unavailable { reply, .. }) => assert!(reply.contains("1 of 2 replicas"), "{reply}"),
        other => panic!("granted without every replica's acknowledgement: {other:?}"),
    }
    let default = client_with(&url, opts).await;
    let g = default.lock(&name).unwrap().try_acquire(Duration::from_secs(3)).await.unwrap().expect("one replica acks");
    g.release().await.unwrap();
    drop(paused);
    await_replicas_in_sync(&url).await;
}

/// A replica of the master SIGSTOPped, continued when dropped (also while a
/// failed test unwinds).
struct PausedReplica(libc::pid_t);

impl PausedReplica {
    async fn pause_one_of(master: &str) -> PausedReplica {
        let mut c = raw_redis(master).await;
        let info: String = redis::cmd("INFO").arg("replication").query_async(&mut c).await.unwrap();
        let port = info
            .lines()
            .find_map(|l| l.strip_prefix("slave0:"))
            .and_then(|v| v.split(',').find_map(|f| f.strip_prefix("port=")))
            .expect("the master lists a replica");
        let mut r = raw_redis(&format!("redis://127.0.0.1:{port}")).await;
        let server: String = redis::cmd("INFO").arg("server").query_async(&mut r).await.unwrap();
        let pid = server.lines().find_map(|l| l.strip_prefix("process_id:")).unwrap().trim().parse().unwrap();
        // SAFETY: a signal to a process of the test's own server set.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
        PausedReplica(pid)
    }
}

impl Drop for PausedReplica {
    fn drop(&mut self) {
        // SAFETY: as above.
        unsafe { libc::kill(self.0, libc::SIGCONT) };
    }
}

/// Sets a master's config parameter back when dropped, also while a failed
/// test unwinds (a sync connection: a drop cannot await).
struct ConfigOnDrop {
    master: String,
    param: &'static str,
    value: String,
}

impl ConfigOnDrop {
    /// Sets `param` to `value` on `master` (`redis://host:port`), keeping the old value.
    async fn set(master: &str, param: &'static str, value: &str) -> ConfigOnDrop {
        let mut c = raw_redis(master).await;
        let (_, old): (String, String) = redis::cmd("CONFIG").arg("GET").arg(param).query_async(&mut c).await.unwrap();
        let guard = ConfigOnDrop { master: master.to_owned(), param, value: old };
        let () = redis::cmd("CONFIG").arg("SET").arg(param).arg(value).query_async(&mut c).await.unwrap();
        guard
    }
}

impl Drop for ConfigOnDrop {
    fn drop(&mut self) {
        // A test failing while the master runs its busy script gets here
        // before the script ends: asked again until the master answers.
        let started = Instant::now();
        loop {
            let restored = redis::Client::open(self.master.as_str())
                .and_then(|c| c.get_connection())
                .and_then(|mut c| redis::cmd("CONFIG").arg("SET").arg(self.param).arg(&self.value).query::<()>(&mut c));
            match restored {
                Err(e) if e.code() == Some("BUSY") && started.elapsed() < Duration::from_secs(30) => {
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(e) => {
                    eprintln!("CONFIG SET {} {} on {} failed: {e}", self.param, self.value, self.master);
                    return;
                }
                Ok(()) => return,
            }
        }
    }
}

/// How many replicas the master has connected.
async fn connected_replicas(master: &str) -> usize {
    let mut c = raw_redis(master).await;
    let info: String = redis::cmd("INFO").arg("replication").query_async(&mut c).await.unwrap();
    info.lines().find_map(|l| l.strip_prefix("connected_slaves:")).and_then(|n| n.trim().parse().ok()).unwrap()
}

/// Raises the sentinels' `down-after-milliseconds` for the master while a
/// test keeps it busy on purpose (they would call a master down that only
/// answers BUSY, kill its script and fail it over), and sets it back when
/// dropped, once every sentinel has had a valid reply from the master
/// again: with a ping still unanswered from the busy time, the old value
/// would call the master down at once.
struct PatientSentinels {
    sentinels: Vec<String>,
    master: String,
    down_after: String,
}

impl PatientSentinels {
    async fn raise(url: &str, to: Duration) -> PatientSentinels {
        let (sentinels, master) = (sentinels(url), master_name(url));
        let mut first = raw_redis(&format!("redis://{}", sentinels[0])).await;
        let fields: Vec<String> =
            redis::cmd("SENTINEL").arg("MASTER").arg(&master).query_async(&mut first).await.unwrap();
        let at = fields.iter().position(|f| f == "down-after-milliseconds").unwrap();
        let patient = PatientSentinels { sentinels, master, down_after: fields[at + 1].clone() };
        for s in &patient.sentinels {
            let mut c = raw_redis(&format!("redis://{s}")).await;
            let set = redis::cmd("SENTINEL")
                .arg("SET")
                .arg(&patient.master)
                .arg("down-after-milliseconds")
                .arg(to.as_millis() as u64)
                .query_async::<()>(&mut c)
                .await;
            set.unwrap();
        }
        patient
    }

    /// Whether the sentinel at `addr` has no ping pending and a valid reply within the last second.
    fn answered(&self, addr: &str) -> bool {
        let fields: redis::RedisResult<Vec<String>> = redis::Client::open(format!("redis://{addr}"))
            .and_then(|c| c.get_connection())
            .and_then(|mut c| redis::cmd("SENTINEL").arg("MASTER").arg(&self.master).query(&mut c));
        let Ok(fields) = fields else { return false };
        let field = |name: &str| -> Option<u64> {
            let at = fields.iter().position(|f| f == name)?;
            fields.get(at + 1)?.parse().ok()
        };
        field("last-ping-sent") == Some(0) && field("last-ok-ping-reply").is_some_and(|ms| ms < 1000)
    }
}

impl Drop for PatientSentinels {
    fn drop(&mut self) {
        let started = Instant::now();
        while !self.sentinels.iter().all(|s| self.answered(s)) && started.elapsed() < Duration::from_secs(30) {
            std::thread::sleep(Duration::from_millis(100));
        }
        for s in &self.sentinels {
            let set = redis::Client::open(format!("redis://{s}")).and_then(|c| c.get_connection()).and_then(|mut c| {
                redis::cmd("SENTINEL")
                    .arg("SET")
                    .arg(&self.master)
                    .arg("down-after-milliseconds")
                    .arg(&self.down_after)
                    .query::<()>(&mut c)
            });
            if let Err(e) = set {
                eprintln!("SENTINEL SET down-after-milliseconds {} on {s} failed: {e}", self.down_after);
            }
        }
    }
}

/// How the master refuses for now.
#[derive(Debug, Clone, Copy)]
enum Refusal {
    /// `NOREPLICAS`: `min-replicas-to-write` above the replicas it has.
    NoReplicas,
    /// `BUSY`: a script running for 7 s (`BUSY` from its 50th ms on).
    Busy,
}

/// A master that refuses for now is a passing state, even when each write
/// is pipelined with its `WAIT` (Sentinel's default with replicas): A, who
/// holds `k` (lease 3 s), keeps it until its lease deadline passes
/// unrenewed, and B's `acquire("k2", 2 s)` waits to its deadline and fails
/// `Unavailable` naming the server's refusal. Never a protocol error that
/// ends a claim at once.
async fn a_refusing_master_is_waited_out(url: &str, how: Refusal) {
    await_replicas_in_sync(url).await;
    let master = format!("redis://{}", master_addr(url).await);
    let lease = Duration::from_secs(3);
    let opts = ClientOptions { lease, ..Default::default() };
    let (a, b) = (client_with(url, opts.clone()).await, client_with(url, opts).await);
    let g = a.lock(&unique("sentinel-refusing-k")).unwrap().acquire_as(OwnerId(1), None).await.unwrap();
    let loss = g.loss_watch();
    let lost = tokio::spawn(async move { loss.ended().await.map(|r| (r, Instant::now())) });
    // Dropped in reverse: the master's settings first (once it answers),
    // then the sentinels' patience (once they have heard it answer).
    let mut _patient = None;
    let mut _restore = Vec::new();
    let mut script = None;
    let code = match how {
        Refusal::NoReplicas => {
            let more = (connected_replicas(&master).await + 1).to_string();
            _restore.push(ConfigOnDrop::set(&master, "min-replicas-to-write", &more).await);
            "NOREPLICAS"
        }
        Refusal::Busy => {
            let busy_for = Duration::from_secs(7);
            _patient = Some(PatientSentinels::raise(url, busy_for + Duration::from_secs(5)).await);
            _restore.push(ConfigOnDrop::set(&master, "busy-reply-threshold", "50").await);
            // No response timeout: the script's reply takes as long as it runs.
            let config = redis::AsyncConnectionConfig::new().set_response_timeout(None);
            let mut busy = redis::Client::open(master.as_str())
                .unwrap()
                .get_multiplexed_async_connection_with_config(&config)
                .await
                .unwrap();
            // Spins until ARGV[1] ms have passed on the server's clock.
            // It writes nothing: were the test to fail, SCRIPT KILL could end it.
            let spin = "local t = redis.call('TIME') local from = t[1] * 1000 + t[2] / 1000 \
                        repeat t = redis.call('TIME') until t[1] * 1000 + t[2] / 1000 - from >= tonumber(ARGV[1]) \
                        return 1";
            let ms = busy_for.as_millis() as u64;
            script = Some(tokio::spawn(async move {
                redis::cmd("EVAL").arg(spin).arg(0).arg(ms).query_async::<i64>(&mut busy).await
            }));
            let probe = raw_redis(&master).await;
            let refusing = eventually(busy_for / 2, || {
                let mut probe = probe.clone();
                async move {
                    matches!(redis::cmd("PING").query_async::<String>(&mut probe).await, Err(e) if e.code() == Some("BUSY"))
                }
            })
            .await;
            assert!(refusing, "the master never answered BUSY");
            "BUSY"
        }
    };
    let since = Instant::now();
    let other = b.lock(&unique("sentinel-refusing-k2")).unwrap();
    match other.acquire_as(OwnerId(2), Some(Duration::from_secs(2))).await {
        Err(Error::Unavailable { reply, .. }) => assert!(reply.starts_with(code), "{how:?}: {reply}"),
        other => panic!("{how:?}: B's acquire while the master refuses: {other:?}"),
    }
    let waited = since.elapsed();
    assert!(waited >= Duration::from_millis(1950), "{how:?}: B gave up after {waited:?}, before its deadline");
    // A's last renewal confirmed before the refusals lies at most a third
    // of the lease before them: its lease lasts two thirds of one (minus
    // drift) after them at least, and it is lost only when that passes.
    let (reason, at) = tokio::time::timeout(lease * 2, lost).await.expect("A is never told").unwrap().unwrap();
    assert_eq!(reason, LossReason::LeaseExpired, "{how:?}: A's loss");
    let held = at - since;
    assert!(held >= lease / 2, "{how:?}: A was told it lost {held:?} after the refusals began, before its deadline");
    if let Some(script) = script {
        script.await.unwrap().unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_short_of_replicas_is_waited_out_not_fatal() {
    let Some(url) = sentinel_or_skip("the NOREPLICAS test") else { return };
    let _turn = SERIAL.lock().await;
    a_refusing_master_is_waited_out(&url, Refusal::NoReplicas).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_busy_with_a_script_is_waited_out_not_fatal() {
    let Some(url) = sentinel_or_skip("the BUSY test") else { return };
    let _turn = SERIAL.lock().await;
    a_refusing_master_is_waited_out(&url, Refusal::Busy).await;
}

/// Keeps the master's replicas off it while alive: each replica is given
/// a `masterauth` the master (which has no password) refuses, and their
/// links are cut. Dropped (also while a failed test unwinds), the replicas
/// get their old `masterauth` back and reconnect.
struct ReplicasApart {
    replicas: Vec<(String, String)>,
}

impl ReplicasApart {
    async fn new(master: &str) -> ReplicasApart {
        let mut m = raw_redis(master).await;
        let info: String = redis::cmd("INFO").arg("replication").query_async(&mut m).await.unwrap();
        // `slave0:ip=127.0.0.1,port=6394,state=online,...`
        let addrs: Vec<String> = info
            .lines()
            .filter(|l| l.starts_with("slave"))
            .filter_map(|l| {
                let field = |k: &str| l.split([':', ',']).find_map(|f| f.strip_prefix(k)).map(str::to_owned);
                Some(format!("redis://{}:{}", field("ip=")?, field("port=")?))
            })
            .collect();
        let mut apart = ReplicasApart { replicas: Vec::new() };
        for addr in addrs {
            let mut r = raw_redis(&addr).await;
            let (_, old): (String, String) =
                redis::cmd("CONFIG").arg("GET").arg("masterauth").query_async(&mut r).await.unwrap();
            apart.replicas.push((addr, old));
            let () = redis::cmd("CONFIG")
                .arg("SET")
                .arg("masterauth")
                .arg("not-this-masters")
                .query_async(&mut r)
                .await
                .unwrap();
        }
        let _: i64 = redis::cmd("CLIENT").arg("KILL").arg("TYPE").arg("replica").query_async(&mut m).await.unwrap();
        let alone = eventually(Duration::from_secs(10), || {
            let mut m = m.clone();
            async move {
                let role: Vec<redis::Value> = redis::cmd("ROLE").query_async(&mut m).await.unwrap();
                matches!(role.get(2), Some(redis::Value::Array(list)) if list.is_empty())
            }
        })
        .await;
        assert!(alone, "the replicas came back to the master");
        apart
    }
}

impl Drop for ReplicasApart {
    fn drop(&mut self) {
        for (addr, old) in &self.replicas {
            let set = redis::Client::open(addr.as_str())
                .and_then(|c| c.get_connection())
                .and_then(|mut c| redis::cmd("CONFIG").arg("SET").arg("masterauth").arg(old).query::<()>(&mut c));
            if let Err(e) = set {
                eprintln!("CONFIG SET masterauth on {addr} failed: {e}");
            }
        }
    }
}

/// Without `replicas=K`, grants wait for one replica whenever the master
/// has any: also for a client that connected while it had none, once
/// replicas join (Redisson refreshes its count of replicas the same way).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_that_join_after_connect_are_waited_for() {
    let Some(url) = sentinel_or_skip("the replicas-joining test") else { return };
    let _turn = SERIAL.lock().await;
    await_replicas_in_sync(&url).await;
    let master = format!("redis://{}", master_addr(&url).await);
    let c = {
        let _apart = ReplicasApart::new(&master).await;
        client(&url).await
    };
    await_replicas_in_sync(&url).await;
    let m = raw_redis(&master).await;
    let lock = c.lock(&unique("sentinel-replicas-join")).unwrap();
    let waits = eventually(Duration::from_secs(10), || {
        let (mut m, lock) = (m.clone(), lock.clone());
        async move {
            let before = command_calls(&mut m).await.get("wait").copied().unwrap_or(0);
            let g = lock.acquire().await.unwrap();
            g.release().await.unwrap();
            command_calls(&mut m).await.get("wait").copied().unwrap_or(0) > before
        }
    })
    .await;
    assert!(waits, "a client that connected to a master without replicas never waits for the replicas that joined");
}
