//! Redis: a polylock waiter queued behind a Redisson holder is woken by
//! that holder's release, which publishes `0` on Redisson's channel only
//! (`SPUBLISH` on a cluster, Redisson's default there): while queued, a
//! waiter listens there too and tries again at once on a message, and the
//! claims of one client on one name share that subscription.

use std::time::Duration;

use polylock_core::RedisOp;
use polylock_core::*;

const REDISSON: &str = "redisson_lock__channel:{orders/42}";

fn at(ms: u64) -> Instant {
    Instant::from_millis(ms)
}

fn config(shard_release: bool) -> LockConfig {
    let mut cfg = LockConfig::new(Backend::Redis);
    cfg.set_lease(Duration::from_secs(30));
    cfg.shard_release = shard_release;
    cfg
}

/// Busy: the holder (Redisson's, say) has 30 s of its lease left, and we
/// are first in line.
fn busy() -> Reply {
    queued_behind(true)
}

/// Busy, 30 s left, and whether we are first in line.
fn queued_behind(first: bool) -> Reply {
    Reply::Redis(RedisValue::Array(vec![RedisValue::Int(0), RedisValue::Int(30_000), RedisValue::Int(first as i64)]))
}

fn granted(token: i64) -> Reply {
    Reply::Redis(RedisValue::Array(vec![RedisValue::Int(1), RedisValue::Int(token)]))
}

fn drain(m: &mut LockMachine) -> Vec<Command> {
    std::iter::from_fn(|| m.poll_command()).collect()
}

fn is_acquire(cmd: &Command) -> bool {
    matches!(&cmd.op, Op::Redis(RedisOp::Eval { script, .. }) if script.name == "polylock_acquire")
}

/// What each (un)subscription command is: its kind and its channels, the
/// waiter's own channel shown as `own` (one command may name several).
fn listening(cmds: &[Command]) -> Vec<(&'static str, Vec<String>)> {
    cmds.iter()
        .map(|c| {
            let (kind, channels) = match &c.op {
                Op::Redis(RedisOp::Subscribe { channels }) => ("SUBSCRIBE", channels),
                Op::Redis(RedisOp::ShardSubscribe { channels }) => ("SSUBSCRIBE", channels),
                Op::Redis(RedisOp::Unsubscribe { channels }) => ("UNSUBSCRIBE", channels),
                Op::Redis(RedisOp::ShardUnsubscribe { channels }) => ("SUNSUBSCRIBE", channels),
                other => panic!("not a subscription: {other:?}"),
            };
            let shown = channels.iter().map(|c| if c.contains('|') { "own".to_owned() } else { c.clone() }).collect();
            (kind, shown)
        })
        .collect()
}

/// `(kind, [channels])` with `&str`s, for comparing with [`listening`].
fn cmd(kind: &'static str, channels: &[&str]) -> (&'static str, Vec<String>) {
    (kind, channels.iter().map(|c| (*c).to_owned()).collect())
}

/// A waiter on `orders/42` queued behind a holder with 30 s left, its
/// subscriptions confirmed and its second acquire answered busy: it now
/// waits. Returns the machine and the subscriptions it asked for.
fn queued(shard_release: bool) -> (LockMachine, Vec<(&'static str, Vec<String>)>) {
    let mut m = LockMachine::new(config(shard_release), LockName::new("orders/42").unwrap(), Nonce(1)).unwrap();
    m.acquire(at(0), OwnerId(1), AcquireOptions::default(), Nonce(2)).unwrap();
    let first = m.poll_command().unwrap();
    m.handle_reply(at(1), first.id, busy());
    let subs = drain(&mut m);
    let own = subs.last().unwrap().id;
    m.handle_reply(at(2), own, Reply::Done);
    let again = drain(&mut m);
    assert!(matches!(again.as_slice(), [a] if is_acquire(a)), "{again:?}");
    m.handle_reply(at(3), again[0].id, busy());
    assert!(drain(&mut m).is_empty(), "waiting");
    (m, listening(&subs))
}

#[test]
fn a_waiter_hearing_redissons_release_tries_again_at_once() {
    let (mut m, subs) = queued(false);
    // One SUBSCRIBE for both channels: one command on the server, one reply.
    assert_eq!(subs, vec![cmd("SUBSCRIBE", &[REDISSON, "own"])]);
    // Without a message it would try again only at the holder's expiry or
    // the waiter TTL's third, long after the Redisson holder left.
    assert!(m.poll_timeout().unwrap() >= at(3 + 10_000), "{:?}", m.poll_timeout());

    m.handle_notification(at(100), Notification::Message { channel: REDISSON.to_owned(), payload: "0".into() });
    let sent = drain(&mut m);
    assert!(matches!(sent.as_slice(), [a] if is_acquire(a)), "a Redisson release heard, no acquire sent: {sent:?}");

    // Granted: it stops listening on both channels.
    m.handle_reply(at(101), sent[0].id, granted(9));
    assert!(m.is_held_by(OwnerId(1)));
    assert_eq!(listening(&drain(&mut m)), vec![cmd("UNSUBSCRIBE", &["own", REDISSON])]);
}

/// Only the first in line tries again on Redisson's `0`: the others would
/// only queue again (N waiters, N acquires, one grant: a herd). A waiter
/// that becomes first is told on its own channel (LEAVE of the previous
/// first, or a prune), asks, and learns it.
#[test]
fn only_the_first_in_line_tries_again_on_redissons_release() {
    let mut m = LockMachine::new(config(false), LockName::new("orders/42").unwrap(), Nonce(1)).unwrap();
    m.acquire(at(0), OwnerId(1), AcquireOptions::default(), Nonce(2)).unwrap();
    let first = m.poll_command().unwrap();
    m.handle_reply(at(1), first.id, queued_behind(false));
    let subs = drain(&mut m);
    let Op::Redis(RedisOp::Subscribe { channels }) = subs.last().unwrap().op.clone() else { panic!("{subs:?}") };
    let own = channels.last().unwrap().clone();
    m.handle_reply(at(2), subs.last().unwrap().id, Reply::Done);
    let again = drain(&mut m);
    m.handle_reply(at(3), again[0].id, queued_behind(false));

    m.handle_notification(at(100), Notification::Message { channel: REDISSON.to_owned(), payload: "0".into() });
    assert!(drain(&mut m).is_empty(), "second in line, it tried again on Redisson's release");

    // The first in line left: told on our own channel, we ask and are first now.
    m.handle_notification(at(200), Notification::Message { channel: own, payload: "0".into() });
    let asked = drain(&mut m);
    assert!(matches!(asked.as_slice(), [a] if is_acquire(a)), "{asked:?}");
    m.handle_reply(at(201), asked[0].id, queued_behind(true));
    m.handle_notification(at(300), Notification::Message { channel: REDISSON.to_owned(), payload: "0".into() });
    let sent = drain(&mut m);
    assert!(matches!(sent.as_slice(), [a] if is_acquire(a)), "first in line, Redisson's release unheard: {sent:?}");
}

/// A Redisson release heard while the waiter's acquire is out is not lost:
/// if that acquire says busy, it asks again at once.
#[test]
fn a_redisson_release_during_an_acquire_in_flight_makes_it_ask_again() {
    let (mut m, _) = queued(false);
    let due = m.poll_timeout().unwrap();
    m.handle_timeout(due);
    let refresh = drain(&mut m);
    assert!(matches!(refresh.as_slice(), [a] if is_acquire(a)), "{refresh:?}");
    m.handle_notification(due, Notification::Message { channel: REDISSON.into(), payload: "0".into() });
    assert!(drain(&mut m).is_empty(), "one acquire at a time");
    m.handle_reply(due, refresh[0].id, busy());
    let again = drain(&mut m);
    assert!(matches!(again.as_slice(), [a] if is_acquire(a)), "the wake-up was lost: {again:?}");
}

#[test]
fn on_a_cluster_a_waiter_also_listens_on_redissons_shard_channel() {
    let (mut m, subs) = queued(true);
    assert_eq!(subs, vec![cmd("SSUBSCRIBE", &[REDISSON]), cmd("SUBSCRIBE", &[REDISSON, "own"])]);
    // An `SPUBLISH`ed `0` comes as a message on the same channel name.
    m.handle_notification(at(100), Notification::Message { channel: REDISSON.to_owned(), payload: "0".into() });
    let sent = drain(&mut m);
    assert!(matches!(sent.as_slice(), [a] if is_acquire(a)), "{sent:?}");
    m.handle_reply(at(101), sent[0].id, granted(9));
    assert_eq!(
        listening(&drain(&mut m)),
        vec![cmd("SUNSUBSCRIBE", &[REDISSON]), cmd("UNSUBSCRIBE", &["own", REDISSON])]
    );
}

/// A name whose Redisson channel is in another slot than its key has no
/// shard channel: Redisson's script could not `SPUBLISH` there either.
#[test]
fn no_shard_subscription_for_a_channel_outside_the_lock_keys_slot() {
    let mut m = LockMachine::new(config(true), LockName::new("a{").unwrap(), Nonce(1)).unwrap();
    m.acquire(at(0), OwnerId(1), AcquireOptions::default(), Nonce(2)).unwrap();
    let first = m.poll_command().unwrap();
    m.handle_reply(at(1), first.id, busy());
    let subs = listening(&drain(&mut m));
    assert_eq!(subs, vec![cmd("SUBSCRIBE", &["redisson_lock__channel:a{", "own"])]);
}

fn table_commands(t: &mut LockTable) -> Vec<Command> {
    std::iter::from_fn(|| t.poll_output())
        .filter_map(|o| if let Output::Command(c) = o { Some(c) } else { None })
        .collect()
}

/// Waiters of one client on `abc` and `{abc}`, two locks whose Redisson
/// channel is one (Redisson's naming rule): one `SUBSCRIBE` goes out, both
/// hear its message, and only the last one to stop listening unsubscribes
/// (the server keeps one subscription per connection: the first to leave
/// must not end the other's).
#[test]
fn waiters_of_one_client_share_one_subscription_to_a_redisson_channel() {
    let mut t = LockTable::new(config(false), Nonce(1)).unwrap();
    let shared = "redisson_lock__channel:{abc}";
    let mut acquires = Vec::new();
    for (i, name) in ["abc", "{abc}"].into_iter().enumerate() {
        let name = LockName::new(name).unwrap();
        t.acquire(at(0), &name, LockMode::Exclusive, OwnerId(1), AcquireOptions::default(), Nonce(i as u128 + 2))
            .unwrap();
        let first = table_commands(&mut t);
        let [first] = first.as_slice() else { panic!("{first:?}") };
        t.handle_reply(at(1), first.id, busy());
        let subs = table_commands(&mut t);
        let own = subs.last().unwrap().id;
        let expected = if i == 0 { vec![cmd("SUBSCRIBE", &[shared, "own"])] } else { vec![cmd("SUBSCRIBE", &["own"])] };
        assert_eq!(listening(&subs), expected, "{name}");
        t.handle_reply(at(2), own, Reply::Done);
        let again = table_commands(&mut t);
        let [again] = again.as_slice() else { panic!("{again:?}") };
        t.handle_reply(at(3), again.id, busy());
        assert!(table_commands(&mut t).is_empty());
    }

    t.handle_notification(at(100), Notification::Message { channel: shared.to_owned(), payload: "0".into() });
    for c in table_commands(&mut t) {
        assert!(is_acquire(&c), "{c:?}");
        acquires.push(c);
    }
    assert_eq!(acquires.len(), 2, "both waiters try again: {acquires:?}");

    // One is granted: its own channel goes, the shared one stays (the other listens).
    t.handle_reply(at(101), acquires[0].id, granted(9));
    assert_eq!(listening(&table_commands(&mut t)), vec![cmd("UNSUBSCRIBE", &["own"])]);
    // The other, still busy, still hears the shared channel.
    t.handle_reply(at(102), acquires[1].id, busy());
    t.handle_notification(at(200), Notification::Message { channel: shared.to_owned(), payload: "0".into() });
    let woken = table_commands(&mut t);
    let [woken] = woken.as_slice() else { panic!("{woken:?}") };
    assert!(is_acquire(woken));
    // Granted too: the last listener unsubscribes the shared channel.
    t.handle_reply(at(201), woken.id, granted(10));
    assert_eq!(listening(&table_commands(&mut t)), vec![cmd("UNSUBSCRIBE", &["own", shared])]);
}
