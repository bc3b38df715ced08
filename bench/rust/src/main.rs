//! polylock from Rust beside the floor it stands on, in one run against
//! the same servers:
//! - Redis: raw `PING` round trip; polylock uncontended acquire+release
//!   (one script call each, so the floor is two round trips);
//! - ZooKeeper: raw `exists`; the naive lock issued raw, its three requests
//!   one after another (create ephemeral sequential, getChildren, delete: what
//!   a hand-written lock does) and with create + getChildren pipelined, the
//!   getChildren setting a children watch as polylock's does (the floor of
//!   polylock's own sequence); polylock acquire+release.
//!
//! Each backend's rows run interleaved (see [`interleaved`]), back to back
//! and paced (each call after a 2 ms pause). Every row also has its CPU per
//! operation, this process's and the server's ([`cpu`]); the idle row is one
//! client holding 100 locks and making no calls, in % of one core.
//!
//! Usage: polylock-bench [--quick] [--iterations N] [--out DIR]
//!        (`--quick` or BENCH_QUICK=1: every row with few iterations, a smoke test)
//!        polylock-bench --print-raw-scripts NAME   (the raw-scripts calls, as JSON)
//! Reads POLYLOCK_TEST_REDIS and POLYLOCK_TEST_ZK.

use std::time::{Duration, Instant};

use polylock::{Client, OwnerId};
use zookeeper_client as zk;

mod cpu;
mod extra;

struct Stats {
    name: &'static str,
    p50: f64,
    p99: f64,
    cpu: cpu::Tally,
}

fn stats(name: &'static str, mut v: Vec<Duration>) -> Stats {
    v.sort();
    let at = |q: f64| v[((v.len() as f64 - 1.0) * q).round() as usize].as_secs_f64() * 1e6;
    Stats { name, p50: at(0.5), p99: at(0.99), cpu: cpu::Tally::default() }
}

impl Stats {
    fn with_cpu(mut self, cpu: cpu::Tally) -> Stats {
        self.cpu = cpu;
        self
    }
}

/// The pause before each paced call: a service's lock calls come between
/// requests, not back to back. Out of the latency, in the CPU per operation
/// (what a client burns while its caller is away counts against it).
const PACE: Duration = Duration::from_millis(2);

/// Before each timed batch, a pause counted nowhere: what the previous
/// batch's system still did after its last call ends there, not in this
/// batch's CPU.
const SETTLE: Duration = Duration::from_millis(5);

/// One timed operation of an [`interleaved`] comparison.
type Op<'a> = Box<dyn FnMut() -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + 'a>> + 'a>;

/// Iterations per batch of [`interleaved`].
const BATCH: usize = 100;

/// Times `n` runs of each op after `n / 10` warm-up runs, in batches of
/// [`BATCH`] that take turns (the first op of each round rotating), so that
/// the machine's load and drift fall on every op alike and a ratio of their
/// p50s compares the ops, not the moments they happened to run at. With
/// `pace`, each run follows a pause that long (not timed). Each batch's CPU,
/// this process's and `server`'s, is charged to its op.
async fn interleaved(
    n: usize,
    server: &mut cpu::Server,
    pace: Option<Duration>,
    mut ops: Vec<(&'static str, Op<'_>)>,
) -> Vec<Stats> {
    for (_, op) in ops.iter_mut() {
        for _ in 0..n / 10 {
            op().await; // warm-up
        }
    }
    let mut samples: Vec<Vec<Duration>> = ops.iter().map(|_| Vec::with_capacity(n)).collect();
    let mut tallies = vec![cpu::Tally::default(); ops.len()];
    for round in 0..n.div_ceil(BATCH) {
        let batch = BATCH.min(n - round * BATCH);
        for k in 0..ops.len() {
            let i = (round + k) % ops.len();
            tokio::time::sleep(SETTLE).await;
            let span = cpu::Span::start(server).await;
            for _ in 0..batch {
                if let Some(pace) = pace {
                    tokio::time::sleep(pace).await;
                }
                let t = Instant::now();
                (ops[i].1)().await;
                samples[i].push(t.elapsed());
            }
            span.end(server, &mut tallies[i], batch).await;
        }
    }
    ops.iter().zip(samples).zip(tallies).map(|(((name, _), v), t)| stats(name, v).with_cpu(t)).collect()
}

/// One script call as polylock's runtime sends it once the server has the
/// script: `EVALSHA sha n keys.. args..` (load it first: [`ScriptCall::load`]).
struct ScriptCall {
    script: &'static polylock_core::Script,
    keys: Vec<String>,
    args: Vec<String>,
}

impl ScriptCall {
    fn cmd(&self) -> redis::Cmd {
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(self.script.sha1()).arg(self.keys.len()).arg(&self.keys).arg(&self.args);
        cmd
    }

    /// `SCRIPT LOAD` of the source, so that [`ScriptCall::cmd`] runs.
    fn load(&self) -> redis::Cmd {
        let mut cmd = redis::cmd("SCRIPT");
        cmd.arg("LOAD").arg(self.script.source);
        cmd
    }
}

/// polylock's uncontended acquire and release on lock `name`, as the two
/// script calls its runtime sends, for the protocol-floor rows: this
/// benchmark's, and the Node and Python ones' (`--print-raw-scripts NAME`
/// prints them as JSON), so that each language issues the same bytes.
fn raw_script_calls(name: &str) -> [ScriptCall; 2] {
    use polylock_core::{redis as proto, LockName};
    let keys = proto::RedisKeys::of(&LockName::new(name).unwrap());
    let field = "raw-bench:1".to_owned();
    let member = format!("{field}|0");
    let channel = keys.channel().to_owned();
    [
        ScriptCall {
            script: &proto::ACQUIRE,
            keys: vec![
                keys.lock().to_owned(),
                keys.fence().to_owned(),
                keys.queue().to_owned(),
                keys.queue_deadline().to_owned(),
            ],
            args: vec![field.clone(), "30000".into(), "1".into(), "30000".into(), channel.clone(), member.clone()],
        },
        ScriptCall {
            script: &proto::LEAVE,
            keys: vec![
                keys.lock().to_owned(),
                keys.queue().to_owned(),
                keys.queue_deadline().to_owned(),
                keys.fence().to_owned(),
            ],
            args: vec![field, channel.clone(), channel, member],
        },
    ]
}

fn host_port(url: &str) -> String {
    url.split("://").nth(1).unwrap().split('/').next().unwrap().to_owned()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--handoff-waiter") {
        return extra::handoff_waiter(&args[2], &args[3]).await;
    }
    if args.get(1).map(String::as_str) == Some("--print-raw-scripts") {
        let calls = raw_script_calls(&args[2]).map(|c| {
            serde_json::json!({ "sha": c.script.sha1(), "source": c.script.source, "keys": c.keys, "args": c.args })
        });
        return println!("{}", serde_json::Value::from(calls.to_vec()));
    }
    let arg = |k: &str| args.iter().position(|a| a == k).and_then(|i| args.get(i + 1)).cloned();
    let quick = args.iter().any(|a| a == "--quick") || std::env::var("BENCH_QUICK").as_deref() == Ok("1");
    let n: usize = arg("--iterations").map_or(if quick { 100 } else { 2000 }, |v| v.parse().expect("--iterations N"));
    let paced_n = if quick { 50 } else { n.min(500) };
    let out = arg("--out").unwrap_or_else(|| "bench/rust".into());
    let redis_url = std::env::var("POLYLOCK_TEST_REDIS").expect("POLYLOCK_TEST_REDIS");
    let zk_url = std::env::var("POLYLOCK_TEST_ZK").expect("POLYLOCK_TEST_ZK");
    let name = format!("bench-rust-{}", std::process::id());
    let mut redis_server = cpu::Server::of(&redis_url).await;
    let mut zk_server = cpu::Server::of(&zk_url).await;

    // Redis: the floor (PING on a multiplexed connection), the protocol
    // floor (polylock's two scripts issued raw, no runtime) and polylock;
    // then the last two paced.
    let mut raw = redis::Client::open(redis_url.as_str()).unwrap().get_multiplexed_async_connection().await.unwrap();
    let client = Client::connect(&redis_url).await.unwrap();
    let lock = client.lock(&name).unwrap();
    let mut rows = {
        let calls = raw_script_calls(&name);
        for call in &calls {
            let _: String = call.load().query_async(&mut raw.clone()).await.unwrap();
        }
        let (raw, calls, lock) = (&raw, &calls, &lock);
        let ping = || -> Op {
            Box::new(move || {
                let mut c = raw.clone();
                Box::pin(async move {
                    let _: String = redis::cmd("PING").query_async(&mut c).await.unwrap();
                })
            })
        };
        let scripts = || -> Op {
            Box::new(move || {
                let mut c = raw.clone();
                Box::pin(async move {
                    for call in calls {
                        let _: redis::Value = call.cmd().query_async(&mut c).await.unwrap();
                    }
                })
            })
        };
        let polylock = || -> Op {
            Box::new(move || {
                Box::pin(async move {
                    let g = lock.acquire_as(OwnerId(1), None).await.unwrap();
                    g.release().await.unwrap();
                })
            })
        };
        let mut rows = interleaved(
            n,
            &mut redis_server,
            None,
            vec![
                ("redis PING (raw round trip)", ping()),
                ("redis raw: polylock's acquire + leave scripts, no runtime", scripts()),
                ("polylock redis acquire+release", polylock()),
            ],
        )
        .await;
        rows.extend(
            interleaved(
                paced_n,
                &mut redis_server,
                Some(PACE),
                vec![(RAW_SCRIPTS_PACED, scripts()), (POLYLOCK_REDIS_PACED, polylock())],
            )
            .await,
        );
        rows
    };
    let _: () = redis::cmd("DEL").arg(format!("polylock_fence:{{{name}}}")).query_async(&mut raw).await.unwrap();
    client.close().await;

    // ZooKeeper: the floor (exists), the naive lock issued raw (sequential and
    // pipelined), and polylock; then the last two paced.
    let z = zk::Client::connect(&host_port(&zk_url)).await.unwrap();
    let zpath = format!("/{name}");
    z.mkdir(&zpath, &zk::CreateMode::Container.with_acls(zk::Acls::anyone_all())).await.unwrap();
    let zclient = Client::connect(&zk_url).await.unwrap();
    let zlock = zclient.lock(&zpath).unwrap();
    {
        let (z, zpath, zlock) = (&z, &zpath, &zlock);
        let exists = || -> Op {
            Box::new(move || {
                Box::pin(async move {
                    z.check_stat(zpath).await.unwrap();
                })
            })
        };
        let sequential = || -> Op {
            Box::new(move || {
                Box::pin(async move {
                    let mode = zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::anyone_all());
                    let prefix = format!("{zpath}/lock-");
                    let (_, seq) = z.create(&prefix, b"", &mode).await.unwrap();
                    z.list_children(zpath).await.unwrap();
                    z.delete(&format!("{prefix}{seq}"), None).await.unwrap();
                })
            })
        };
        let naive = || -> Op {
            Box::new(move || {
                Box::pin(async move {
                    let mode = zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::anyone_all());
                    let prefix = format!("{zpath}/lock-");
                    let create = z.create(&prefix, b"", &mode);
                    // Watched, as polylock's is (its holder's notice of losing its
                    // node): the server then also sends the event our delete fires.
                    let list = z.list_and_watch_children(zpath);
                    let ((_, seq), _) = (create.await.unwrap(), list.await.unwrap());
                    z.delete(&format!("{prefix}{seq}"), None).await.unwrap();
                })
            })
        };
        let polylock = || -> Op {
            Box::new(move || {
                Box::pin(async move {
                    let g = zlock.acquire_as(OwnerId(1), None).await.unwrap();
                    g.release().await.unwrap();
                })
            })
        };
        rows.extend(
            interleaved(
                n,
                &mut zk_server,
                None,
                vec![
                    ("zookeeper exists (raw round trip)", exists()),
                    ("zookeeper naive lock raw: create, getChildren, delete, one after another", sequential()),
                    ("zookeeper naive lock raw: create+watched getChildren pipelined, delete", naive()),
                    ("polylock zookeeper acquire+release", polylock()),
                ],
            )
            .await,
        );
        rows.extend(
            interleaved(
                paced_n,
                &mut zk_server,
                Some(PACE),
                vec![(NAIVE_PACED, naive()), (POLYLOCK_ZK_PACED, polylock())],
            )
            .await,
        );
    }
    zclient.close().await;

    // Handoff: a holder releases while a waiter in another process is blocked.
    let exe = std::env::current_exe().unwrap();
    let handoffs = if quick { 10 } else { (n / 20).max(50) };
    let redis_handoff = extra::handoff(&exe, &redis_url, &format!("{name}-handoff"), handoffs).await;
    rows.push(stats(REDIS_HANDOFF, redis_handoff.granted.clone()).with_cpu(redis_handoff.cpu));
    let zk_handoff = extra::handoff(&exe, &zk_url, &format!("/{name}-handoff"), handoffs).await;
    rows.push(stats(ZK_HANDOFF, zk_handoff.granted.clone()).with_cpu(zk_handoff.cpu));
    let (zk_cold_exists, zk_floor) = extra::zk_handoff_floor(&zk_url, &format!("/{name}-floor"), handoffs).await;
    rows.push(stats(ZK_HANDOFF_FLOOR, zk_floor));
    let idle = extra::idle(&redis_url, &format!("{name}-idle"), if quick { 2 } else { 10 }).await;
    let extras = extra::everything_else(&redis_url, &zk_url, &name, quick).await;

    let p50 = |row: &str| rows.iter().find(|r| r.name == row).map_or(f64::NAN, |r| r.p50);
    let ping = p50("redis PING (raw round trip)");
    let scripts = p50("redis raw: polylock's acquire + leave scripts, no runtime");
    let exists = p50("zookeeper exists (raw round trip)");
    let sequential = p50("zookeeper naive lock raw: create, getChildren, delete, one after another");
    let naive = p50("zookeeper naive lock raw: create+watched getChildren pipelined, delete");
    let mut md = String::from(
        "| operation (Rust, loopback) | p50 µs | p99 µs | client CPU µs/op | server CPU µs/op | p50 ratio |\n|---|---:|---:|---:|---:|---|\n",
    );
    for r in &rows {
        let ratio = match r.name {
            "redis raw: polylock's acquire + leave scripts, no runtime" => {
                format!("{:.2}× two PINGs", r.p50 / (2.0 * ping))
            }
            "polylock redis acquire+release" => {
                format!("{:.2}× two PINGs, {:.2}× the raw scripts", r.p50 / (2.0 * ping), r.p50 / scripts)
            }
            "zookeeper naive lock raw: create, getChildren, delete, one after another"
            | "zookeeper naive lock raw: create+watched getChildren pipelined, delete"
            | ZK_HANDOFF_FLOOR => format!("{:.2}× exists", r.p50 / exists),
            "polylock zookeeper acquire+release" => format!(
                "{:.2}× the naive lock one request after another, {:.2}× pipelined",
                r.p50 / sequential,
                r.p50 / naive
            ),
            _ => String::new(),
        };
        let (client_cpu, server_cpu) = cpu_cells(r);
        md.push_str(&format!("| {} | {:.0} | {:.0} | {client_cpu} | {server_cpu} | {ratio} |\n", r.name, r.p50, r.p99));
    }
    md.push_str(&format!(
        "\n{n} iterations each after {} warm-up ({paced_n} paced, each after a {} ms pause: out of the latency, in the CPU; {handoffs} handoffs), servers on loopback. The Redis rows, and the ZooKeeper rows, ran interleaved: batches of {BATCH} taking turns, so that a ratio between them compares the operations, not the machine's load at two moments. Client CPU: this process's user + sys (getrusage, every thread) over each timed batch, per operation; handoffs: the holder's and the waiter's processes per round (the 20 ms quiet included). Server CPU: Redis `INFO cpu`, ZooKeeper's JVM threads from /proc. Handoff ratios: redis {:.2}× a PING, zookeeper {:.2}× an exists.\n\n",
        n / 10,
        PACE.as_millis(),
        p50(REDIS_HANDOFF) / ping,
        p50(ZK_HANDOFF) / exists
    ));
    md.push_str(&format!(
        "Idle: one client holding {} Redis locks (default lease, renewals running), no calls, over {:.0} s: {:.3}% of one core in the client, {} in the server.\n\n",
        idle.locks,
        idle.seconds,
        idle.client_core_pct,
        idle.server_core_pct.map_or("-".into(), |p| format!("{p:.3}%"))
    ));
    let zk_cold = p50_of(&zk_cold_exists);
    md.push_str(&format!(
        "ZooKeeper handoff floor: a raw delete to the watch event it fires on another session, after the same \
         20 ms of quiet, is {:.0} µs p50 ({:.1} hot exists, {:.1} cold ones: an exists after the same quiet takes \
         {zk_cold:.0}); polylock's handoff is {:.2}× it.\n\n",
        p50(ZK_HANDOFF_FLOOR),
        p50(ZK_HANDOFF_FLOOR) / exists,
        p50(ZK_HANDOFF_FLOOR) / zk_cold,
        p50(ZK_HANDOFF) / p50(ZK_HANDOFF_FLOOR)
    ));
    md.push_str(&handoff_breakdown(&redis_handoff, ping));
    md.push_str(&extras.markdown);
    print!("{md}");
    let json = serde_json::json!({
        "quick": quick,
        "latency": rows.iter().map(|r| {
            let (client, server) = r.cpu.per_op_us();
            let measured = r.cpu.ops > 0;
            (r.name.to_owned(), serde_json::json!({
                "p50_us": round1(r.p50),
                "p99_us": round1(r.p99),
                "client_cpu_us": measured.then(|| round1(client)),
                "server_cpu_us": server.filter(|_| measured).map(round1),
            }))
        }).collect::<serde_json::Map<_, _>>(),
        "idle": {
            "locks": idle.locks,
            "seconds": round1(idle.seconds),
            "client_core_pct": idle.client_core_pct,
            "server_core_pct": idle.server_core_pct,
        },
        "handoff_breakdown": breakdown_json(&redis_handoff),
        "zk_handoff_floor": {"cold_exists_p50_us": round1(zk_cold)},
        "extra": serde_json::from_str::<serde_json::Value>(&extras.json).unwrap(),
    });
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(format!("{out}/results.md"), &md).unwrap();
    std::fs::write(format!("{out}/results.json"), serde_json::to_string_pretty(&json).unwrap() + "\n").unwrap();
}

fn round1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

/// A row's CPU cells: client and server µs per op ("-" where not measured).
fn cpu_cells(r: &Stats) -> (String, String) {
    if r.cpu.ops == 0 {
        return ("-".into(), "-".into());
    }
    let (client, server) = r.cpu.per_op_us();
    (format!("{client:.1}"), server.map_or("-".into(), |s| format!("{s:.1}")))
}

const RAW_SCRIPTS_PACED: &str = "redis raw: polylock's acquire + leave scripts, no runtime, paced (2 ms pause)";
const POLYLOCK_REDIS_PACED: &str = "polylock redis acquire+release, paced (2 ms pause)";
const NAIVE_PACED: &str = "zookeeper naive lock raw: create+watched getChildren pipelined, delete, paced (2 ms pause)";
const POLYLOCK_ZK_PACED: &str = "polylock zookeeper acquire+release, paced (2 ms pause)";
const REDIS_HANDOFF: &str = "polylock redis handoff (waiter in another process)";
const ZK_HANDOFF: &str = "polylock zookeeper handoff (waiter in another process)";

/// The row of [`extra::zk_handoff_floor`]'s delete-to-event times.
const ZK_HANDOFF_FLOOR: &str = "zookeeper raw handoff: delete to the watch event on another session";

fn p50_of(v: &[Duration]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    stats("", v.to_vec()).p50
}

/// Where one Redis handoff's time goes, from the holder's release call (p50s
/// of the same handoffs; the message's arrival stamped in the waiter's
/// process by a raw subscriber thread), beside the hot and the cold PING.
fn handoff_breakdown(h: &extra::HandoffTimes, ping: f64) -> String {
    let (granted, released, pushed, cold) =
        (p50_of(&h.granted), p50_of(&h.released), p50_of(&h.pushed), p50_of(&h.cold_ping));
    format!(
        "Redis handoff breakdown (p50 µs from the holder's release call): the handoff's message reaches the \
         waiter's process at {pushed:.0} (the release script's request, its run, the publish); the holder's \
         release returns at {released:.0}; the waiter's acquire returns at {granted:.0}, {:.0} after the message \
         arrived (the waiter's client: read, table, wake the caller; {}). A PING is {ping:.0} in a hot loop and \
         {cold:.0} after the same 20 ms of quiet that precede each handoff: the handoff is {:.1} hot PINGs, \
         {:.1} cold ones.\n\n",
        granted - pushed,
        client_hops(h),
        granted / ping,
        granted / cold,
    )
}

/// The waiter's client's hops ([`polylock::trace::Hop::ALL`]), p50 µs from the release call.
fn client_hops(h: &extra::HandoffTimes) -> String {
    let [read, taken, sent, started, done] = h.hops.each_ref().map(|v| p50_of(v));
    format!(
        "its pub/sub connection reads the message at {read:.0}, its report task has it at {taken:.0}, hands the grant to the caller's channel at {sent:.0}, \
         has started the commands the table asked for after it at {started:.0} and spawned their task at {done:.0}"
    )
}

/// The JSON keys of the waiter's client's hops, in [`polylock::trace::Hop::ALL`] order.
const HOP_KEYS: [&str; 5] =
    ["read_p50_us", "report_taken_p50_us", "grant_sent_p50_us", "commands_started_p50_us", "report_done_p50_us"];

fn breakdown_json(h: &extra::HandoffTimes) -> serde_json::Value {
    let mut out = serde_json::json!({
        "pushed_p50_us": round1(p50_of(&h.pushed)),
        "released_p50_us": round1(p50_of(&h.released)),
        "granted_p50_us": round1(p50_of(&h.granted)),
        "cold_ping_p50_us": round1(p50_of(&h.cold_ping)),
    });
    for (k, v) in HOP_KEYS.iter().zip(&h.hops).filter(|(_, v)| !v.is_empty()) {
        out[*k] = round1(p50_of(v)).into();
    }
    out
}
