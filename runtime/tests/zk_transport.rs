//! The ZooKeeper transport's hot-path costs, counted in this process, not
//! timed (issue 16; third_party/zookeeper-client/POLYLOCK.md): every
//! request leaves at once (`TCP_NODELAY`: with Nagle on, a lock's
//! `getChildren` waited in the kernel behind its `create`'s ACK), and a
//! reply wakes no thread outside the runtime (upstream's sockets waited on
//! async-io's reactor thread, which woke the runtime's thread in turn).
//!
//! A binary of its own: it reads every socket and thread of the process.

mod support;

use std::mem::ManuallyDrop;
use std::net::TcpStream;
use std::os::fd::FromRawFd;

use polylock::OwnerId;
use support::*;

/// This process's TCP sockets connected to `port`, as borrowed streams.
fn sockets_to(port: u16) -> Vec<ManuallyDrop<TcpStream>> {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        // Not closed on drop: the fd belongs to whoever opened it.
        .map(|fd| ManuallyDrop::new(unsafe { TcpStream::from_raw_fd(fd) }))
        .filter(|s| s.peer_addr().is_ok_and(|a| a.port() == port))
        .collect()
}

fn zk_port(url: &str) -> u16 {
    host_port(url).rsplit(':').next().unwrap().parse().unwrap()
}

#[tokio::test]
async fn every_zookeeper_connection_sends_without_delay() {
    let url = zk_url();
    let client = client(&url).await;
    let lock = client.lock(&unique("nodelay")).unwrap();
    lock.acquire_as(OwnerId(1), None).await.unwrap().release().await.unwrap();
    let sockets = sockets_to(zk_port(&url));
    assert!(!sockets.is_empty(), "no socket to ZooKeeper found");
    for s in &sockets {
        assert!(s.nodelay().unwrap(), "a ZooKeeper connection has Nagle's algorithm on: {:?}", s.local_addr());
    }
}

/// Sleeps (voluntary context switches) so far of this process's threads
/// other than the runtime's workers and the test harness's threads.
fn sleeps_outside_the_runtime() -> u64 {
    let tests =
        ["every_zookeeper_connection_sends_without_delay", "a_zookeeper_reply_wakes_no_thread_outside_the_runtime"];
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| {
            let dir = t.ok()?.path();
            // Kernel thread names keep 15 bytes.
            let name = std::fs::read_to_string(dir.join("comm")).ok()?.trim().to_owned();
            if name == "tokio-rt-worker"
                || tests.iter().any(|t| t.starts_with(&name))
                || dir.ends_with(std::process::id().to_string())
            {
                return None;
            }
            let status = std::fs::read_to_string(dir.join("status")).ok()?;
            status.lines().find_map(|l| l.strip_prefix("voluntary_ctxt_switches:")?.trim().parse::<u64>().ok())
        })
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zookeeper_reply_wakes_no_thread_outside_the_runtime() {
    let url = zk_url();
    let client = client(&url).await;
    let lock = client.lock(&unique("wakes")).unwrap();
    for _ in 0..10 {
        lock.acquire_as(OwnerId(1), None).await.unwrap().release().await.unwrap();
    }
    const PAIRS: u64 = 100;
    let before = sleeps_outside_the_runtime();
    for _ in 0..PAIRS {
        lock.acquire_as(OwnerId(1), None).await.unwrap().release().await.unwrap();
    }
    let slept = sleeps_outside_the_runtime() - before;
    // Measured: 0 to 2 (a timer's tick); upstream's reactor thread, about 3 per pair.
    assert!(
        slept < PAIRS / 5,
        "threads outside the runtime slept {slept} times in {PAIRS} ZooKeeper acquire+release pairs"
    );
}
