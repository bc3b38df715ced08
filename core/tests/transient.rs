//! Transient server refusals (Redis `BUSY`, `LOADING`, `READONLY`, ...;
//! ZooKeeper throttling) step by step against one machine: retried inside
//! the caller's deadline, never fatal, and named when the deadline passes.

use std::time::Duration;

mod steps;

use polylock_core::*;
use polylock_core::{RedisOp, ZkOp};
use steps::{at, events, granted, one_command};

fn redis_machine() -> LockMachine {
    steps::redis_machine("t")
}

const BUSY: &str = "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.";
const READONLY: &str = "READONLY You can't write against a read only replica.";

/// Answers every command the machine sends with the refusal `reply`,
/// following its timers, until `until` (ms); returns how many were refused.
fn refuse_until(m: &mut LockMachine, reply: &str, until: u64) -> usize {
    let mut refused = 0;
    loop {
        while let Some(cmd) = m.poll_command() {
            m.handle_reply(at(now()), cmd.id, Reply::Refused(reply.to_owned()));
            refused += 1;
        }
        match m.poll_timeout() {
            Some(t) if t.as_millis() < until => {
                set_now(t.as_millis());
                m.handle_timeout(t);
            }
            _ => return refused,
        }
    }
}

thread_local! {
    /// The virtual time of the current test, in ms.
    static NOW: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}
fn set_now(ms: u64) {
    NOW.with(|n| n.set(ms));
}
fn now() -> u64 {
    NOW.with(|n| n.get())
}

#[test]
fn a_busy_reply_to_an_acquire_is_retried_and_then_granted() {
    set_now(0);
    let mut m = redis_machine();
    let owner = OwnerId(1);
    let ticket = m.acquire(at(0), owner, AcquireOptions::default(), Nonce(2)).unwrap();
    let first = one_command(&mut m);
    m.handle_reply(at(1), first.id, Reply::Refused(BUSY.into()));
    assert_eq!(events(&mut m), vec![], "a BUSY server is not a failure of the acquire");
    let retry_at = m.poll_timeout().expect("a retry is scheduled");
    assert!(retry_at > at(1), "with backoff, not at once: {retry_at:?}");
    m.handle_timeout(retry_at);
    let again = one_command(&mut m);
    assert!(
        matches!(again.op, Op::Redis(RedisOp::Eval { script, .. }) if script.name == "polylock_acquire"),
        "{again:?}"
    );
    m.handle_reply(retry_at, again.id, granted(7));
    assert_eq!(events(&mut m), vec![Event::Granted { ticket, owner, token: FencingToken(7), reentry: 0 }]);
}

#[test]
fn a_waiter_refused_until_its_deadline_fails_unavailable_naming_the_reply() {
    set_now(0);
    let mut m = redis_machine();
    let owner = OwnerId(1);
    let opts = AcquireOptions { deadline: Some(at(2_000)), no_wait: false, ..Default::default() };
    let ticket = m.acquire(at(0), owner, opts, Nonce(2)).unwrap();
    let refused = refuse_until(&mut m, BUSY, 2_000);
    assert!(refused >= 3, "retried with backoff inside the deadline, {refused} tries");
    assert_eq!(events(&mut m), vec![], "nothing reported before the deadline");
    set_now(2_000);
    m.handle_timeout(at(2_000));
    assert_eq!(events(&mut m), vec![Event::Failed { ticket, owner, error: Error::Unavailable(BUSY.into()) }]);
    // The name stays usable on this client: the next acquire goes out and is granted.
    let cleanup_and_retry: Vec<Command> = std::iter::from_fn(|| m.poll_command()).collect();
    for c in &cleanup_and_retry {
        m.handle_reply(at(2_001), c.id, Reply::Redis(RedisValue::Int(0)));
    }
    let t2 = m.acquire(at(2_002), owner, AcquireOptions::default(), Nonce(3)).expect("not stuck in a fatal state");
    let cmd = one_command(&mut m);
    m.handle_reply(at(2_003), cmd.id, granted(9));
    assert_eq!(events(&mut m), vec![Event::Granted { ticket: t2, owner, token: FencingToken(9), reentry: 0 }]);
}

#[test]
fn a_try_without_waiting_that_is_refused_fails_unavailable_at_once() {
    let mut m = redis_machine();
    let owner = OwnerId(1);
    let ticket = m
        .acquire(at(0), owner, AcquireOptions { deadline: None, no_wait: true, ..Default::default() }, Nonce(2))
        .unwrap();
    let cmd = one_command(&mut m);
    m.handle_reply(at(1), cmd.id, Reply::Refused(READONLY.into()));
    assert_eq!(events(&mut m), vec![Event::Failed { ticket, owner, error: Error::Unavailable(READONLY.into()) }]);
}

#[test]
fn a_holder_whose_renewals_are_refused_is_lost_only_at_its_deadline() {
    set_now(0);
    let mut m = redis_machine();
    let owner = OwnerId(1);
    m.acquire(at(0), owner, AcquireOptions::default(), Nonce(2)).unwrap();
    let cmd = one_command(&mut m);
    m.handle_reply(at(0), cmd.id, granted(5));
    let _ = events(&mut m);
    let lease = m.config().lease;
    let loss_at = (lease - m.config().drift()).as_millis() as u64;
    let refused = refuse_until(&mut m, BUSY, loss_at);
    assert!(refused >= 2, "renewals retried while refused, {refused} tries");
    assert_eq!(events(&mut m), vec![], "still held before the local deadline");
    assert!(m.is_held_by(owner));
    set_now(loss_at);
    m.handle_timeout(at(loss_at));
    assert_eq!(events(&mut m), vec![Event::Lost { owner, token: FencingToken(5), reason: LossReason::LeaseExpired }]);
    assert_eq!(m.release(at(loss_at), owner), Err(Error::Lost(LossReason::LeaseExpired)));
}

#[test]
fn a_holder_survives_a_busy_spell_shorter_than_its_lease() {
    set_now(0);
    let mut m = redis_machine();
    let owner = OwnerId(1);
    m.acquire(at(0), owner, AcquireOptions::default(), Nonce(2)).unwrap();
    let cmd = one_command(&mut m);
    m.handle_reply(at(0), cmd.id, granted(5));
    let _ = events(&mut m);
    // Refused from the first renewal (10 s) until 15 s, then the server answers again.
    refuse_until(&mut m, BUSY, 15_000);
    let next = m.poll_timeout().unwrap();
    set_now(next.as_millis());
    m.handle_timeout(next);
    let renew = one_command(&mut m);
    m.handle_reply(next, renew.id, Reply::Redis(RedisValue::Int(1)));
    assert_eq!(events(&mut m), vec![]);
    assert!(m.is_held_by(owner));
    assert!(m.poll_timeout().unwrap() > next.saturating_add(Duration::from_secs(9)), "the lease is confirmed again");
}

#[test]
fn a_release_that_is_refused_keeps_retrying_until_it_runs() {
    set_now(0);
    let mut m = redis_machine();
    let owner = OwnerId(1);
    m.acquire(at(0), owner, AcquireOptions::default(), Nonce(2)).unwrap();
    let cmd = one_command(&mut m);
    m.handle_reply(at(0), cmd.id, granted(5));
    let _ = events(&mut m);
    let ReleaseProgress::Releasing(id) = m.release(at(100), owner).unwrap() else { panic!("last hold") };
    set_now(100);
    let refused = refuse_until(&mut m, READONLY, 5_000);
    assert!(refused >= 3, "the leave is retried, {refused} tries");
    assert_eq!(events(&mut m), vec![], "not released while the server refuses");
    let next = m.poll_timeout().expect("still retrying");
    m.handle_timeout(next);
    let leave = one_command(&mut m);
    m.handle_reply(next, leave.id, Reply::Redis(RedisValue::Int(1)));
    assert_eq!(events(&mut m), vec![Event::Released { id }]);
    assert!(m.is_idle());
}

#[test]
fn an_unknown_refusal_is_still_a_protocol_error() {
    let mut m = redis_machine();
    let owner = OwnerId(1);
    let ticket = m.acquire(at(0), owner, AcquireOptions::default(), Nonce(2)).unwrap();
    let cmd = one_command(&mut m);
    // (A `WRONGTYPE` is the caller's name in use by another kind: core/tests/name_kinds.rs.)
    let noperm = "NOPERM User app has no permissions to run the 'evalsha' command";
    m.handle_reply(at(1), cmd.id, Reply::Refused(noperm.into()));
    match events(&mut m).as_slice() {
        [Event::Failed { ticket: t, error: Error::Protocol(text), .. }] if *t == ticket => {
            assert!(text.contains("NOPERM"), "{text}")
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn zookeeper_throttling_is_retried_inside_the_deadline_and_named_at_it() {
    set_now(0);
    let cfg = LockConfig::new(Backend::ZooKeeper);
    let mut m = LockMachine::new(cfg, LockName::new("/t").unwrap(), Nonce(1)).unwrap();
    let owner = OwnerId(1);
    let opts = AcquireOptions { deadline: Some(at(2_000)), no_wait: false, ..Default::default() };
    let ticket = m.acquire(at(0), owner, opts, Nonce(2)).unwrap();
    let throttled = "THROTTLEDOP request was throttled due to server heavy loading";
    let refused = refuse_until(&mut m, throttled, 2_000);
    assert!(refused >= 3, "retried, {refused} tries");
    assert_eq!(events(&mut m), vec![]);
    set_now(2_000);
    m.handle_timeout(at(2_000));
    assert_eq!(events(&mut m), vec![Event::Failed { ticket, owner, error: Error::Unavailable(throttled.into()) }]);
}

#[test]
fn a_local_waiter_behind_a_refused_claim_is_told_unavailable_too() {
    set_now(0);
    let mut m = redis_machine();
    let (first, second) = (OwnerId(1), OwnerId(2));
    let t1 = m
        .acquire(
            at(0),
            first,
            AcquireOptions { deadline: Some(at(3_000)), no_wait: false, ..Default::default() },
            Nonce(2),
        )
        .unwrap();
    let t2 = m
        .acquire(
            at(0),
            second,
            AcquireOptions { deadline: Some(at(1_000)), no_wait: false, ..Default::default() },
            Nonce(3),
        )
        .unwrap();
    refuse_until(&mut m, BUSY, 1_000);
    set_now(1_000);
    m.handle_timeout(at(1_000));
    assert_eq!(
        events(&mut m),
        vec![Event::Failed { ticket: t2, owner: second, error: Error::Unavailable(BUSY.into()) }]
    );
    refuse_until(&mut m, BUSY, 3_000);
    set_now(3_000);
    m.handle_timeout(at(3_000));
    assert_eq!(
        events(&mut m),
        vec![Event::Failed { ticket: t1, owner: first, error: Error::Unavailable(BUSY.into()) }]
    );
}

#[test]
fn a_local_waiter_behind_a_holder_times_out_even_while_renewals_are_refused() {
    set_now(0);
    let mut m = redis_machine();
    let (holder, waiter) = (OwnerId(1), OwnerId(2));
    m.acquire(at(0), holder, AcquireOptions::default(), Nonce(2)).unwrap();
    let cmd = one_command(&mut m);
    m.handle_reply(at(0), cmd.id, granted(5));
    let _ = events(&mut m);
    let t = m
        .acquire(
            at(0),
            waiter,
            AcquireOptions { deadline: Some(at(12_000)), no_wait: false, ..Default::default() },
            Nonce(3),
        )
        .unwrap();
    refuse_until(&mut m, BUSY, 12_000);
    set_now(12_000);
    m.handle_timeout(at(12_000));
    assert_eq!(events(&mut m), vec![Event::Failed { ticket: t, owner: waiter, error: Error::Timeout }], "held here");
}

/// Found by the simulation: a ZooKeeper try whose create reply was lost and
/// whose recovery listing was throttled fails at once, and its node (which
/// the lost create may have made) is still found and deleted.
#[test]
fn a_refused_zookeeper_try_still_deletes_the_node_its_lost_create_made() {
    let cfg = LockConfig::new(Backend::ZooKeeper);
    let mut m = LockMachine::new(cfg, LockName::new("/t").unwrap(), Nonce(1)).unwrap();
    let owner = OwnerId(1);
    let ticket = m
        .acquire(at(0), owner, AcquireOptions { deadline: None, no_wait: true, ..Default::default() }, Nonce(2))
        .unwrap();
    let create = m.poll_command().unwrap();
    let list = m.poll_command().unwrap();
    let Op::ZooKeeper(ZkOp::CreateSequential { path, .. }) = &create.op else { panic!("{create:?}") };
    let node = format!("{}0000000001", path.rsplit('/').next().unwrap());
    let lost = || Reply::Failed(TransportError { message: "timed out".into() });
    m.handle_reply(at(1), create.id, lost());
    m.handle_reply(at(1), list.id, Reply::Children(vec![node.clone()]));
    let retry = m.poll_timeout().unwrap();
    m.handle_timeout(retry);
    let recover = one_command(&mut m);
    let throttled = "THROTTLEDOP request was throttled due to server heavy loading";
    m.handle_reply(retry, recover.id, Reply::Refused(throttled.into()));
    assert_eq!(events(&mut m), vec![Event::Failed { ticket, owner, error: Error::Unavailable(throttled.into()) }]);
    // Cleanup: find our node by its prefix, read it, delete it.
    let mut t = retry.as_millis();
    for _ in 0..10 {
        let cmd = match m.poll_command() {
            Some(cmd) => cmd,
            None => {
                let next = m.poll_timeout().expect("cleanup still has work to do");
                t = next.as_millis();
                m.handle_timeout(next);
                continue;
            }
        };
        let reply = match &cmd.op {
            Op::ZooKeeper(ZkOp::GetChildren { .. }) => Reply::Children(vec![node.clone()]),
            Op::ZooKeeper(ZkOp::Stat { .. }) => Reply::Stat { czxid: 40 },
            Op::ZooKeeper(ZkOp::Delete { path }) => {
                assert!(path.ends_with(&node), "{path}");
                m.handle_reply(at(t), cmd.id, Reply::Done);
                assert!(m.is_idle(), "nothing left to clean up");
                return;
            }
            other => panic!("{other:?}"),
        };
        m.handle_reply(at(t), cmd.id, reply);
    }
    panic!("the node was never deleted");
}

/// Answers every command the machine sends with no answer at all, following
/// its timers, until `until` (ms).
fn unanswered_until(m: &mut LockMachine, until: u64) {
    loop {
        while let Some(cmd) = m.poll_command() {
            m.handle_reply(at(now()), cmd.id, Reply::Failed(TransportError { message: "timed out".into() }));
        }
        match m.poll_timeout() {
            Some(t) if t.as_millis() < until => {
                set_now(t.as_millis());
                m.handle_timeout(t);
            }
            _ => return,
        }
    }
}

/// Issue 46: a waiter that gives up keeps sending LEAVE until nothing of
/// its can be left on the server. A release's handoff may grant it from its
/// queue entry until that entry expires (a waiter TTL after its last
/// refresh), and that grant lives a lease from then: so the LEAVE is moot
/// only after the lease and the waiter TTL together, not the longer of them.
#[test]
fn a_waiter_that_gave_up_retries_its_leave_for_the_waiter_ttl_plus_the_lease() {
    set_now(0);
    let mut m = redis_machine();
    let owner = OwnerId(1);
    let ticket = m.acquire(at(0), owner, AcquireOptions::default(), Nonce(2)).unwrap();
    let acquire = m.poll_command().expect("acquire");
    // Busy, and we are queued first in line (the lock's TTL 20 s).
    m.handle_reply(
        at(0),
        acquire.id,
        Reply::Redis(RedisValue::Array(vec![RedisValue::Int(0), RedisValue::Int(20_000), RedisValue::Int(1)])),
    );
    assert!(m.cancel(at(0), ticket));
    let (lease, waiter_ttl) = (30_000, 30_000);
    // Unanswered until well past the longer of the two (retries back off to
    // 2 s at most): a handoff at 29.9 s would hold the lock until 59.9 s,
    // so the machine must still be at it.
    set_now(0);
    unanswered_until(&mut m, lease.max(waiter_ttl) + 5_000);
    assert!(m.has_server_work(), "gave up on its LEAVE at {} ms, while a handoff's grant could live on", now());
    unanswered_until(&mut m, lease + waiter_ttl + 5_000);
    assert!(!m.has_server_work(), "still sending LEAVE at {} ms, past the lease and the waiter TTL", now());
}
