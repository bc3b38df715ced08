//! CPU time beside latency: this process's (user + sys, every thread, so
//! polylock's runtime threads count with the caller), and each lock server's
//! over the same span. Redis: `INFO cpu` (`used_cpu_user` + `used_cpu_sys`,
//! its background threads included). ZooKeeper: the sum of
//! `/proc/<pid>/task/*/schedstat` (nanoseconds on a CPU, every thread of its
//! JVM) of `POLYLOCK_BENCH_ZK_PID` (bench/run sets it from scripts/services'
//! pid file); without it, ZooKeeper rows have no server figure.

use std::time::Duration;

/// This process's CPU time so far, user + sys, every thread.
pub fn process() -> Duration {
    // SAFETY: getrusage only writes the struct we hand it.
    let usage = unsafe {
        let mut usage = std::mem::zeroed::<libc::rusage>();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

/// Reads one lock server's CPU time so far.
pub enum Server {
    Redis(redis::aio::MultiplexedConnection),
    ZooKeeper(Option<std::path::PathBuf>),
}

impl Server {
    pub async fn of(url: &str) -> Server {
        if url.starts_with("zk://") {
            let pid = std::env::var("POLYLOCK_BENCH_ZK_PID").ok().filter(|p| p.parse::<u32>().is_ok());
            return Server::ZooKeeper(pid.map(|p| format!("/proc/{p}/task").into()));
        }
        let client = redis::Client::open(url).unwrap();
        Server::Redis(client.get_multiplexed_async_connection().await.unwrap())
    }

    /// The server's CPU time so far (None: not known for this server).
    pub async fn cpu(&mut self) -> Option<Duration> {
        match self {
            Server::Redis(c) => {
                let info: String = redis::cmd("INFO").arg("cpu").query_async(c).await.ok()?;
                let secs: f64 = info
                    .lines()
                    .filter_map(|l| l.strip_prefix("used_cpu_user:").or_else(|| l.strip_prefix("used_cpu_sys:")))
                    .filter_map(|v| v.trim().parse::<f64>().ok())
                    .sum();
                Some(Duration::from_secs_f64(secs))
            }
            Server::ZooKeeper(None) => None,
            Server::ZooKeeper(Some(tasks)) => {
                let mut ns = 0u64;
                for task in std::fs::read_dir(tasks).ok()?.flatten() {
                    // A thread that ended meanwhile has no file left: skipped.
                    if let Ok(s) = std::fs::read_to_string(task.path().join("schedstat")) {
                        ns += s.split_whitespace().next().and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
                    }
                }
                Some(Duration::from_nanos(ns))
            }
        }
    }
}

/// CPU of one row over the spans it was timed in, summed.
#[derive(Clone, Copy, Default)]
pub struct Tally {
    pub client: Duration,
    /// None once any span had no server figure.
    pub server: Option<Duration>,
    pub ops: usize,
    started: bool,
}

impl Tally {
    pub fn add(&mut self, client: Duration, server: Option<Duration>, ops: usize) {
        self.server = match (self.started, self.server, server) {
            (false, _, s) => s,
            (true, Some(a), Some(b)) => Some(a + b),
            _ => None,
        };
        self.started = true;
        self.client += client;
        self.ops += ops;
    }

    /// (client µs per op, server µs per op).
    pub fn per_op_us(&self) -> (f64, Option<f64>) {
        let n = self.ops.max(1) as f64;
        (self.client.as_secs_f64() * 1e6 / n, self.server.map(|s| s.as_secs_f64() * 1e6 / n))
    }
}

/// A span's start: the server's CPU, then this process's (so the server
/// query's own client work stays out of the span).
pub struct Span {
    server: Option<Duration>,
    client: Duration,
}

impl Span {
    pub async fn start(server: &mut Server) -> Span {
        let server = server.cpu().await;
        Span { server, client: process() }
    }

    /// Ends the span: adds its CPU, over `ops` operations, to `tally`.
    pub async fn end(self, server: &mut Server, tally: &mut Tally, ops: usize) {
        let client = process().saturating_sub(self.client);
        let after = server.cpu().await;
        let server = match (self.server, after) {
            (Some(a), Some(b)) => Some(b.saturating_sub(a)),
            _ => None,
        };
        tally.add(client, server, ops);
    }
}
