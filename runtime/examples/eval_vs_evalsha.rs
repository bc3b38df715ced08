//! What sending the script source on every call costs: the uncontended
//! acquire + release pair of polylock's Redis protocol (its real ACQUIRE
//! and LEAVE scripts, on one multiplexed connection as the runtime uses),
//! sent as EVAL with the source and as EVALSHA of a loaded script (what
//! the runtime sends): the client's latency; the server's time per pair
//! from its own `INFO commandstats` (every command's usec, those inside
//! scripts too, as bench/jvm's server-work rows count it), which leaves
//! out what the server does before a command runs, hashing an EVAL's
//! source among it; and the server's CPU per pair (`INFO cpu`, user + sys:
//! everything, reading and answering included). With PACE_US, each pair is
//! followed by that pause, as those rows pace theirs (1000): the server's
//! caches cool between pairs, as between a service's real calls.
//! `cargo run --release -p polylock --example eval_vs_evalsha -- REDIS_URL [N] [PACE_US]`

use std::time::{Duration, Instant};

use polylock_core::redis::{ACQUIRE, LEAVE};
use polylock_core::{LockName, Nonce, OwnerId};

/// Calls and usec of every command the server ran since it started
/// (`INFO` itself left out), and its CPU time in µs (user + sys).
async fn server_work(conn: &mut redis::aio::MultiplexedConnection) -> (u64, u64, u64) {
    let cpu: String = redis::cmd("INFO").arg("cpu").query_async(conn).await.unwrap();
    let cpu_us = cpu
        .lines()
        .filter_map(|l| l.strip_prefix("used_cpu_user:").or_else(|| l.strip_prefix("used_cpu_sys:")))
        .map(|v| (v.trim().parse::<f64>().unwrap() * 1e6) as u64)
        .sum();
    let info: String = redis::cmd("INFO").arg("commandstats").query_async(conn).await.unwrap();
    let (mut calls, mut usec) = (0, 0);
    for line in info.lines().filter(|l| l.starts_with("cmdstat_") && !l.starts_with("cmdstat_info:")) {
        for kv in line.split_once(':').map_or("", |(_, rest)| rest).split(',') {
            match kv.split_once('=') {
                Some(("calls", v)) => calls += v.parse::<u64>().unwrap(),
                Some(("usec", v)) => usec += v.parse::<u64>().unwrap(),
                _ => {}
            }
        }
    }
    (calls, usec, cpu_us)
}

fn p(v: &mut [Duration], q: f64) -> f64 {
    v.sort();
    v[((v.len() as f64 - 1.0) * q).round() as usize].as_secs_f64() * 1e6
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let url = args.get(1).expect("REDIS_URL");
    let n: usize = args.get(2).map_or(5000, |v| v.parse().expect("N"));
    let pace = Duration::from_micros(args.get(3).map_or(0, |v| v.parse().expect("PACE_US")));
    let mut conn = redis::Client::open(url.as_str()).unwrap().get_multiplexed_async_connection().await.unwrap();
    let name = LockName::new(&format!("bench/eval-{}", std::process::id())).unwrap();
    let keys = polylock_core::redis::RedisKeys::of(&name);
    let field = polylock_core::holder_id(Nonce(1), OwnerId(1));
    let member = format!("{field}|0000000000000001");
    let acquire_keys =
        [keys.lock().to_owned(), keys.fence().to_owned(), keys.queue().to_owned(), keys.queue_deadline().to_owned()];
    let acquire_args =
        [field.clone(), "30000".into(), "1".into(), "30000".into(), keys.channel().to_owned(), member.clone()];
    let leave_keys =
        [keys.lock().to_owned(), keys.queue().to_owned(), keys.queue_deadline().to_owned(), keys.fence().to_owned()];
    let leave_args = [field.clone(), keys.channel().to_owned(), keys.channel().to_owned(), member.clone()];
    let mut shas = Vec::new();
    for s in [&ACQUIRE, &LEAVE] {
        let sha: String = redis::cmd("SCRIPT").arg("LOAD").arg(s.source).query_async(&mut conn).await.unwrap();
        shas.push(sha);
    }
    for round in 0..4 {
        for by_source in [true, false] {
            let mut times = Vec::with_capacity(n);
            let mut before = (0, 0, 0);
            for i in 0..n + n / 10 {
                if i == n / 10 {
                    before = server_work(&mut conn).await;
                }
                let t = Instant::now();
                for (k, (keys, args)) in
                    [(&acquire_keys[..], &acquire_args[..]), (&leave_keys[..], &leave_args[..])].into_iter().enumerate()
                {
                    let mut c = if by_source { redis::cmd("EVAL") } else { redis::cmd("EVALSHA") };
                    if by_source {
                        c.arg([&ACQUIRE, &LEAVE][k].source);
                    } else {
                        c.arg(&shas[k]);
                    }
                    c.arg(keys.len()).arg(keys).arg(args);
                    let _: redis::Value = c.query_async(&mut conn).await.unwrap();
                }
                if i >= n / 10 {
                    times.push(t.elapsed());
                }
                if !pace.is_zero() {
                    // A thread sleep, not a tokio timer (whole milliseconds):
                    // nothing is in flight on the connection meanwhile.
                    std::thread::sleep(pace);
                }
            }
            let after = server_work(&mut conn).await;
            let per = |i: usize| ([after.0, after.1, after.2][i] - [before.0, before.1, before.2][i]) as f64 / n as f64;
            let how = if by_source { "EVAL source" } else { "EVALSHA    " };
            println!(
                "round {round} {how}: acquire+release p50 {:.1} us, p99 {:.1} us; server {:.1} commands {:.1} usec, CPU {:.1} us ({n} pairs)",
                p(&mut times, 0.5),
                p(&mut times, 0.99),
                per(0),
                per(1),
                per(2)
            );
        }
    }
}
