//! polylock from Rust beside the floor it stands on, in one run against
//! the same servers:
//! - Redis: raw `PING` round trip; polylock uncontended acquire+release
//!   (one script call each, so the floor is two round trips);
//! - ZooKeeper: raw `exists`; the naive lock issued raw (create ephemeral
//!   sequential + getChildren pipelined, then delete); polylock acquire+release.
//!
//! Usage: polylock-bench [--iterations N] [--out DIR]
//! Reads POLYLOCK_TEST_REDIS and POLYLOCK_TEST_ZK.

use std::time::{Duration, Instant};

use polylock::{Client, OwnerId};
use zookeeper_client as zk;

mod extra;

struct Stats {
    name: &'static str,
    p50: f64,
    p99: f64,
}

fn stats(name: &'static str, mut v: Vec<Duration>) -> Stats {
    v.sort();
    let at = |q: f64| v[((v.len() as f64 - 1.0) * q).round() as usize].as_secs_f64() * 1e6;
    Stats { name, p50: at(0.5), p99: at(0.99) }
}

async fn time_n<F, Fut>(n: usize, mut f: F) -> Vec<Duration>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    for _ in 0..n / 10 {
        f().await; // warm-up
    }
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        f().await;
        out.push(t.elapsed());
    }
    out
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
    let arg = |k: &str| args.iter().position(|a| a == k).and_then(|i| args.get(i + 1)).cloned();
    let n: usize = arg("--iterations").map_or(2000, |v| v.parse().expect("--iterations N"));
    let out = arg("--out").unwrap_or_else(|| "bench/rust".into());
    let redis_url = std::env::var("POLYLOCK_TEST_REDIS").expect("POLYLOCK_TEST_REDIS");
    let zk_url = std::env::var("POLYLOCK_TEST_ZK").expect("POLYLOCK_TEST_ZK");
    let name = format!("bench-rust-{}", std::process::id());

    let mut rows = Vec::new();
    // Redis floor: PING on a multiplexed connection.
    let mut raw = redis::Client::open(redis_url.as_str()).unwrap().get_multiplexed_async_connection().await.unwrap();
    rows.push(stats(
        "redis PING (raw round trip)",
        time_n(n, || {
            let mut c = raw.clone();
            async move {
                let _: String = redis::cmd("PING").query_async(&mut c).await.unwrap();
            }
        })
        .await,
    ));
    // The protocol floor: polylock's two scripts issued raw, no runtime.
    {
        use polylock_core::{redis as proto, LockName};
        let n_ = proto::RedisKeys::of(&LockName::new(&name).unwrap());
        let acquire = redis::Script::new(proto::ACQUIRE.source);
        let leave = redis::Script::new(proto::LEAVE.source);
        let field = "raw-bench:1".to_owned();
        rows.push(stats(
            "redis raw: polylock's acquire + leave scripts, no runtime",
            time_n(n, || {
                let mut c = raw.clone();
                let (acquire, leave, n_, field) = (&acquire, &leave, &n_, field.clone());
                async move {
                    let _: redis::Value = acquire
                        .key(n_.lock())
                        .key(n_.fence().to_owned())
                        .key(n_.queue().to_owned())
                        .key(n_.queue_deadline().to_owned())
                        .arg(&field)
                        .arg(30000)
                        .arg("1")
                        .arg(30000)
                        .arg(n_.channel().to_owned())
                        .arg(format!("{field}|0"))
                        .invoke_async(&mut c)
                        .await
                        .unwrap();
                    let _: redis::Value = leave
                        .key(n_.lock())
                        .key(n_.queue().to_owned())
                        .key(n_.queue_deadline().to_owned())
                        .key(n_.fence().to_owned())
                        .arg(&field)
                        .arg(n_.channel().to_owned())
                        .arg(n_.channel().to_owned())
                        .arg(format!("{field}|0"))
                        .invoke_async(&mut c)
                        .await
                        .unwrap();
                }
            })
            .await,
        ));
    }
    let client = Client::connect(&redis_url).await.unwrap();
    let lock = client.lock(&name).unwrap();
    rows.push(stats(
        "polylock redis acquire+release",
        time_n(n, || {
            let lock = lock.clone();
            async move {
                let g = lock.acquire_as(OwnerId(1), None).await.unwrap();
                g.release().await.unwrap();
            }
        })
        .await,
    ));
    let _: () = redis::cmd("DEL").arg(format!("polylock_fence:{{{name}}}")).query_async(&mut raw).await.unwrap();

    // ZooKeeper floor: exists, and the naive lock issued raw.
    let z = zk::Client::connect(&host_port(&zk_url)).await.unwrap();
    let zpath = format!("/{name}");
    z.mkdir(&zpath, &zk::CreateMode::Container.with_acls(zk::Acls::anyone_all())).await.unwrap();
    rows.push(stats(
        "zookeeper exists (raw round trip)",
        time_n(n, || {
            let z = z.clone();
            let p = zpath.clone();
            async move {
                z.check_stat(&p).await.unwrap();
            }
        })
        .await,
    ));
    rows.push(stats(
        "zookeeper naive lock raw: create+getChildren pipelined, delete",
        time_n(n, || {
            let z = z.clone();
            let p = zpath.clone();
            async move {
                let mode = zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::anyone_all());
                let prefix = format!("{p}/lock-");
                let create = z.create(&prefix, b"", &mode);
                let list = z.list_children(&p);
                let ((_, seq), _) = (create.await.unwrap(), list.await.unwrap());
                z.delete(&format!("{prefix}{seq}"), None).await.unwrap();
            }
        })
        .await,
    ));
    let zclient = Client::connect(&zk_url).await.unwrap();
    let zlock = zclient.lock(&zpath).unwrap();
    rows.push(stats(
        "polylock zookeeper acquire+release",
        time_n(n, || {
            let lock = zlock.clone();
            async move {
                let g = lock.acquire_as(OwnerId(1), None).await.unwrap();
                g.release().await.unwrap();
            }
        })
        .await,
    ));

    // Handoff: a holder releases while a waiter in another process is blocked.
    let exe = std::env::current_exe().unwrap();
    let handoffs = (n / 20).max(50);
    let redis_handoff = extra::handoff(&exe, &redis_url, &format!("{name}-handoff"), handoffs).await;
    rows.push(stats("polylock redis handoff (waiter in another process)", redis_handoff.granted.clone()));
    rows.push(stats(
        "polylock zookeeper handoff (waiter in another process)",
        extra::handoff(&exe, &zk_url, &format!("/{name}-handoff"), handoffs).await.granted,
    ));
    let extras = extra::everything_else(&redis_url, &zk_url, &name).await;

    let ping = rows[0].p50;
    let scripts = rows[1].p50;
    let exists = rows[3].p50;
    let naive = rows[4].p50;
    let mut md = String::from("| operation (Rust, loopback) | p50 µs | p99 µs | p50 ratio |\n|---|---:|---:|---|\n");
    for (i, r) in rows.iter().enumerate() {
        let ratio = match i {
            1 => format!("{:.2}× two PINGs", r.p50 / (2.0 * ping)),
            2 => format!("{:.2}× two PINGs, {:.2}× the raw scripts", r.p50 / (2.0 * ping), r.p50 / scripts),
            4 => format!("{:.2}× exists", r.p50 / exists),
            5 => format!("{:.2}× the naive raw lock", r.p50 / naive),
            _ => String::new(),
        };
        md.push_str(&format!("| {} | {:.0} | {:.0} | {} |\n", r.name, r.p50, r.p99, ratio));
    }
    md.push_str(&format!(
        "\n{n} iterations each after {} warm-up ({handoffs} handoffs), servers on loopback. Handoff ratios: redis {:.2}× a PING, zookeeper {:.2}× an exists.\n\n",
        n / 10,
        rows[6].p50 / ping,
        rows[7].p50 / exists
    ));
    md.push_str(&handoff_breakdown(&redis_handoff, ping));
    md.push_str(&extras.markdown);
    print!("{md}");
    let json = format!(
        "{{\n  \"latency\": {{\n{}\n  }},\n  \"extra\": {}\n}}\n",
        rows.iter()
            .map(|r| format!("    \"{}\": {{\"p50_us\": {:.1}, \"p99_us\": {:.1}}}", r.name, r.p50, r.p99))
            .collect::<Vec<_>>()
            .join(",\n"),
        extras.json
    );
    let json = json.replacen(
        "\n  \"extra\"",
        &format!("\n  \"handoff_breakdown\": {},\n  \"extra\"", breakdown_json(&redis_handoff)),
        1,
    );
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(format!("{out}/results.md"), &md).unwrap();
    std::fs::write(format!("{out}/results.json"), json).unwrap();
}

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
         arrived (the waiter's client: read, table, wake the caller). A PING is {ping:.0} in a hot loop and \
         {cold:.0} after the same 20 ms of quiet that precede each handoff: the handoff is {:.1} hot PINGs, \
         {:.1} cold ones.\n\n",
        granted - pushed,
        granted / ping,
        granted / cold,
    )
}

fn breakdown_json(h: &extra::HandoffTimes) -> String {
    format!(
        "{{\"pushed_p50_us\": {:.1}, \"released_p50_us\": {:.1}, \"granted_p50_us\": {:.1}, \"cold_ping_p50_us\": {:.1}}}",
        p50_of(&h.pushed),
        p50_of(&h.released),
        p50_of(&h.granted),
        p50_of(&h.cold_ping)
    )
}
