//! The handoff trace the benchmark's Redis breakdown is built from
//! (`polylock::trace`, feature `handoff-trace`): one real handoff on the
//! Redis of `scripts/services` must stamp every hop of the waiter's
//! message, after the release call and in the order the breakdown prints
//! them. A stamp moved, dropped or set by another push (a subscription's
//! confirmation once overwrote the read stamp) fails here, not as a
//! quietly wrong row in bench/REPORT.md.

use std::time::Duration;

use polylock::trace::{now_ns, Hop};
use polylock::{Client, OwnerId};

fn redis_url() -> String {
    std::env::var("POLYLOCK_TEST_REDIS").expect("POLYLOCK_TEST_REDIS: run `eval \"$(scripts/services start)\"` first")
}

/// Until a channel matching `pattern` has a subscriber (`listened`), or none has.
async fn until_channels(raw: &mut redis::aio::MultiplexedConnection, pattern: &str, listened: bool) {
    loop {
        let channels: Vec<String> = redis::cmd("PUBSUB").arg("CHANNELS").arg(pattern).query_async(raw).await.unwrap();
        if channels.is_empty() != listened {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handoff_stamps_each_hop_of_the_waiters_message_in_order() {
    let url = redis_url();
    let name = format!("polylock-trace-{}", std::process::id());
    let (holder, waiter) = (Client::connect(&url).await.unwrap(), Client::connect(&url).await.unwrap());
    let held = holder.lock(&name).unwrap().acquire_as(OwnerId(1), None).await.unwrap();

    let lock = waiter.lock(&name).unwrap();
    let waiting = tokio::spawn(async move { lock.acquire_as(OwnerId(2), Some(Duration::from_secs(10))).await });
    // Released only once the waiter listens on its channel: a release
    // before that reaches it as its own re-ask's reply, not as a message.
    let mut raw = redis::Client::open(url.as_str()).unwrap().get_multiplexed_async_connection().await.unwrap();
    let pattern = format!("*{name}*");
    let subscribed = until_channels(&mut raw, &pattern, true);
    tokio::time::timeout(Duration::from_secs(10), subscribed).await.expect("the waiter never subscribed");

    let released_at = now_ns();
    held.release().await.unwrap();
    let granted = waiting.await.unwrap().expect("the waiter was not granted the lock");
    let granted_at = now_ns();
    // The last push of the handoff is the unsubscribe's confirmation: the
    // server drops the channel, then the waiter reads it (the pause covers
    // that read), so no later push can move a stamp.
    let unsubscribed = until_channels(&mut raw, &pattern, false);
    tokio::time::timeout(Duration::from_secs(10), unsubscribed).await.expect("the waiter never unsubscribed");
    tokio::time::sleep(Duration::from_millis(50)).await;

    let stamps = Hop::ALL.map(polylock::trace::last);
    for (hop, at) in Hop::ALL.iter().zip(stamps) {
        assert!(at > released_at, "{hop:?} stamped at {at}, not after the release call at {released_at}: {stamps:?}");
    }
    // The report task's own last stamp may come after the caller resumed
    // (it spawns the replies' task after handing the grant over); every
    // other hop precedes the grant's return.
    assert!(stamps[..3].iter().all(|&at| at <= granted_at), "a hop after the acquire returned: {stamps:?}");
    assert!(stamps.windows(2).all(|w| w[0] <= w[1]), "hops out of order ({:?}): {stamps:?}", Hop::ALL);

    granted.release().await.unwrap();
    holder.close().await;
    waiter.close().await;
}
