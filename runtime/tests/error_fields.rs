//! What a binding reads off an `Error` to build its language's error: the
//! stable kind and the structured fields, from real failures against real
//! servers (never from the message text).

use crate::support;

use std::time::Duration;

use polylock::{Client, ClientOptions, ErrorKind, LossReason};
use support::*;

/// An unreachable server: kind `connect`, the address that failed, a reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_server_names_its_address() {
    let opts = ClientOptions { connect_timeout: Duration::from_secs(2), ..Default::default() };
    for url in ["redis://127.0.0.1:1", "zk://127.0.0.1:1"] {
        let e = Client::connect_with(url, opts.clone()).await.err().unwrap_or_else(|| panic!("{url} connected"));
        assert_eq!((e.kind(), e.kind().as_str()), (ErrorKind::Connect, "connect"), "{url}: {e:?}");
        assert_eq!(e.address(), Some("127.0.0.1:1"), "{url}: {e:?}");
        assert!(e.reason().is_some_and(|r| !r.is_empty()), "{url}: {e:?}");
        assert_eq!(e.lock_name(), None);
    }
}

/// A malformed URL: kind `invalid_url`, the URL and what is wrong with it.
#[tokio::test]
async fn a_malformed_url_names_itself_and_the_reason() {
    let e = Client::connect("mysql://127.0.0.1:1").await.expect_err("an unknown scheme connected");
    assert_eq!(e.kind().as_str(), "invalid_url");
    assert_eq!(e.url(), Some("mysql://127.0.0.1:1"));
    assert!(e.reason().is_some_and(|r| !r.is_empty()), "{e:?}");
}

/// A loss: kind `lost`, the lock's name, the typed reason and its words.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loss_names_the_lock_and_the_reason() {
    let name = unique("error-fields-lost");
    let opts = ClientOptions { lease: Duration::from_millis(300), ..Default::default() };
    let client = client_with(&redis_url(), opts).await;
    let guard = client.lock(&name).unwrap().acquire().await.unwrap();
    let mut raw = raw_redis(&redis_url()).await;
    let _: () = redis::cmd("DEL").arg(&name).query_async(&mut raw).await.unwrap();
    tokio::time::timeout(Duration::from_secs(5), guard.lost()).await.expect("loss never reported");
    let e = guard.release().await.expect_err("a lost hold released cleanly");
    assert_eq!((e.kind(), e.kind().as_str()), (ErrorKind::Lost, "lost"), "{e:?}");
    assert_eq!(e.lock_name(), Some(name.as_str()));
    assert_eq!(e.loss_reason(), Some(LossReason::RenewalRefused));
    assert_eq!(e.reason(), Some(LossReason::RenewalRefused.to_string()));
    assert_eq!(e.address(), None);
    client.close().await;
}
