//! The Rust API against real Redis and ZooKeeper servers, each test on both.

use crate::support;

use std::time::Duration;

use polylock::{Client, Error, OwnerId};
use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn twenty_tasks_over_three_clients_lose_no_update() {
    for (backend, url) in backends() {
        assert_eq!(count_under_lock(&url, &unique("counter")).await, 200, "{backend}: lost updates");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reentrancy_needs_as_many_releases_as_acquires() {
    for (backend, url) in backends() {
        let name = unique("reentry");
        let c = client(&url).await;
        let other = client(&url).await;
        let lock = c.lock(&name).unwrap();
        let me = OwnerId(7);
        let g1 = lock.acquire_as(me, None).await.unwrap();
        let g2 = lock.acquire_as(me, None).await.unwrap();
        let g3 = lock.acquire_as(me, None).await.unwrap();
        assert_eq!(g1.fencing_token(), g3.fencing_token(), "{backend}: re-entry is the same grant");
        assert_eq!(lock.hold_count(me), 3);
        g3.release().await.unwrap();
        g2.release().await.unwrap();
        assert_eq!(lock.hold_count(me), 1);
        let theirs = other.lock(&name).unwrap();
        assert!(theirs.try_acquire(Duration::ZERO).await.unwrap().is_none(), "{backend}: still held after 2 of 3");
        g1.release().await.unwrap();
        let g = theirs.try_acquire(Duration::from_secs(5)).await.unwrap().expect("free after the last release");
        g.release().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn try_acquire_times_out_and_leaves_nothing() {
    for (backend, url) in backends() {
        let name = unique("timeout");
        let holder = client(&url).await;
        let waiter = client(&url).await;
        let g = holder.lock(&name).unwrap().acquire().await.unwrap();
        // Read once, at the moment a failure is returned: a failed attempt
        // is reported after it has left the server, never before.
        // Connected beforehand, so the read follows the return at once.
        let mut redis = if backend == "redis" { Some(raw_redis(&url).await) } else { None };
        let zk = if backend == "redis" { None } else { Some(raw_zk(&url).await) };
        let path = name.clone(); // unique() names start with '/'
        let mut only_the_holder = async || match (&mut redis, &zk) {
            (Some(r), _) => {
                let queue = &lock_keys(&name)[1..];
                let n: i64 = redis::cmd("EXISTS").arg(queue).query_async(r).await.unwrap();
                n == 0
            }
            (_, Some(z)) => z.list_children(&path).await.unwrap().len() == 1,
            _ => unreachable!(),
        };
        let lock = waiter.lock(&name).unwrap();
        let started = std::time::Instant::now();
        assert!(lock.try_acquire(Duration::from_millis(300)).await.unwrap().is_none());
        let waited = started.elapsed();
        assert!(waited >= Duration::from_millis(300), "{backend}: gave up early ({waited:?})");
        assert!(only_the_holder().await, "{backend}: a timed-out try left its place behind");
        match lock.acquire_as(OwnerId(1), Some(Duration::from_millis(50))).await {
            Err(Error::Timeout(n)) => assert_eq!(n, name),
            other => panic!("{backend}: {other:?}"),
        }
        assert!(only_the_holder().await, "{backend}: a timed-out acquire left its place behind");
        match lock.acquire_as(OwnerId(1), Some(Duration::ZERO)).await {
            Err(Error::WouldBlock(_)) => {}
            other => panic!("{backend}: {other:?}"),
        }
        assert!(only_the_holder().await, "{backend}: a failed try left its place behind");
        g.release().await.unwrap();
        let left = if backend == "redis" { redis_leftovers(&url, &name).await } else { zk_children(&url, &name).await };
        assert!(left.is_empty(), "{backend}: left behind after the release: {left:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_by_a_non_owner_is_an_error_and_the_lock_stays_held() {
    for (backend, url) in backends() {
        let name = unique("nonowner");
        let c = client(&url).await;
        let lock = c.lock(&name).unwrap();
        let g = lock.acquire_as(OwnerId(1), None).await.unwrap();
        match lock.release_as(OwnerId(2)).await {
            Err(Error::NotHeld(n)) => assert_eq!(n, name),
            other => panic!("{backend}: {other:?}"),
        }
        let s = c.status(&name).await.unwrap();
        assert!(s.held, "{backend}: a non-owner release freed the lock");
        assert_eq!(lock.hold_count(OwnerId(1)), 1);
        g.release().await.unwrap();
        // Releasing what nobody holds is an error too.
        assert!(matches!(lock.release_as(OwnerId(1)).await, Err(Error::NotHeld(_))));
    }
}

#[tokio::test]
async fn bad_names_and_urls_are_typed_errors() {
    let c = client(&redis_url()).await;
    for bad in ["", "a\0b", "a//b", "trailing/", &"x".repeat(1025)] {
        match c.lock(bad) {
            Err(Error::InvalidName(_)) => {}
            other => panic!("{bad:?}: {other:?}"),
        }
    }
    for bad in ["", "localhost:6379", "http://h", "redis://h:port", "zk://a:1,,b:2", "redis://h/notadb"] {
        match Client::connect(bad).await {
            Err(Error::InvalidUrl { .. }) => {}
            other => panic!("{bad:?}: {other:?}"),
        }
    }
    let opts = polylock::ClientOptions { connect_timeout: Duration::from_millis(500), ..Default::default() };
    for url in ["redis://127.0.0.1:1", "zk://127.0.0.1:1"] {
        let started = std::time::Instant::now();
        match Client::connect_with(url, opts.clone()).await {
            Err(Error::Connect { addr, .. }) => assert_eq!(addr, "127.0.0.1:1"),
            other => panic!("{url}: {other:?}"),
        }
        assert!(started.elapsed() < Duration::from_secs(3), "{url}: connect error took {:?}", started.elapsed());
    }
    let lease = polylock::LockOptions { lease: Some(Duration::from_millis(10)), ..Default::default() };
    assert!(matches!(c.lock_with("x", lease), Err(Error::InvalidOption(_))));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_tokens_strictly_increase_across_grants() {
    for (backend, url) in backends() {
        let name = unique("fence");
        let a = client(&url).await;
        let b = client(&url).await;
        let mut last = 0u64;
        for i in 0..20 {
            let c = if i % 2 == 0 { &a } else { &b };
            let g = c.lock(&name).unwrap().acquire().await.unwrap();
            assert!(g.fencing_token() > last, "{backend}: token {} after {last}", g.fencing_token());
            last = g.fencing_token();
            g.release().await.unwrap();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn layouts_match_redisson_and_curator() {
    // Redis: a hash at the name, field <client id>:<owner>, as Redisson's RLock.
    let url = redis_url();
    let name = unique("layout");
    let c = client(&url).await;
    let lock = c.lock(&name).unwrap();
    let g = lock.acquire_as(OwnerId(42), None).await.unwrap();
    let mut raw = raw_redis(&url).await;
    let kind: String = redis::cmd("TYPE").arg(&name).query_async(&mut raw).await.unwrap();
    assert_eq!(kind, "hash");
    let fields: std::collections::HashMap<String, i64> =
        redis::cmd("HGETALL").arg(&name).query_async(&mut raw).await.unwrap();
    assert_eq!(fields.len(), 1);
    let (field, count) = fields.into_iter().next().unwrap();
    assert_eq!(field, format!("{}:42", c.id()));
    assert_eq!(count, 1);
    assert_eq!(c.id().len(), 36, "a canonical UUID");
    let ttl: i64 = redis::cmd("PTTL").arg(&name).query_async(&mut raw).await.unwrap();
    assert!(ttl > 25_000 && ttl <= 30_000, "default lease 30 s, got {ttl} ms");
    g.release().await.unwrap();

    // ZooKeeper: P/_c_<uuid>-lock-<10 digits>, as Curator's InterProcessMutex.
    let url = zk_url();
    let c = client(&url).await;
    let g = c.lock(&name).unwrap().acquire().await.unwrap();
    let kids = zk_children(&url, &name).await;
    assert_eq!(kids.len(), 1);
    let node = &kids[0];
    assert!(node.starts_with("_c_"), "{node}");
    let (uuid, seq) = node[3..].split_once("-lock-").unwrap();
    assert_eq!(uuid.len(), 36, "{node}");
    assert_eq!(seq.len(), 10, "{node}");
    assert!(seq.chars().all(|ch| ch.is_ascii_digit()));
    let raw = raw_zk(&url).await;
    let (_, stat) = raw.get_data(&format!("{name}/{node}")).await.unwrap();
    assert_eq!(stat.czxid as u64, g.fencing_token(), "the token is the node's czxid");
    assert_ne!(stat.ephemeral_owner, 0, "an ephemeral node");
    g.release().await.unwrap();
    assert!(zk_children(&url, &name).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_in_one_process_queue_locally() {
    for (backend, url) in backends() {
        let name = unique("local-queue");
        let c = client(&url).await;
        let lock = c.lock(&name).unwrap();
        let first = lock.acquire_as(OwnerId(1), None).await.unwrap();
        let mut waiting = Vec::new();
        for o in 2..6 {
            let l = lock.clone();
            waiting.push(tokio::spawn(async move {
                let g = l.acquire_as(OwnerId(o), None).await.unwrap();
                g.release().await.unwrap();
            }));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        if backend == "zookeeper" {
            // One node for the holder; local waiters do not contend on the server.
            assert_eq!(zk_children(&url, &name).await.len(), 1, "local waiters created nodes");
        } else {
            let mut raw = raw_redis(&url).await;
            let queued: i64 =
                redis::cmd("ZCARD").arg(format!("polylock_queue:{{{name}}}")).query_async(&mut raw).await.unwrap();
            assert!(queued <= 1, "{queued} server-side waiters from one process");
        }
        first.release().await.unwrap();
        for w in waiting {
            tokio::time::timeout(Duration::from_secs(10), w).await.expect("a local waiter hung").unwrap();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_guard_releases_in_the_background() {
    for (backend, url) in backends() {
        let name = unique("drop");
        let c = client(&url).await;
        let g = c.lock(&name).unwrap().acquire().await.unwrap();
        drop(g);
        let freed = eventually(Duration::from_secs(3), || async { !c.status(&name).await.unwrap().held }).await;
        assert!(freed, "{backend}: a dropped guard kept the lock");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_reports_holder_token_and_waiters() {
    for (backend, url) in backends() {
        let name = unique("status");
        let c = client(&url).await;
        let other = client(&url).await;
        assert!(!c.status(&name).await.unwrap().held);
        let lock = c.lock(&name).unwrap();
        let g = lock.acquire_as(OwnerId(5), None).await.unwrap();
        let ol = other.lock(&name).unwrap();
        let w = tokio::spawn(async move { ol.acquire_as(OwnerId(6), None).await.map(|g| g.into_token()) });
        let s =
            eventually(Duration::from_secs(3), || async { c.status(&name).await.unwrap().waiters == Some(1) }).await;
        assert!(s, "{backend}: the waiter is not counted");
        let st = c.status(&name).await.unwrap();
        assert!(st.held);
        assert_eq!(st.holder.as_deref(), Some(lock.holder_id(OwnerId(5)).as_str()), "{backend}");
        assert_eq!(st.fencing_token, Some(g.fencing_token()), "{backend}");
        g.release().await.unwrap();
        let t = w.await.unwrap().unwrap();
        assert!(t > st.fencing_token.unwrap());
        other.lock(&name).unwrap().release_as(OwnerId(6)).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_acl_user_and_zookeeper_digest_auth() {
    // Redis: an ACL user of its own, then a wrong password.
    let url = redis_url();
    let user = format!("polylock-test-{}", std::process::id());
    let mut raw = raw_redis(&url).await;
    let _: () = redis::cmd("ACL")
        .arg(&["SETUSER", &user, "on", ">s3cret", "~*", "&*", "+@all"])
        .query_async(&mut raw)
        .await
        .unwrap();
    let authed = url.replacen("redis://", &format!("redis://{user}:s3cret@"), 1);
    let c = client(&authed).await;
    let name = unique("acl");
    let g = c.lock(&name).unwrap().acquire().await.unwrap();
    g.release().await.unwrap();
    let wrong = url.replacen("redis://", &format!("redis://{user}:wrong@"), 1);
    match Client::connect(&wrong).await {
        Err(Error::Connect { reason, .. }) => assert!(!reason.contains("wrong"), "the password leaked: {reason}"),
        other => panic!("{other:?}"),
    }
    let _: () = redis::cmd("ACL").arg(&["DELUSER", &user]).query_async(&mut raw).await.unwrap();

    // ZooKeeper: digest credentials from the URL's user info.
    let zk = zk_url().replacen("zk://", "zk://alice:s3cret@", 1);
    let c = client(&zk).await;
    let g = c.lock(&unique("digest")).unwrap().acquire().await.unwrap();
    g.release().await.unwrap();
}

/// rediss:// against a real TLS Redis with a private CA (certificates made
/// here with openssl; the server started here on a free loopback port).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rediss_with_a_private_ca() {
    let dir = std::env::temp_dir().join(format!("polylock-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let d = dir.to_str().unwrap();
    let sh = |script: &str| {
        let ok = std::process::Command::new("sh").arg("-c").arg(script).status().unwrap().success();
        assert!(ok, "{script}");
    };
    sh(&format!(
        "cd {d} && openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=polylock-test-ca -keyout ca.key -out ca.pem 2>/dev/null \
         && openssl req -newkey rsa:2048 -nodes -subj /CN=127.0.0.1 -keyout server.key -out server.csr 2>/dev/null \
         && printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\\n' > san.ext \
         && openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 -extfile san.ext -out server.pem 2>/dev/null"
    ));
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut server = std::process::Command::new("redis-server")
        .args(["--port", "0", "--bind", "127.0.0.1", "--save", "", "--tls-port", &port.to_string()])
        .args(["--tls-cert-file", &format!("{d}/server.pem"), "--tls-key-file", &format!("{d}/server.key")])
        .args(["--tls-ca-cert-file", &format!("{d}/ca.pem"), "--tls-auth-clients", "no"])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let url = format!("rediss://127.0.0.1:{port}?ca={d}/ca.pem");
    let up = eventually(Duration::from_secs(10), || async { Client::connect(&url).await.is_ok() }).await;
    let result = async {
        assert!(up, "the TLS Redis did not come up");
        let c = client(&url).await;
        let g = c.lock(&unique("tls")).unwrap().acquire().await.unwrap();
        assert!(g.fencing_token() > 0);
        g.release().await.unwrap();
        // Without the CA the server's certificate is refused.
        let plain = format!("rediss://127.0.0.1:{port}");
        assert!(matches!(Client::connect(&plain).await, Err(Error::Connect { .. })));
    }
    .await;
    let _ = server.kill();
    let _ = server.wait();
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// A release hands the lock straight to the first queued waiter and
/// publishes its fencing token as a plain integer (Lua's tostring would
/// print a microsecond-sized token in float notation, which the waiter
/// could not read, costing it a round trip).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_hands_over_to_the_first_waiter_with_an_integer_token() {
    let url = redis_url();
    let name = unique("handover");
    let c = client(&url).await;
    let g = c.lock(&name).unwrap().acquire().await.unwrap();
    // A waiter queued by hand: member `<field>|<claim id>`, its own channel.
    let member = "fake-client:1|00000000000000aa";
    let channel = format!("redisson_lock__channel:{{{name}}}:{member}");
    let mut raw = raw_redis(&url).await;
    let now_ms: u64 = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64;
    let _: () = redis::cmd("ZADD")
        .arg(format!("polylock_queue:{{{name}}}"))
        .arg(1)
        .arg(member)
        .query_async(&mut raw)
        .await
        .unwrap();
    let _: () = redis::cmd("ZADD")
        .arg(format!("polylock_queue_deadline:{{{name}}}"))
        .arg(now_ms + 30_000)
        .arg(member)
        .query_async(&mut raw)
        .await
        .unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let cfg = redis::AsyncConnectionConfig::new().set_push_sender(tx);
    let sub_client = redis::Client::open(format!("{url}/?protocol=resp3")).unwrap();
    let mut sub = sub_client.get_multiplexed_async_connection_with_config(&cfg).await.unwrap();
    sub.subscribe(&channel).await.unwrap();
    g.release().await.unwrap();
    let payload = loop {
        let push = tokio::time::timeout(Duration::from_secs(5), rx.recv()).await.expect("no handoff message").unwrap();
        if push.kind == redis::PushKind::Message {
            break redis::from_redis_value::<String>(push.data[1].clone()).unwrap();
        }
    };
    let token: u64 = payload.parse().unwrap_or_else(|_| panic!("token {payload:?} is not a plain integer"));
    let fence: u64 = redis::cmd("GET").arg(format!("polylock_fence:{{{name}}}")).query_async(&mut raw).await.unwrap();
    assert_eq!(token, fence, "the handed-over token is the counter's latest value");
    let holder: Vec<String> = redis::cmd("HKEYS").arg(&name).query_async(&mut raw).await.unwrap();
    assert_eq!(holder, vec!["fake-client:1".to_owned()], "the lock went to the waiter's field");
    let _: () = redis::cmd("DEL").arg(&name).query_async(&mut raw).await.unwrap();
}
