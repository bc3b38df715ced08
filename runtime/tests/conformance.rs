//! Runs every scenario of tests/conformance/ through the Rust API, on each
//! backend the scenario names. The Python, Node and JVM suites run the same
//! files through theirs.

use crate::support;

mod history;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use polylock::{Client, ClientOptions, Error, Lock, LockMode, LossWatch, OwnerId, Permits, Semaphore};
use serde_json::Value;
use support::*;
use tokio::task::JoinHandle;

use history::History;

fn outcome(r: &Result<u64, Error>) -> &'static str {
    match r {
        Ok(_) => "granted",
        Err(Error::Timeout(_)) => "timeout",
        Err(Error::WouldBlock(_)) => "would_block",
        Err(Error::NotHeld(_)) => "not_held",
        Err(Error::Lost { .. }) => "lost",
        Err(Error::InvalidName(_)) => "invalid_name",
        Err(Error::InvalidUrl { .. }) => "invalid_url",
        Err(Error::Connect { .. }) => "connect_error",
        Err(Error::UpgradeRefused(_)) => "upgrade_refused",
        Err(Error::PermitsMismatch { .. }) => "permits_mismatch",
        Err(Error::InvalidOption(_)) => "invalid_option",
        Err(_) => "other_error",
    }
}

/// The Redis deployments besides the single server on which every Redis
/// scenario runs once more, with the same expected results, when their
/// servers run: (backend, the variable naming its URL, what starts it).
/// None leaves a scenario out: the only steps that name an address are the
/// `connect` ones, and they name URLs of their own.
const REDIS_VARIANTS: [(&str, &str, &str); 2] = [
    ("sentinel", "POLYLOCK_TEST_SENTINEL", "scripts/services start --sentinel"),
    ("cluster", "POLYLOCK_TEST_CLUSTER", "scripts/services start --cluster"),
];

/// `redis://` URL of the server that holds lock `name`, to look at it
/// directly: the URL itself; under Sentinel the master the sentinels name;
/// on a cluster the master of the name's slot (every key of a conformance
/// lock is in that slot: their names hold no braces).
async fn direct_url(backend: &str, url: &str, name: &str) -> String {
    match backend {
        "sentinel" => format!("redis://{}", master_addr(url).await),
        "cluster" => slot_master(url, name).await,
        _ => url.to_owned(),
    }
}

/// A lock acquire under way, and the (client, owner, mode) it is for.
type PendingAcquire = (usize, u64, LockMode, JoinHandle<Result<u64, Error>>);

/// A semaphore acquire under way, and the (client, owner) its grant is for.
type PendingPermits = (usize, u64, JoinHandle<Result<Permits, Error>>);

struct Run {
    backend: &'static str,
    /// The server itself, to look at it (see [`direct_url`]).
    url: String,
    name: String,
    clients: Vec<Client>,
    tokens: HashMap<String, u64>,
    /// Acquires under way, and the (client, owner, mode) each is for.
    background: HashMap<String, PendingAcquire>,
    loss: HashMap<(usize, u64, LockMode), LossWatch>,
    /// A semaphore scenario's number of permits.
    permits: Option<u32>,
    /// Semaphore grants by (client, owner), and those under way.
    grants: HashMap<(usize, u64), Permits>,
    sem_background: HashMap<String, PendingPermits>,
    /// The lock steps' operation history (POLYLOCK_HISTORY_DIR), for histcheck.
    history: History,
}

/// A step's `mode`: the mutex (absent), or a half of the read-write lock.
fn mode_of(step: &Value) -> LockMode {
    match step["mode"].as_str() {
        None => LockMode::Exclusive,
        Some("read") => LockMode::Read,
        Some("write") => LockMode::Write,
        Some("permits") => LockMode::Semaphore,
        Some(other) => panic!("unknown mode {other}"),
    }
}

impl Run {
    /// Client `c`'s handle on the scenario's lock, in the step's mode.
    fn lock(&self, c: usize, step: &Value) -> Lock {
        match mode_of(step) {
            LockMode::Read => self.clients[c].rw_lock(&self.name).unwrap().read().clone(),
            LockMode::Write => self.clients[c].rw_lock(&self.name).unwrap().write().clone(),
            _ => self.clients[c].lock(&self.name).unwrap(),
        }
    }

    /// Client `c`'s handle on the scenario's semaphore, with the step's number of permits.
    fn semaphore(&self, c: usize, step: &Value) -> Semaphore {
        self.clients[c].semaphore(&self.name, self.permits_of(step)).unwrap()
    }

    /// The step's number of permits: its own, or else the scenario's.
    fn permits_of(&self, step: &Value) -> u32 {
        step["permits"].as_u64().map_or(self.permits.expect("a semaphore scenario"), |n| n as u32)
    }

    /// Keeps a semaphore grant for its (client, owner) and answers as an acquire does.
    fn keep_grant(&mut self, c: usize, owner: u64, r: Result<Permits, Error>) -> Result<u64, Error> {
        r.map(|p| {
            let token = p.fencing_token();
            self.loss.insert((c, owner, LockMode::Semaphore), p.loss_watch());
            self.grants.insert((c, owner), p);
            token
        })
    }

    /// The permits held on the server: Redis, Redisson's set of permit ids;
    /// ZooKeeper, Curator's lease nodes.
    async fn server_permits(&self) -> u64 {
        if self.backend == "zookeeper" {
            return zk_children(&self.url, &format!("{}/leases", self.name)).await.len() as u64;
        }
        let mut c = raw_redis(&self.url).await;
        redis::cmd("ZCARD").arg(format!("{{{}}}:timeout", self.name)).query_async(&mut c).await.unwrap()
    }

    /// Redis: every held permit's expiry set in the past, as if its holder
    /// died long ago; the next script takes them back.
    async fn expire_permits(&self) {
        let mut c = raw_redis(&self.url).await;
        let key = format!("{{{}}}:timeout", self.name);
        let ids: Vec<Vec<u8>> = redis::cmd("ZRANGE").arg(&key).arg(0).arg(-1).query_async(&mut c).await.unwrap();
        for id in ids {
            let _: i64 = redis::cmd("ZADD").arg(&key).arg("XX").arg(0).arg(id).query_async(&mut c).await.unwrap();
        }
    }

    fn check_token(&self, step: &Value, token: u64, ctx: &str) {
        if let Some(k) = step["token_eq"].as_str() {
            assert_eq!(token, self.tokens[k], "{ctx}: token_eq {k}");
        }
        if let Some(k) = step["token_gt"].as_str() {
            assert!(token > self.tokens[k], "{ctx}: token {token} not > {k}={}", self.tokens[k]);
        }
    }

    async fn server_held(&self) -> bool {
        match self.backend {
            "zookeeper" => !zk_children(&self.url, &self.name).await.is_empty(),
            _ => {
                let mut c = raw_redis(&self.url).await;
                let n: i64 = redis::cmd("EXISTS").arg(&self.name).query_async(&mut c).await.unwrap();
                n == 1
            }
        }
    }

    async fn server_waiters(&self) -> u64 {
        match self.backend {
            "zookeeper" => zk_children(&self.url, &self.name).await.len().saturating_sub(1) as u64,
            _ => {
                let mut c = raw_redis(&self.url).await;
                let q = format!("polylock_queue:{{{}}}", self.name);
                redis::cmd("ZCARD").arg(q).query_async(&mut c).await.unwrap()
            }
        }
    }

    async fn server_clean(&self) -> bool {
        if self.permits.is_some() && self.backend == "zookeeper" {
            // Curator's mutex and our leases gone; the record of N stays.
            let locks = zk_children(&self.url, &format!("{}/locks", self.name)).await;
            return locks.is_empty() && self.server_permits().await == 0;
        }
        if self.permits.is_some() {
            // The counter of free permits stays (Redisson's does too).
            let mut c = raw_redis(&self.url).await;
            let queue = format!("polylock_semqueue:{{{}}}", self.name);
            let deadlines = format!("polylock_semqueue_deadline:{{{}}}", self.name);
            let queued: i64 = redis::cmd("EXISTS").arg(queue).arg(deadlines).query_async(&mut c).await.unwrap();
            return queued == 0 && self.server_permits().await == 0;
        }
        match self.backend {
            "zookeeper" => zk_children(&self.url, &self.name).await.is_empty(),
            _ => redis_leftovers(&self.url, &self.name).await.is_empty(),
        }
    }
}

async fn run_scenario(sc: &Value, backend: &'static str, url: String) {
    let scenario = sc["name"].as_str().unwrap();
    let mut opts = ClientOptions { session_timeout: Duration::from_secs(2), debug_faults: true, ..Default::default() };
    if let Some(ms) = sc["lease_ms"].as_u64() {
        opts.lease = Duration::from_millis(ms);
    }
    let mut clients = Vec::new();
    for _ in 0..sc["clients"].as_u64().unwrap() {
        clients.push(client_with(&url, opts.clone()).await);
    }
    let name = unique(&format!("conformance-{scenario}"));
    let raw = direct_url(backend, &url, &name).await;
    let history = History::new(backend, &name);
    let mut run = Run {
        backend,
        url: raw.clone(),
        name,
        clients,
        tokens: HashMap::new(),
        background: HashMap::new(),
        loss: HashMap::new(),
        permits: sc["permits"].as_u64().map(|n| n as u32),
        grants: HashMap::new(),
        sem_background: HashMap::new(),
        history,
    };
    for (i, step) in sc["steps"].as_array().unwrap().iter().enumerate() {
        let ctx = format!("{scenario} on {backend}, step {i} {step}");
        let op = step["op"].as_str().unwrap();
        let c = step["client"].as_u64().unwrap_or(0) as usize;
        let owner = step["owner"].as_u64().unwrap_or(0);
        let expect = step["expect"].as_str().unwrap_or("");
        let permits = mode_of(step) == LockMode::Semaphore;
        let count = step["count"].as_u64().unwrap_or(1) as u32;
        let mode = mode_of(step);
        let hist = run.history.clone();
        match op {
            "acquire" if permits => {
                let timeout = step["timeout_ms"].as_u64().map(Duration::from_millis);
                let started = Instant::now();
                hist.acquire_call(c, owner, mode, Some((run.permits_of(step), count)));
                let got = run.semaphore(c, step).acquire_for(count, timeout).await;
                let r = run.keep_grant(c, owner, got);
                hist.acquire_return(c, owner, mode, r.as_ref().ok().copied(), outcome(&r));
                assert_eq!(outcome(&r), expect, "{ctx}: {r:?}");
                if let Some(ms) = step["min_elapsed_ms"].as_u64() {
                    assert!(started.elapsed() >= Duration::from_millis(ms), "{ctx}: gave up early");
                }
                if let Ok(t) = r {
                    run.check_token(step, t, &ctx);
                    if let Some(k) = step["save_token"].as_str() {
                        run.tokens.insert(k.to_owned(), t);
                    }
                }
            }
            "release" if permits => {
                let grant = run.grants.remove(&(c, owner)).unwrap_or_else(|| panic!("{ctx}: no grant to release"));
                hist.release_call(c, owner, mode);
                let r = grant.release().await.map(|()| 0);
                let got = if r.is_ok() { "ok" } else { outcome(&r) };
                hist.release_return(c, owner, mode, got);
                assert_eq!(got, expect, "{ctx}: {r:?}");
            }
            "start_acquire" if permits => {
                let sem = run.semaphore(c, step);
                let id = step["id"].as_str().unwrap().to_owned();
                hist.acquire_call(c, owner, mode, Some((run.permits_of(step), count)));
                let h = tokio::spawn(async move {
                    let r = sem.acquire_for(count, None).await;
                    let token = r.as_ref().ok().map(Permits::fencing_token);
                    hist.acquire_return(c, owner, mode, token, outcome(&r.as_ref().map(|_| 0).map_err(Clone::clone)));
                    r
                });
                run.sem_background.insert(id, (c, owner, h));
            }
            "await" if run.sem_background.contains_key(step["id"].as_str().unwrap()) => {
                let (gc, gowner, h) = run.sem_background.remove(step["id"].as_str().unwrap()).unwrap();
                let within = Duration::from_millis(step["within_ms"].as_u64().unwrap_or(10_000));
                let got =
                    tokio::time::timeout(within, h).await.unwrap_or_else(|_| panic!("{ctx}: still waiting")).unwrap();
                let r = run.keep_grant(gc, gowner, got);
                assert_eq!(outcome(&r), expect, "{ctx}: {r:?}");
                if let Ok(t) = r {
                    run.check_token(step, t, &ctx);
                }
            }
            "cancel" if run.sem_background.contains_key(step["id"].as_str().unwrap()) => {
                let (gc, gowner, h) = run.sem_background.remove(step["id"].as_str().unwrap()).unwrap();
                h.abort();
                if h.await.is_err_and(|e| e.is_cancelled()) {
                    hist.acquire_return(gc, gowner, LockMode::Semaphore, None, "cancelled");
                }
            }
            "server_permits" => {
                let want = step["expect_count"].as_u64().unwrap();
                let within = Duration::from_millis(step["within_ms"].as_u64().unwrap_or(3000));
                let r = &run;
                let ok = eventually(within, || async move { r.server_permits().await == want }).await;
                assert!(ok, "{ctx}: {} permits held on the server", run.server_permits().await);
            }
            "expire_lease" if run.permits.is_some() && backend != "zookeeper" => run.expire_permits().await,
            "acquire" => {
                let timeout = step["timeout_ms"].as_u64().map(Duration::from_millis);
                let started = Instant::now();
                hist.acquire_call(c, owner, mode, None);
                let r = match run.lock(c, step).acquire_as(OwnerId(owner), timeout).await {
                    Ok(g) => {
                        run.loss.insert((c, owner, mode_of(step)), g.loss_watch());
                        Ok(g.into_token())
                    }
                    Err(e) => Err(e),
                };
                hist.acquire_return(c, owner, mode, r.as_ref().ok().copied(), outcome(&r));
                assert_eq!(outcome(&r), expect, "{ctx}: {r:?}");
                if let Some(ms) = step["min_elapsed_ms"].as_u64() {
                    assert!(started.elapsed() >= Duration::from_millis(ms), "{ctx}: gave up early");
                }
                if let Ok(t) = r {
                    run.check_token(step, t, &ctx);
                    if let Some(k) = step["save_token"].as_str() {
                        run.tokens.insert(k.to_owned(), t);
                    }
                }
            }
            "release" => {
                hist.release_call(c, owner, mode);
                let r = run.lock(c, step).release_as(OwnerId(owner)).await.map(|()| 0);
                let got = if r.is_ok() { "ok" } else { outcome(&r) };
                hist.release_return(c, owner, mode, got);
                assert_eq!(got, expect, "{ctx}: {r:?}");
            }
            "start_acquire" => {
                let lock = run.lock(c, step);
                let id = step["id"].as_str().unwrap().to_owned();
                hist.acquire_call(c, owner, mode, None);
                let h = tokio::spawn(async move {
                    let r = lock.acquire_as(OwnerId(owner), None).await.map(|g| g.into_token());
                    hist.acquire_return(c, owner, mode, r.as_ref().ok().copied(), outcome(&r));
                    r
                });
                run.background.insert(id, (c, owner, mode, h));
            }
            "await" => {
                let (_, _, _, h) = run.background.remove(step["id"].as_str().unwrap()).unwrap();
                let within = Duration::from_millis(step["within_ms"].as_u64().unwrap_or(10_000));
                let r =
                    tokio::time::timeout(within, h).await.unwrap_or_else(|_| panic!("{ctx}: still waiting")).unwrap();
                assert_eq!(outcome(&r), expect, "{ctx}: {r:?}");
                if let Ok(t) = r {
                    run.check_token(step, t, &ctx);
                }
            }
            "cancel" => {
                let (gc, gowner, gmode, h) = run.background.remove(step["id"].as_str().unwrap()).unwrap();
                h.abort();
                if h.await.is_err_and(|e| e.is_cancelled()) {
                    hist.acquire_return(gc, gowner, gmode, None, "cancelled");
                }
            }
            "hold_count" => {
                let n = run.lock(c, step).hold_count(OwnerId(owner));
                assert_eq!(u64::from(n), step["expect_count"].as_u64().unwrap(), "{ctx}");
            }
            "server_state" => {
                assert_eq!(run.server_held().await, expect == "held", "{ctx}");
            }
            "server_clean" => {
                let within = Duration::from_millis(step["within_ms"].as_u64().unwrap_or(3000));
                let r = &run;
                assert!(eventually(within, || r.server_clean()).await, "{ctx}: left something on the server");
            }
            "server_waiters" => {
                let want = step["expect_count"].as_u64().unwrap();
                let within = Duration::from_millis(step["within_ms"].as_u64().unwrap_or(3000));
                let r = &run;
                let ok = eventually(within, || async move { r.server_waiters().await == want }).await;
                assert!(ok, "{ctx}: {} waiters on the server", run.server_waiters().await);
            }
            "expire_lease" => match backend {
                "zookeeper" => run.clients[c].debug_expire_session().await.unwrap(),
                _ => {
                    let mut raw = raw_redis(&raw).await;
                    let _: i64 = redis::cmd("DEL").arg(&run.name).query_async(&mut raw).await.unwrap();
                }
            },
            "await_lost" => {
                let w = run.loss.get(&(c, owner, mode_of(step))).expect("await_lost needs a grant").clone();
                let within = Duration::from_millis(step["within_ms"].as_u64().unwrap_or(10_000));
                tokio::time::timeout(within, w.ended())
                    .await
                    .unwrap_or_else(|_| panic!("{ctx}: loss not reported"))
                    .unwrap_or_else(|| panic!("{ctx}: released, not lost"));
                hist.lost(c, owner, mode);
            }
            "lock_name" => {
                let name = step["name"].as_str().unwrap();
                let r = run.clients.first().map(|c| c.lock(name).map(|_| 0));
                let r = match r {
                    Some(r) => r,
                    None => client(&url).await.lock(name).map(|_| 0),
                };
                let got = if r.is_ok() { "ok" } else { outcome(&r) };
                assert_eq!(got, expect, "{ctx}");
            }
            "connect" => {
                let u = step["url"].as_str().unwrap();
                let within = Duration::from_millis(step["within_ms"].as_u64().unwrap_or(8000));
                let quick = ClientOptions { connect_timeout: Duration::from_secs(2), ..Default::default() };
                let r = tokio::time::timeout(within, Client::connect_with(u, quick))
                    .await
                    .unwrap_or_else(|_| panic!("{ctx}: connect hung"))
                    .map(|_| 0);
                let got = if r.is_ok() { "ok" } else { outcome(&r) };
                assert_eq!(got, expect, "{ctx}: {r:?}");
            }
            "sleep" => tokio::time::sleep(Duration::from_millis(step["ms"].as_u64().unwrap())).await,
            other => panic!("{ctx}: unknown op {other}"),
        }
    }
    for c in &run.clients {
        c.close().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_scenario_on_every_backend() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/conformance");
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    assert!(files.len() >= 20, "expected at least 20 scenarios, found {}", files.len());
    let mut variants = Vec::new();
    for (backend, var, start) in REDIS_VARIANTS {
        match std::env::var(var) {
            Ok(url) => variants.push((backend, url)),
            Err(_) => eprintln!("skipped: every Redis scenario on {backend}: {var} is unset (run `{start}`)"),
        }
    }
    let mut runs = Vec::new();
    for f in &files {
        let sc: Value = serde_json::from_str(&std::fs::read_to_string(f).unwrap()).unwrap();
        for b in sc["backends"].as_array().unwrap() {
            let (backend, url) = match b.as_str().unwrap() {
                "redis" | "any" => ("redis", redis_url()),
                "zookeeper" => ("zookeeper", zk_url()),
                other => panic!("unknown backend {other}"),
            };
            if backend == "redis" {
                for (variant, variant_url) in &variants {
                    let (sc, variant, variant_url) = (sc.clone(), *variant, variant_url.clone());
                    runs.push(tokio::spawn(async move { run_scenario(&sc, variant, variant_url).await }));
                }
            }
            let sc = sc.clone();
            runs.push(tokio::spawn(async move { run_scenario(&sc, backend, url).await }));
        }
    }
    let n = runs.len();
    for r in runs {
        r.await.unwrap();
    }
    eprintln!("{n} scenario runs passed");
}
