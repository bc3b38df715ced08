//! The measurements beyond single-operation latency: cross-process handoff,
//! an idle client's CPU, server commands per handoff as waiters grow (the
//! herd test), throughput over many locks, and client memory and threads
//! with many locks.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use polylock::trace::{now_ns, Hop};
use polylock::{Client, ClientOptions, OwnerId};

/// Redis: records when a message on any waiter channel of `name` reaches
/// this process, on a raw `PSUBSCRIBE` socket read by a thread of its own
/// (blocked in `read`, so it stamps the arrival without waiting for a
/// scheduler): where the handoff's time goes, server side against client side.
fn stamp_pushes(url: &str, name: &str) -> Arc<AtomicU64> {
    let at = Arc::new(AtomicU64::new(0));
    let Some(addr) = url.strip_prefix("redis://").and_then(|r| r.split('/').next()) else { return at };
    let keys = polylock_core::redis::RedisKeys::of(&polylock_core::LockName::new(name).unwrap());
    let pattern = format!("{}:*", keys.channel());
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_nodelay(true).unwrap();
    write!(s, "*2\r\n$10\r\nPSUBSCRIBE\r\n${}\r\n{pattern}\r\n", pattern.len()).unwrap();
    let mut buf = [0u8; 4096];
    let _ = std::io::Read::read(&mut s, &mut buf).unwrap(); // the confirmation
    let stamp = at.clone();
    std::thread::spawn(move || {
        while matches!(std::io::Read::read(&mut s, &mut buf), Ok(n) if n > 0) {
            stamp.store(now_ns(), Ordering::SeqCst);
        }
    });
    at
}

/// The child side of the handoff test: wait, print the grant time (and,
/// on Redis, when the handoff's message reached this process), this
/// process's CPU time so far, release, pause.
pub async fn handoff_waiter(url: &str, name: &str) {
    let pushed = stamp_pushes(url, name);
    let client = Client::connect(url).await.unwrap();
    let lock = client.lock(name).unwrap();
    let stdin = std::io::stdin();
    let mut line = String::new();
    loop {
        line.clear();
        // The parent says "go" when it holds the lock; we then block on it.
        if stdin.lock().read_line(&mut line).unwrap() == 0 || line.trim() == "stop" {
            break;
        }
        let g = lock.acquire_as(OwnerId(2), None).await.unwrap();
        let t = now_ns();
        g.release().await.unwrap();
        // The waiter's client's own hops for that message (polylock::trace).
        let hops = Hop::ALL.map(|hop| polylock::trace::last(hop).to_string()).join(" ");
        let cpu_ns = crate::cpu::process().as_nanos();
        println!("{t} {} {cpu_ns} {hops}", pushed.load(Ordering::SeqCst));
        std::io::stdout().flush().unwrap();
    }
    client.close().await;
}

/// One handoff's times from the holder's release call: the waiter's
/// acquire returned (`granted`), the holder's release returned
/// (`released`), the message reached the waiter's process (`pushed`, Redis only).
pub struct HandoffTimes {
    pub granted: Vec<Duration>,
    pub released: Vec<Duration>,
    pub pushed: Vec<Duration>,
    /// When the waiter's client passed each of [`Hop::ALL`] for the handoff's
    /// message (Redis only; those handoffs whose stamps all came after the
    /// release call).
    pub hops: [Vec<Duration>; 5],
    /// Redis: a raw PING from this process after the same 20 ms of quiet
    /// that precede each handoff (the floor of a request that wakes idle
    /// threads on both sides, which a hot PING loop never does).
    pub cold_ping: Vec<Duration>,
    /// CPU over the timed rounds: both processes' (client) and the server's.
    pub cpu: crate::cpu::Tally,
}

/// Holder in this process, waiter in another: time from the release call
/// to the waiter's acquire returning, and where it went.
pub async fn handoff(exe: &std::path::Path, url: &str, name: &str, n: usize) -> HandoffTimes {
    let mut child = Command::new(exe)
        .args(["--handoff-waiter", url, name])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut to_child = child.stdin.take().unwrap();
    let mut from_child = BufReader::new(child.stdout.take().unwrap());
    let client = Client::connect(url).await.unwrap();
    let lock = client.lock(name).unwrap();
    let mut out = HandoffTimes {
        granted: Vec::new(),
        released: Vec::new(),
        pushed: Vec::new(),
        hops: Default::default(),
        cold_ping: Vec::new(),
        cpu: crate::cpu::Tally::default(),
    };
    let mut server = crate::cpu::Server::of(url).await;
    // CPU at the start of the timed rounds: the server's, this process's, and
    // the waiter's as it printed it at the end of the last warm-up round.
    let mut start = (None, Duration::ZERO, Duration::ZERO);
    let mut waiter_cpu = Duration::ZERO;
    let mut raw = match url.starts_with("redis://") {
        true => Some(redis::Client::open(url).unwrap().get_multiplexed_async_connection().await.unwrap()),
        false => None,
    };
    for i in 0..n + 5 {
        if i == 5 {
            start = (server.cpu().await, crate::cpu::process(), waiter_cpu);
        }
        if let Some(raw) = raw.as_mut() {
            tokio::time::sleep(Duration::from_millis(20)).await;
            let t = Instant::now();
            let _: String = redis::cmd("PING").query_async(raw).await.unwrap();
            out.cold_ping.push(t.elapsed());
        }
        let g = lock.acquire_as(OwnerId(1), None).await.unwrap();
        writeln!(to_child, "go").unwrap();
        // Let the waiter reach the server and block.
        tokio::time::sleep(Duration::from_millis(20)).await;
        let t0 = now_ns();
        g.release().await.unwrap();
        let released = now_ns();
        let mut line = String::new();
        from_child.read_line(&mut line).unwrap();
        let mut stamps = line.split_whitespace().map(|v| v.parse::<u64>().unwrap());
        let (t1, pushed) = (stamps.next().unwrap(), stamps.next().unwrap_or(0));
        waiter_cpu = Duration::from_nanos(stamps.next().unwrap());
        let hops: Vec<u64> = stamps.collect();
        if i >= 5 {
            out.granted.push(Duration::from_nanos(t1.saturating_sub(t0)));
            out.released.push(Duration::from_nanos(released.saturating_sub(t0)));
            if pushed > t0 {
                out.pushed.push(Duration::from_nanos(pushed - t0));
            }
            if pushed > t0 && hops.len() == Hop::ALL.len() && hops.iter().all(|&h| h > t0) {
                for (times, h) in out.hops.iter_mut().zip(hops) {
                    times.push(Duration::from_nanos(h - t0));
                }
            }
        }
    }
    let client_cpu = crate::cpu::process().saturating_sub(start.1) + waiter_cpu.saturating_sub(start.2);
    let server_cpu = match (start.0, server.cpu().await) {
        (Some(a), Some(b)) => Some(b.saturating_sub(a)),
        _ => None,
    };
    out.cpu.add(client_cpu, server_cpu, n);
    writeln!(to_child, "stop").unwrap();
    let _ = child.wait();
    client.close().await;
    out
}

/// An idle client's cost: one client connected and holding `locks` locks
/// (the default lease, so its renewals run), making no calls, over
/// `seconds`; in % of one core, this process's and the server's.
pub struct Idle {
    pub locks: usize,
    pub seconds: f64,
    pub client_core_pct: f64,
    pub server_core_pct: Option<f64>,
}

pub async fn idle(url: &str, prefix: &str, seconds: u64) -> Idle {
    const LOCKS: usize = 100;
    let client = Client::connect(url).await.unwrap();
    let mut guards = Vec::with_capacity(LOCKS);
    for i in 0..LOCKS {
        guards.push(client.lock(&format!("{prefix}/{i}")).unwrap().acquire_as(OwnerId(1), None).await.unwrap());
    }
    // The acquires' aftermath (replies, timers armed) settles first.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut server = crate::cpu::Server::of(url).await;
    let (s0, c0, t0) = (server.cpu().await, crate::cpu::process(), Instant::now());
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    let (c1, t1) = (crate::cpu::process(), t0.elapsed());
    let s1 = server.cpu().await;
    for g in guards {
        g.release().await.unwrap();
    }
    client.close().await;
    let pct = |d: Duration| d.as_secs_f64() / t1.as_secs_f64() * 100.0;
    Idle {
        locks: LOCKS,
        seconds: t1.as_secs_f64(),
        client_core_pct: pct(c1.saturating_sub(c0)),
        server_core_pct: s0.zip(s1).map(|(a, b)| pct(b.saturating_sub(a))),
    }
}

/// The floor of a ZooKeeper handoff, raw: any ZooKeeper lock hands over by
/// the holder's delete (a write: the leader logs it before it answers) and
/// the watch event it fires on the waiter's session. Two sessions of this
/// process: the holder's creates a node and the waiter's watches it
/// (`exists` with a watch); after the same 20 ms of quiet as a handoff, the
/// holder deletes it, and the time to the waiter's event is the floor.
/// Each round also times one `exists` after 20 ms of quiet (the cold
/// round trip). Returns (cold exists, delete to event).
pub async fn zk_handoff_floor(url: &str, path: &str, n: usize) -> (Vec<Duration>, Vec<Duration>) {
    use zookeeper_client as zk;
    let hp = url.strip_prefix("zk://").unwrap_or(url).split('/').next().unwrap().to_owned();
    let holder = zk::Client::connect(&hp).await.unwrap();
    let waiter = zk::Client::connect(&hp).await.unwrap();
    let mode = zk::CreateMode::Ephemeral.with_acls(zk::Acls::anyone_all());
    let (mut cold, mut floor) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for i in 0..n + 5 {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let t = Instant::now();
        holder.check_stat(path).await.unwrap();
        let exists = t.elapsed();
        holder.create(path, b"", &mode).await.unwrap();
        let (stat, watcher) = waiter.check_and_watch_stat(path).await.unwrap();
        assert!(stat.is_some(), "the waiter sees the holder's node");
        let fired = tokio::spawn(async move {
            let event = watcher.changed().await;
            (now_ns(), event.event_type)
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        let t0 = now_ns();
        holder.delete(path, None).await.unwrap();
        let (at, kind) = fired.await.unwrap();
        assert_eq!(kind, zk::EventType::NodeDeleted);
        if i >= 5 {
            cold.push(exists);
            floor.push(Duration::from_nanos(at.saturating_sub(t0)));
        }
    }
    (cold, floor)
}

pub struct Extras {
    pub markdown: String,
    pub json: String,
}

/// (requests clients sent, commands executed including those inside scripts).
async fn redis_commands(url: &str) -> (u64, u64) {
    let mut c = redis::Client::open(url).unwrap().get_multiplexed_async_connection().await.unwrap();
    let info: String = redis::cmd("INFO").arg("commandstats").query_async(&mut c).await.unwrap();
    let (mut requests, mut all) = (0, 0);
    for line in info.lines() {
        let Some((cmd, rest)) = line.strip_prefix("cmdstat_").and_then(|l| l.split_once(':')) else { continue };
        let calls: u64 =
            rest.split(',').find_map(|kv| kv.strip_prefix("calls=")).and_then(|v| v.parse().ok()).unwrap_or(0);
        all += calls;
        // What a client sends; everything else here runs inside a script.
        if matches!(cmd, "evalsha" | "eval" | "subscribe" | "unsubscribe" | "ping" | "script|load" | "info") {
            requests += calls;
        }
    }
    (requests, all)
}

/// ZooKeeper `mntr`: packets the server received (requests, pings included).
fn zk_packets(url: &str) -> u64 {
    use std::io::Read;
    let hp = url.split("://").nth(1).unwrap().split('/').next().unwrap();
    let mut s = std::net::TcpStream::connect(hp).unwrap();
    s.write_all(b"mntr").unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    text.lines().find_map(|l| l.strip_prefix("zk_packets_received")).and_then(|v| v.trim().parse().ok()).unwrap()
}

/// `waiters` clients (each its own connections) cycle on one lock for
/// `dur`; returns (client requests, server commands) per grant (one grant = one handoff).
async fn herd(url: &str, name: &str, waiters: usize, dur: Duration) -> (f64, f64) {
    let opts = ClientOptions { connect_timeout: Duration::from_secs(20), ..Default::default() };
    let mut clients = Vec::new();
    for _ in 0..=waiters {
        clients.push(Client::connect_with(url, opts.clone()).await.unwrap());
    }
    let stop = Arc::new(AtomicBool::new(false));
    let grants = Arc::new(AtomicU64::new(0));
    let counting = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for c in &clients {
        let lock = c.lock(name).unwrap();
        let (stop, grants, counting) = (stop.clone(), grants.clone(), counting.clone());
        tasks.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let g = lock.acquire_as(OwnerId(1), None).await.unwrap();
                if counting.load(Ordering::Relaxed) {
                    grants.fetch_add(1, Ordering::Relaxed);
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
                g.release().await.unwrap();
            }
        }));
    }
    // Let every client queue up, then count.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let zk = url.starts_with("zk");
    let before = if zk { (zk_packets(url), 0) } else { redis_commands(url).await };
    counting.store(true, Ordering::Relaxed);
    tokio::time::sleep(dur).await;
    counting.store(false, Ordering::Relaxed);
    let after = if zk { (zk_packets(url), 0) } else { redis_commands(url).await };
    let n = grants.load(Ordering::Relaxed).max(1);
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        let _ = tokio::time::timeout(Duration::from_secs(30), t).await;
    }
    for c in &clients {
        c.close().await;
    }
    // The stats query itself is one request.
    let per = |a: u64, b: u64| a.saturating_sub(b).saturating_sub(1) as f64 / n as f64;
    (per(after.0, before.0), per(after.1, before.1))
}

/// Acquire+release per second over `locks` distinct names, `tasks` at a time, from one client.
async fn throughput(url: &str, prefix: &str, locks: usize, tasks: usize, dur: Duration) -> f64 {
    let client = Client::connect(url).await.unwrap();
    let done = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let mut hs = Vec::new();
    for t in 0..tasks {
        let (client, done, stop) = (client.clone(), done.clone(), stop.clone());
        let prefix = prefix.to_owned();
        hs.push(tokio::spawn(async move {
            let mut i = t;
            while !stop.load(Ordering::Relaxed) {
                let lock = client.lock(&format!("{prefix}/{}", i % locks)).unwrap();
                let g = lock.acquire_as(OwnerId(t as u64), None).await.unwrap();
                g.release().await.unwrap();
                done.fetch_add(1, Ordering::Relaxed);
                i += tasks;
            }
        }));
    }
    let t0 = Instant::now();
    tokio::time::sleep(dur).await;
    stop.store(true, Ordering::Relaxed);
    let n = done.load(Ordering::Relaxed);
    let secs = t0.elapsed().as_secs_f64();
    for h in hs {
        let _ = h.await;
    }
    client.close().await;
    n as f64 / secs
}

fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

fn threads() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status.lines().find_map(|l| l.strip_prefix("Threads:")).unwrap().trim().parse().unwrap()
}

/// Memory per held and per waiting lock, and threads, with `n` locks.
async fn memory(url: &str, prefix: &str, n: usize) -> (f64, f64, u64, u64) {
    let opts = ClientOptions { lease: Duration::from_secs(10), ..Default::default() };
    let holder = Client::connect_with(url, opts.clone()).await.unwrap();
    let waiter = Client::connect_with(url, opts).await.unwrap();
    let threads_before = threads();
    let base = rss_bytes();
    let mut guards = Vec::with_capacity(n);
    let mut pending = futures_like::Batch::default();
    for i in 0..n {
        let lock = holder.lock(&format!("{prefix}/{i}")).unwrap();
        pending.push(tokio::spawn(async move { lock.acquire_as(OwnerId(1), None).await.unwrap() }));
        if pending.len() >= 200 {
            guards.extend(pending.drain().await);
        }
    }
    guards.extend(pending.drain().await);
    let held = rss_bytes();
    // Renewals run every lease/3 for all of them; count threads meanwhile.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let threads_held = threads();
    let mut waits = Vec::with_capacity(n);
    for i in 0..n {
        let lock = waiter.lock(&format!("{prefix}/{i}")).unwrap();
        waits.push(tokio::spawn(async move { lock.acquire_as(OwnerId(2), None).await.map(|g| g.into_token()) }));
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let waiting = rss_bytes();
    for w in &waits {
        w.abort();
    }
    drop(guards);
    holder.close().await;
    waiter.close().await;
    let per_held = held.saturating_sub(base) as f64 / n as f64;
    let per_wait = waiting.saturating_sub(held) as f64 / n as f64;
    (per_held, per_wait, threads_before, threads_held)
}

mod futures_like {
    use tokio::task::JoinHandle;

    /// A batch of spawned tasks awaited together.
    pub struct Batch<T>(Vec<JoinHandle<T>>);

    impl<T> Default for Batch<T> {
        fn default() -> Self {
            Batch(Vec::new())
        }
    }

    impl<T> Batch<T> {
        pub fn push(&mut self, h: JoinHandle<T>) {
            self.0.push(h);
        }
        pub fn len(&self) -> usize {
            self.0.len()
        }
        pub async fn drain(&mut self) -> Vec<T> {
            let mut out = Vec::new();
            for h in self.0.drain(..) {
                out.push(h.await.unwrap());
            }
            out
        }
    }
}

/// `quick`: shorter spans and fewer locks, a smoke test of every row.
pub async fn everything_else(redis_url: &str, zk_url: &str, name: &str, quick: bool) -> Extras {
    let span = |full: u64| Duration::from_millis(if quick { 500 } else { full });
    let mut md = String::from("Server work per handoff as waiters grow (herd test: every waiter a separate client; each one re-queues after its turn):\n\n| waiters | redis: client requests | redis: commands incl. inside scripts | zookeeper: packets received (incl. pings) |\n|---:|---:|---:|---:|\n");
    let mut json = Vec::new();
    for w in [1usize, 10, 100] {
        let (rq, rc) = herd(redis_url, &format!("{name}-herd-{w}"), w, span(2000)).await;
        let (z, _) = herd(zk_url, &format!("/{name}-herd-{w}"), w, span(3000)).await;
        md.push_str(&format!("| {w} | {rq:.1} | {rc:.1} | {z:.1} |\n"));
        json.push(format!(
            "\"herd_{w}\": {{\"redis_requests\": {rq:.2}, \"redis_commands\": {rc:.2}, \"zookeeper_packets\": {z:.2}}}"
        ));
    }
    md.push_str("\nThroughput, acquire+release per second over 1,000 distinct locks, 64 at a time, one client process:\n\n| backend | ops/s |\n|---|---:|\n");
    for (b, url, prefix) in [("redis", redis_url, format!("{name}-tp")), ("zookeeper", zk_url, format!("/{name}-tp"))] {
        let ops = throughput(url, &prefix, 1000, 64, span(3000)).await;
        md.push_str(&format!("| {b} | {ops:.0} |\n"));
        json.push(format!("\"throughput_{b}\": {ops:.0}"));
    }
    let locks = if quick { 1000 } else { 10_000 };
    md.push_str(&format!(
        "\nClient memory and threads with {locks} locks (Redis; leases renewed in the background):\n\n"
    ));
    let (held, wait, t0, t1) = memory(redis_url, &format!("{name}-mem"), locks).await;
    md.push_str(&format!(
        "| per held lock | per waiting lock | process threads before | with {locks} leases renewing |\n|---:|---:|---:|---:|\n| {:.0} B | {:.0} B | {t0} | {t1} |\n",
        held, wait
    ));
    json.push(format!(
        "\"memory\": {{\"bytes_per_held\": {held:.0}, \"bytes_per_waiting\": {wait:.0}, \"threads_before\": {t0}, \"threads_renewing_10k\": {t1}}}"
    ));
    Extras { markdown: md, json: format!("{{{}}}", json.join(", ")) }
}
