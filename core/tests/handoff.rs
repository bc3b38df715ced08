//! Redis: a direct handoff grants the waiter's own lease, a duration the
//! waiter carries in its queue member, and the waiter counts it from when
//! it sent its latest "queued" acquire (the handoff came after the server
//! ran it), with no round trip of its own (issue 11, item 12a).

use std::time::Duration;

use polylock_core::RedisOp;
use polylock_core::{
    AcquireOptions, Backend, Event, FencingToken, Instant, LockConfig, LockMachine, LockName, LossReason, Nonce,
    Notification, Op, OwnerId, RedisValue, Reply,
};

fn at(ms: u64) -> Instant {
    Instant::from_millis(ms)
}

fn busy() -> Reply {
    Reply::Redis(RedisValue::Array(vec![RedisValue::Int(0), RedisValue::Int(5_000)]))
}

#[test]
fn a_handed_over_lock_holds_for_the_waiters_lease_from_its_last_queued_acquire() {
    let mut cfg = LockConfig::new(Backend::Redis);
    cfg.lease = Duration::from_secs(10);
    // A waiter TTL unlike the lease: the handoff must not be counted in it.
    cfg.waiter_ttl = Duration::from_secs(60);
    let drift = cfg.drift();
    let mut m = LockMachine::new(cfg, LockName::new("orders/42").unwrap(), Nonce(7)).unwrap();
    let ticket = m.acquire(at(0), OwnerId(1), AcquireOptions::default(), Nonce(9)).unwrap();

    // Busy: subscribe to our channel, then ask again; that acquire, sent at
    // 20 ms, is the last one the server answers "queued".
    let first = m.poll_command().unwrap();
    let Op::Redis(RedisOp::Eval { args, .. }) = &first.op else { panic!("{first:?}") };
    assert!(args[5].ends_with("|10000"), "the queue member carries the lease in ms: {:?}", args[5]);
    m.handle_reply(at(10), first.id, busy());
    // One SUBSCRIBE: Redisson's channel (a Redisson holder's release is heard there), and ours.
    let sub = m.poll_command().unwrap();
    let Op::Redis(RedisOp::Subscribe { channels }) = sub.op.clone() else { panic!("{sub:?}") };
    let [redisson, channel] = <[String; 2]>::try_from(channels).expect("two channels");
    assert_eq!(redisson, "redisson_lock__channel:{orders/42}");
    m.handle_reply(at(20), sub.id, Reply::Done);
    let again = m.poll_command().unwrap();
    m.handle_reply(at(30), again.id, busy());
    assert!(m.poll_command().is_none());

    // The holder releases; its LEAVE grants us the lock and publishes the token.
    m.handle_notification(at(500), Notification::Message { channel, payload: "1796114566952267".into() });
    assert_eq!(
        m.poll_event(),
        Some(Event::Granted { ticket, owner: OwnerId(1), token: FencingToken(1796114566952267), reentry: 0 })
    );
    let sent: Vec<Op> = std::iter::from_fn(|| m.poll_command()).map(|c| c.op).collect();
    assert!(
        matches!(sent.as_slice(), [Op::Redis(RedisOp::Unsubscribe { channels })] if channels.len() == 2),
        "a handoff needs no round trip of its own, and one UNSUBSCRIBE for both channels: {sent:?}"
    );

    // Renewal a third of the lease after the queued acquire was sent.
    let renew_at = 20 + 10_000 / 3;
    assert_eq!(m.poll_timeout(), Some(at(renew_at)));
    m.handle_timeout(at(renew_at));
    let renew = m.poll_command().unwrap();
    assert!(
        matches!(&renew.op, Op::Redis(RedisOp::Eval { script, .. }) if script.name == "polylock_renew"),
        "{renew:?}"
    );

    // With no answer to the renewal, the lock is believed until that send
    // plus the lease less the drift margin, and not a moment longer.
    let deadline = 20 + 10_000 - drift.as_millis() as u64;
    m.handle_timeout(at(deadline - 1));
    assert_eq!(m.poll_event(), None, "lost before the handed-over lease can have passed");
    m.handle_timeout(at(deadline));
    assert!(
        matches!(m.poll_event(), Some(Event::Lost { reason: LossReason::LeaseExpired, .. })),
        "the waiter believed the lock past {deadline} ms"
    );
}
