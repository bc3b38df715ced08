//! One worker of the demo and the cross-language suite (the Rust one; the
//! Python, Node and Java workers follow the same protocol):
//! `demo_worker --url URL --lock NAME --resource-url REDIS_URL --rounds N --id ID`
//! For each round: acquire, read the resource's count, write count+1 through
//! the fencing-checked script (demo/resource.lua), release; print one JSON
//! line per critical section with start/end on CLOCK_MONOTONIC.

use std::time::Duration;

use polylock::Client;

fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes into the timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |k: &str| args.iter().position(|a| a == k).and_then(|i| args.get(i + 1)).cloned();
    let url = arg("--url").expect("--url");
    let name = arg("--lock").expect("--lock");
    let resource_url = arg("--resource-url").expect("--resource-url");
    let rounds: usize = arg("--rounds").map_or(5, |v| v.parse().unwrap());
    let id = arg("--id").unwrap_or_else(|| format!("rust-{}", std::process::id()));
    let backend = if url.starts_with("zk") { "zookeeper" } else { "redis" };
    let resource = format!("demo:resource:{backend}:{name}");
    let script = redis::Script::new(include_str!("../../demo/resource.lua"));
    let mut r = redis::Client::open(resource_url.as_str()).unwrap().get_multiplexed_async_connection().await.unwrap();

    let client = Client::connect(&url).await.unwrap_or_else(|e| panic!("{e}"));
    let lock = client.lock(&name).unwrap();
    for _ in 0..rounds {
        let guard = lock.acquire().await.unwrap();
        let start = monotonic_ns();
        let count: Option<i64> = redis::cmd("HGET").arg(&resource).arg("count").query_async(&mut r).await.unwrap();
        tokio::time::sleep(Duration::from_millis(2)).await; // widen the window a lost update would need
        let accepted: i64 = script
            .key(&resource)
            .arg(guard.fencing_token())
            .arg(count.unwrap_or(0) + 1)
            .invoke_async(&mut r)
            .await
            .unwrap();
        let end = monotonic_ns();
        println!(
            "{{\"worker\": \"{id}\", \"lang\": \"rust\", \"backend\": \"{backend}\", \"token\": {}, \"start_ns\": {start}, \"end_ns\": {end}, \"accepted\": {}}}",
            guard.fencing_token(),
            accepted == 1
        );
        guard.release().await.unwrap();
    }
    client.close().await;
}
