//! Shared by the integration tests: where the servers are, how to look at
//! them directly, and a TCP proxy that can cut a client off (a partition).

#![allow(dead_code)]

use std::sync::atomic::Ordering;
use std::time::Duration;

use polylock::{Client, ClientOptions};

pub fn redis_url() -> String {
    std::env::var("POLYLOCK_TEST_REDIS").expect("POLYLOCK_TEST_REDIS: run `eval \"$(scripts/services start)\"` first")
}

pub fn zk_url() -> String {
    std::env::var("POLYLOCK_TEST_ZK").expect("POLYLOCK_TEST_ZK: run `eval \"$(scripts/services start)\"` first")
}

pub fn redis2_url() -> Option<String> {
    std::env::var("POLYLOCK_TEST_REDIS2").ok()
}

/// The Sentinel set's URL (`scripts/services start --sentinel`), if running.
pub fn sentinel_url() -> Option<String> {
    std::env::var("POLYLOCK_TEST_SENTINEL").ok()
}

/// host:port of each sentinel in a `redis+sentinel://` URL.
pub fn sentinels(url: &str) -> Vec<String> {
    let rest = url.split("://").nth(1).unwrap();
    rest.split('/').next().unwrap().split(',').map(str::to_owned).collect()
}

/// The master name of a `redis+sentinel://` URL.
pub fn master_name(url: &str) -> String {
    url.rsplit('/').next().unwrap().split('?').next().unwrap().to_owned()
}

/// host:port of the master as the first answering sentinel names it.
pub async fn master_addr(url: &str) -> String {
    for s in sentinels(url) {
        let Ok(Ok(mut c)) = tokio::time::timeout(
            Duration::from_secs(2),
            redis::Client::open(format!("redis://{s}")).unwrap().get_multiplexed_async_connection(),
        )
        .await
        else {
            continue;
        };
        let named: redis::RedisResult<Option<(String, u16)>> =
            redis::cmd("SENTINEL").arg("GET-MASTER-ADDR-BY-NAME").arg(master_name(url)).query_async(&mut c).await;
        if let Ok(Some((host, port))) = named {
            return format!("{host}:{port}");
        }
    }
    panic!("no sentinel of {url} names a master");
}

/// `redis://host:port` of the master that serves `key`'s slot in the
/// cluster of a `redis+cluster://` URL: the node the first seed redirects
/// a read of `key` to (`MOVED`, as `redis-cli -c` follows it), or that seed
/// when it serves the slot itself.
pub async fn slot_master(url: &str, key: &str) -> String {
    let seed = url.split("://").nth(1).unwrap().rsplit('@').next().unwrap().split(['/', '?']).next().unwrap();
    let seed = format!("redis://{}", seed.split(',').next().unwrap());
    let read: redis::RedisResult<i64> = redis::cmd("EXISTS").arg(key).query_async(&mut raw_redis(&seed).await).await;
    match read {
        Ok(_) => seed,
        Err(e) => match e.redirect_node() {
            Some((addr, _slot)) => format!("redis://{addr}"),
            None => panic!("{seed}: EXISTS {key}: {e}"),
        },
    }
}

/// Both backends, for tests that must hold on each.
pub fn backends() -> Vec<(&'static str, String)> {
    vec![("redis", redis_url()), ("zookeeper", zk_url())]
}

/// A lock name no other test uses.
pub fn unique(prefix: &str) -> String {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    format!("/polylock-test/{prefix}-{}-{n}", std::process::id())
}

pub async fn client(url: &str) -> Client {
    Client::connect(url).await.unwrap_or_else(|e| panic!("connect {url}: {e}"))
}

pub async fn client_with(url: &str, opts: ClientOptions) -> Client {
    Client::connect_with(url, opts).await.unwrap_or_else(|e| panic!("connect {url}: {e}"))
}

/// host:port of a redis:// or zk:// URL with one host.
pub fn host_port(url: &str) -> String {
    url.split("://").nth(1).unwrap().split('/').next().unwrap().to_owned()
}

pub async fn raw_redis(url: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(url).unwrap().get_multiplexed_async_connection().await.unwrap()
}

/// Calls per command name the server has run since it started, those
/// inside scripts included (`INFO commandstats`; `INFO` itself left out).
pub async fn command_calls(raw: &mut redis::aio::MultiplexedConnection) -> std::collections::HashMap<String, u64> {
    let info: String = redis::cmd("INFO").arg("commandstats").query_async(raw).await.unwrap();
    info.lines()
        .filter_map(|l| l.strip_prefix("cmdstat_")?.split_once(':'))
        .filter(|(cmd, _)| *cmd != "info")
        .map(|(cmd, rest)| {
            let calls = rest.split(',').find_map(|kv| kv.strip_prefix("calls=")).and_then(|v| v.parse().ok());
            (cmd.to_owned(), calls.unwrap_or(0))
        })
        .collect()
}

pub async fn raw_zk(url: &str) -> zookeeper_client::Client {
    zookeeper_client::Client::connect(&host_port(url)).await.unwrap()
}

/// The keys our protocol may leave on Redis for a name without braces,
/// except the fence counter: the lock and its queue keys.
pub fn lock_keys(name: &str) -> [String; 3] {
    [name.to_owned(), format!("polylock_queue:{{{name}}}"), format!("polylock_queue_deadline:{{{name}}}")]
}

/// Everything our protocol may leave on Redis for `name`, except the fence
/// counter: the mutex's keys, a read-write lock's queue keys, and any
/// reader timeout key (`{name}:*:rwlock_timeout:*`).
pub async fn redis_leftovers(url: &str, name: &str) -> Vec<String> {
    let mut c = raw_redis(url).await;
    let mut left = Vec::new();
    let rw_queue = [format!("polylock_rwqueue:{{{name}}}"), format!("polylock_rwqueue_deadline:{{{name}}}")];
    for key in lock_keys(name).into_iter().chain(rw_queue) {
        let n: i64 = redis::cmd("EXISTS").arg(&key).query_async(&mut c).await.unwrap();
        if n > 0 {
            left.push(key);
        }
    }
    let pattern = format!("{{{name}}}:*:rwlock_timeout:*");
    let timeouts: Vec<String> = redis::cmd("KEYS").arg(pattern).query_async(&mut c).await.unwrap();
    left.extend(timeouts);
    left
}

/// The children of a lock's ZooKeeper node (empty if the node is gone).
pub async fn zk_children(url: &str, name: &str) -> Vec<String> {
    let c = raw_zk(url).await;
    let path = if name.starts_with('/') { name.to_owned() } else { format!("/{name}") };
    c.list_children(&path).await.unwrap_or_default()
}

/// Polls `check` until it holds or `within` passes.
pub async fn eventually<F, Fut>(within: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let end = tokio::time::Instant::now() + within;
    loop {
        if check().await {
            return true;
        }
        if tokio::time::Instant::now() > end {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A cuttable loopback proxy (the runtime's own fault injector).
pub struct Proxy(polylock::fault::Proxy);

impl Proxy {
    pub async fn start(target: &str) -> Proxy {
        Proxy(polylock::fault::Proxy::start(target).await.unwrap())
    }

    /// Same URL scheme, through the proxy.
    pub fn url(&self, scheme: &str) -> String {
        format!("{scheme}://127.0.0.1:{}", self.0.port())
    }

    pub fn cut(&self) {
        self.0.cut();
    }

    /// Connections through the proxy that neither side has closed.
    pub fn open_connections(&self) -> usize {
        self.0.open_connections()
    }

    pub fn restore(&self) {
        self.0.restore();
    }
}

/// 20 tasks over 3 clients of `url`, 10 turns each, each turn a
/// read-modify-write of one counter under the lock `name` that loses
/// updates unless the lock excludes. Returns the counter: 200 if none was lost.
pub async fn count_under_lock(url: &str, name: &str) -> u64 {
    use std::sync::atomic::AtomicU64;
    let clients = [client(url).await, client(url).await, client(url).await];
    let counter = std::sync::Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for i in 0..20 {
        let lock = clients[i % 3].lock(name).unwrap();
        let counter = counter.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..10 {
                let g = lock.acquire().await.unwrap();
                let v = counter.load(Ordering::SeqCst);
                tokio::task::yield_now().await;
                tokio::time::sleep(Duration::from_micros(200)).await;
                counter.store(v + 1, Ordering::SeqCst);
                g.release().await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    counter.load(Ordering::SeqCst)
}
