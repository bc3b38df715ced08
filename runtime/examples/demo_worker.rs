//! One worker of the demo and the cross-language fault suite (the Rust one;
//! the Python, Node and Java workers follow the same protocol, described in
//! demo/README.md):
//! `demo_worker --url URL --lock NAME --resource-url REDIS_URL --rounds N --id ID
//!              [--hold-ms MS] [--lease-ms MS] [--session-ms MS] [--permits N | --election]`
//! For each round: acquire; print a grant line; read the resource's count;
//! hold for --hold-ms; write count+1 through the fencing-checked script
//! (demo/resource.lua); print a record line with start/end on
//! CLOCK_MONOTONIC and whether the lock was lost meanwhile; release.
//! With `--permits N` it takes one permit of the semaphore of N permits
//! instead of the lock, and holds without touching the resource (N holders
//! at once: there is no single writer to fence); its records say
//! `"accepted": true`.
//! With `--election` each round is a campaign in the election of that name
//! instead of an acquire, the leadership's term its token, a resign its
//! release: the resource refuses a deposed leader's write as a stale holder's.
//!
//! With POLYLOCK_HISTORY_DIR set, it also records its operation history
//! there (one JSON line per call, return and reported loss; see
//! demo/README.md), which tests/history's histcheck checks with Porcupine.

use std::io::Write;
use std::time::Duration;

use polylock::{Client, ClientOptions, Error, Guard, Leadership, LossReason};

/// What a round holds: the lock, or the election's leadership.
enum Held {
    Lock(Guard),
    Lead(Leadership),
}

impl Held {
    fn token(&self) -> u64 {
        match self {
            Held::Lock(g) => g.fencing_token(),
            Held::Lead(l) => l.term(),
        }
    }

    fn lost_reason(&self) -> Option<LossReason> {
        match self {
            Held::Lock(g) => g.lost_reason(),
            Held::Lead(l) => l.lost_reason(),
        }
    }

    async fn release(self) -> polylock::Result<()> {
        match self {
            Held::Lock(g) => g.release().await,
            Held::Lead(l) => l.resign().await,
        }
    }
}

fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes into the timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The worker's operation history: a file of JSON lines in
/// POLYLOCK_HISTORY_DIR, or nothing when that is unset. Each line goes out in
/// one unbuffered write, so a worker killed at any point leaves whole lines
/// (a call without its return is an operation whose outcome is unknown).
struct History {
    file: Option<std::fs::File>,
    common: String,
}

impl History {
    fn open(id: &str, backend: &str, lock: &str, resource: &str) -> History {
        let pid = std::process::id();
        let file = std::env::var_os("POLYLOCK_HISTORY_DIR").map(|dir| {
            let path = std::path::Path::new(&dir).join(format!("{id}-{pid}.jsonl"));
            std::fs::OpenOptions::new().create(true).append(true).open(&path).unwrap_or_else(|e| {
                panic!("{}: {e}", path.display());
            })
        });
        let common = format!(
            "\"client\": \"{id}/{pid}\", \"backend\": \"{backend}\", \"lock\": {lock:?}, \"resource\": {resource:?}"
        );
        History { file, common }
    }

    /// Records `op`'s `kind` ("call", "return" or "event") now, with `fields`
    /// (`"name": value` pairs, or empty).
    fn record(&mut self, op: &str, kind: &str, fields: &str) {
        let Some(file) = self.file.as_mut() else { return };
        let sep = if fields.is_empty() { "" } else { ", " };
        let line = format!(
            "{{{}, \"op\": \"{op}\", \"kind\": \"{kind}\", \"t_ns\": {}{sep}{fields}}}\n",
            self.common,
            monotonic_ns()
        );
        file.write_all(line.as_bytes()).expect("history write");
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |k: &str| args.iter().position(|a| a == k).and_then(|i| args.get(i + 1)).cloned();
    let ms = |k: &str, default: u64| arg(k).map_or(default, |v| v.parse().unwrap_or_else(|_| panic!("{k} MS")));
    let url = arg("--url").expect("--url");
    let name = arg("--lock").expect("--lock");
    let resource_url = arg("--resource-url").expect("--resource-url");
    let rounds: usize = arg("--rounds").map_or(5, |v| v.parse().unwrap());
    let id = arg("--id").unwrap_or_else(|| format!("rust-{}", std::process::id()));
    let hold = Duration::from_millis(ms("--hold-ms", 2));
    let opts = ClientOptions {
        lease: Duration::from_millis(ms("--lease-ms", 30_000)),
        session_timeout: Duration::from_millis(ms("--session-ms", 10_000)),
        ..Default::default()
    };
    let backend = if url.starts_with("zk") { "zookeeper" } else { "redis" };
    let resource = format!("demo:resource:{backend}:{name}");
    let script = redis::Script::new(include_str!("../../demo/resource.lua"));
    // No response timeout on the resource: a worker paused (SIGSTOP) while its
    // read or write is in flight must learn that access's answer when it runs
    // again, as the other languages' clients do, not die of a timeout with an
    // access whose outcome nobody knows.
    let resource_config = redis::AsyncConnectionConfig::new().set_response_timeout(None);
    let mut r = redis::Client::open(resource_url.as_str())
        .unwrap()
        .get_multiplexed_async_connection_with_config(&resource_config)
        .await
        .unwrap();
    let pid = std::process::id();
    let mut history = History::open(&id, backend, &name, &resource);

    let client = Client::connect_with(&url, opts).await.unwrap_or_else(|e| panic!("{e}"));
    if let Some(n) = arg("--permits") {
        let sem = client.semaphore(&name, n.parse().expect("--permits N")).unwrap();
        for _ in 0..rounds {
            history.record("acquire", "call", &format!("\"permits\": {n}"));
            let permit = sem.acquire(1).await.unwrap();
            let token = permit.fencing_token();
            history.record("acquire", "return", &format!("\"token\": {token}"));
            let start = monotonic_ns();
            println!(
                "{{\"event\": \"grant\", \"worker\": \"{id}\", \"lang\": \"rust\", \"backend\": \"{backend}\", \"pid\": {pid}, \"token\": {token}, \"t_ns\": {start}}}"
            );
            tokio::time::sleep(hold).await;
            let end = monotonic_ns();
            let lost_during = permit.lost_reason().is_some();
            if lost_during {
                history.record("lost", "event", "");
            }
            history.record("release", "call", &format!("\"token\": {token}"));
            let lost = lost_during || matches!(permit.release().await, Err(Error::Lost { .. }));
            history.record("release", "return", &format!("\"ok\": {}", !lost));
            println!(
                "{{\"worker\": \"{id}\", \"lang\": \"rust\", \"backend\": \"{backend}\", \"pid\": {pid}, \"token\": {token}, \"start_ns\": {start}, \"end_ns\": {end}, \"accepted\": true, \"lost\": {lost}}}"
            );
        }
        client.close().await;
        return;
    }
    let lock = client.lock(&name).unwrap();
    let election = args.iter().any(|a| a == "--election").then(|| client.election(&name).unwrap());
    for _ in 0..rounds {
        history.record("acquire", "call", "");
        let guard = match &election {
            Some(e) => Held::Lead(e.campaign().await.unwrap()),
            None => Held::Lock(lock.acquire().await.unwrap()),
        };
        let token = guard.token();
        history.record("acquire", "return", &format!("\"token\": {token}"));
        let start = monotonic_ns();
        println!(
            "{{\"event\": \"grant\", \"worker\": \"{id}\", \"lang\": \"rust\", \"backend\": \"{backend}\", \"pid\": {pid}, \"token\": {token}, \"t_ns\": {start}}}"
        );
        // The fenced read (-1: refused, and so is the write below).
        history.record("read", "call", &format!("\"token\": {token}"));
        let count: Option<i64> = script.key(&resource).arg(token).invoke_async(&mut r).await.unwrap();
        history.record("read", "return", &format!("\"value\": {}", count.unwrap_or(0)));
        tokio::time::sleep(hold).await; // widen the window a lost update would need
        let value = count.unwrap_or(0) + 1;
        history.record("write", "call", &format!("\"token\": {token}, \"value\": {value}"));
        let accepted: i64 = script.key(&resource).arg(token).arg(value).invoke_async(&mut r).await.unwrap();
        history.record("write", "return", &format!("\"ok\": {}", accepted == 1));
        let end = monotonic_ns();
        // Lost during the section, or found out on release (a paused process
        // learns only when it runs again).
        let lost_during = guard.lost_reason().is_some();
        if lost_during {
            history.record("lost", "event", "");
        }
        history.record("release", "call", &format!("\"token\": {token}"));
        let released = guard.release().await;
        let lost = lost_during || matches!(released, Err(Error::Lost { .. }));
        history.record(
            "release",
            "return",
            &match &released {
                Err(e) if !matches!(e, Error::Lost { .. }) => format!("\"ok\": false, \"error\": {:?}", e.to_string()),
                _ => format!("\"ok\": {}", !lost),
            },
        );
        if let Err(e) = &released {
            assert!(matches!(e, Error::Lost { .. }), "release: {e}");
        }
        println!(
            "{{\"worker\": \"{id}\", \"lang\": \"rust\", \"backend\": \"{backend}\", \"pid\": {pid}, \"token\": {token}, \"start_ns\": {start}, \"end_ns\": {end}, \"accepted\": {}, \"lost\": {lost}}}",
            accepted == 1
        );
    }
    client.close().await;
}
