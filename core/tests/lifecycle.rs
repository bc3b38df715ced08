//! Lifecycle rules of one machine, driven by hand: what the application is
//! told, and in which order, around close and concurrent acquires.

mod steps;

use polylock_core::RedisOp;
use polylock_core::*;
use steps::{events, granted};

fn redis_machine() -> LockMachine {
    steps::redis_machine("orders/42")
}

/// Two acquires by one owner before the first grant (`join!(lock.acquire(),
/// lock.acquire())` in one task): the second becomes a re-entry once the
/// first is granted, instead of waiting behind its own owner for ever.
#[test]
fn a_second_acquire_of_the_same_owner_before_the_grant_becomes_a_reentry() {
    let mut m = redis_machine();
    let t0 = Instant::from_millis(0);
    let owner = OwnerId(7);
    let first = m.acquire(t0, owner, AcquireOptions::default(), Nonce(2)).unwrap();
    let cmd = m.poll_command().expect("the acquire script");
    let second = m.acquire(t0, owner, AcquireOptions::default(), Nonce(3)).unwrap();
    assert!(m.poll_command().is_none(), "one owner contends on the server once");
    m.handle_reply(t0, cmd.id, granted(11));
    assert_eq!(
        events(&mut m),
        vec![
            Event::Granted { ticket: first, owner, token: FencingToken(11), reentry: 0 },
            Event::Granted { ticket: second, owner, token: FencingToken(11), reentry: 1 },
        ]
    );
    assert_eq!(m.holder(), Some((owner, 2, FencingToken(11))));
    assert_eq!(m.waiting(), 0);
    assert!(matches!(m.release(t0, owner), Ok(ReleaseProgress::StillHeld { remaining: 1 })));
    assert!(matches!(m.release(t0, owner), Ok(ReleaseProgress::Releasing(_))));
}

/// Another owner queued between them keeps its place: only the granted
/// owner's own waiters join its hold.
#[test]
fn only_the_granted_owners_waiters_become_reentries() {
    let mut m = redis_machine();
    let t0 = Instant::from_millis(0);
    let (a, b) = (OwnerId(1), OwnerId(2));
    let first = m.acquire(t0, a, AcquireOptions::default(), Nonce(2)).unwrap();
    let cmd = m.poll_command().unwrap();
    let other = m.acquire(t0, b, AcquireOptions::default(), Nonce(3)).unwrap();
    let again = m.acquire(t0, a, AcquireOptions::default(), Nonce(4)).unwrap();
    m.handle_reply(t0, cmd.id, granted(5));
    let evs = events(&mut m);
    assert_eq!(evs.len(), 2, "{evs:?}");
    assert!(evs.contains(&Event::Granted { ticket: first, owner: a, token: FencingToken(5), reentry: 0 }));
    assert!(evs.contains(&Event::Granted { ticket: again, owner: a, token: FencingToken(5), reentry: 1 }));
    assert_eq!(m.waiting(), 1, "owner b still waits ({other:?})");
}

/// `close` gives a held lock back to the server. Its holder is told
/// `Lost(Closed)` before the release command is polled, and each of its
/// holds reports the loss on release.
#[test]
fn close_tells_the_holder_before_its_release_goes_out() {
    let mut m = redis_machine();
    let t0 = Instant::from_millis(0);
    let owner = OwnerId(3);
    m.acquire(t0, owner, AcquireOptions::default(), Nonce(2)).unwrap();
    let cmd = m.poll_command().unwrap();
    m.handle_reply(t0, cmd.id, granted(9));
    let _ = events(&mut m);
    m.close(t0);
    // The drive contract delivers events before sending commands.
    assert_eq!(m.poll_event(), Some(Event::Lost { owner, token: FencingToken(9), reason: LossReason::Closed }));
    let leave = m.poll_command().expect("the release goes out");
    assert!(matches!(leave.op, Op::Redis(RedisOp::Eval { .. })));
    assert!(!m.is_idle(), "the release is still in flight");
    m.handle_reply(t0, leave.id, Reply::Redis(RedisValue::Int(1)));
    assert!(!m.has_server_work(), "nothing left on the server once the release is answered");
    assert_eq!(m.release(t0, owner), Err(Error::Lost(LossReason::Closed)));
    assert!(m.is_idle());
}

/// A guard's release names its grant by token. After a loss and a new grant
/// to the same owner, the stale guard's release reports its own loss and
/// leaves the owner's newer hold alone.
#[test]
fn a_stale_guards_release_reports_its_loss_and_spares_the_newer_hold() {
    let mut m = redis_machine();
    let t0 = Instant::from_millis(0);
    let owner = OwnerId(5);
    m.acquire(t0, owner, AcquireOptions::default(), Nonce(2)).unwrap();
    let cmd = m.poll_command().unwrap();
    m.handle_reply(t0, cmd.id, granted(20));
    let _ = events(&mut m);
    // The renewal is refused: lost.
    let renew_at = m.poll_timeout().unwrap();
    m.handle_timeout(renew_at);
    let renew = m.poll_command().unwrap();
    m.handle_reply(renew_at, renew.id, Reply::Redis(RedisValue::Int(0)));
    let _ = events(&mut m);
    // Its cleanup finishes (nothing was left to delete).
    let leave = m.poll_command().expect("the lost claim leaves");
    m.handle_reply(renew_at, leave.id, Reply::Redis(RedisValue::Int(0)));
    // The same owner acquires again and is granted token 21.
    m.acquire(renew_at, owner, AcquireOptions::default(), Nonce(3)).unwrap();
    let again = m.poll_command().unwrap();
    m.handle_reply(renew_at, again.id, granted(21));
    assert_eq!(m.holder(), Some((owner, 1, FencingToken(21))));
    assert_eq!(m.unreleased_loss(owner), Some(LossReason::RenewalRefused), "the lost grant is still to be released");
    assert_eq!(m.unreleased_loss(OwnerId(6)), None);
    assert_eq!(m.release_hold(renew_at, owner, Some(FencingToken(20))), Err(Error::Lost(LossReason::RenewalRefused)));
    assert_eq!(m.holder(), Some((owner, 1, FencingToken(21))), "the newer hold was ended");
    assert_eq!(m.unreleased_loss(owner), None, "its one hold took the loss report");
    assert_eq!(m.release_hold(renew_at, owner, Some(FencingToken(20))), Err(Error::NotHeld));
    assert!(matches!(m.release_hold(renew_at, owner, Some(FencingToken(21))), Ok(ReleaseProgress::Releasing(_))));
}

/// A Redis waiter whose deadline passes while it is queued reports its
/// timeout once its LEAVE has taken its place out of the queue, not before:
/// a caller looking right after never finds its own failed attempt queued.
#[test]
fn a_timed_out_redis_waiter_reports_once_its_leave_is_answered() {
    let mut m = redis_machine();
    let t = |ms| Instant::from_millis(ms);
    let opts = AcquireOptions { deadline: Some(t(100)), ..Default::default() };
    let ticket = m.acquire(t(0), OwnerId(1), opts, Nonce(2)).unwrap();
    let queued =
        || Reply::Redis(RedisValue::Array(vec![RedisValue::Int(0), RedisValue::Int(5_000), RedisValue::Int(1)]));
    let acquire = m.poll_command().expect("the acquire");
    m.handle_reply(t(1), acquire.id, queued());
    // Subscribed (Redisson's channel and ours), then asked again.
    let subs: Vec<Command> = std::iter::from_fn(|| m.poll_command()).collect();
    let ours = subs.last().expect("our subscription");
    m.handle_reply(t(2), ours.id, Reply::Done);
    let recheck = m.poll_command().expect("the recheck");
    m.handle_reply(t(3), recheck.id, queued());
    m.handle_timeout(t(100));
    let leave = std::iter::from_fn(|| m.poll_command())
        .find(|c| matches!(&c.op, Op::Redis(RedisOp::Eval { script, .. }) if script.name == "polylock_leave"))
        .expect("a LEAVE at the deadline");
    assert_eq!(events(&mut m), vec![], "not reported before the LEAVE is answered");
    m.handle_reply(t(101), leave.id, Reply::Redis(RedisValue::Int(0)));
    assert_eq!(events(&mut m), vec![Event::Failed { ticket, owner: OwnerId(1), error: Error::Timeout }]);
}

/// A withdrawn Redis waiter (Java's interrupt, Python's Ctrl-C) is told
/// `Cancelled` once its LEAVE has taken it out of the queue, as a timed-out
/// one is; a second waiter of the machine, with nothing on the server yet,
/// is told at once; a ticket already answered is not withdrawn.
#[test]
fn a_withdrawn_redis_waiter_is_told_once_its_leave_is_answered() {
    let mut m = redis_machine();
    let t = |ms| Instant::from_millis(ms);
    let (a, b) = (OwnerId(1), OwnerId(2));
    let ticket = m.acquire(t(0), a, AcquireOptions::default(), Nonce(2)).unwrap();
    let behind = m.acquire(t(0), b, AcquireOptions::default(), Nonce(3)).unwrap();
    let queued =
        || Reply::Redis(RedisValue::Array(vec![RedisValue::Int(0), RedisValue::Int(5_000), RedisValue::Int(1)]));
    let acquire = m.poll_command().expect("the acquire");
    m.handle_reply(t(1), acquire.id, queued());
    assert!(m.withdraw(t(2), behind), "the waiter behind is withdrawn");
    assert_eq!(events(&mut m), vec![Event::Failed { ticket: behind, owner: b, error: Error::Cancelled }]);
    assert!(m.withdraw(t(3), ticket));
    let leave = std::iter::from_fn(|| m.poll_command())
        .find(|c| matches!(&c.op, Op::Redis(RedisOp::Eval { script, .. }) if script.name == "polylock_leave"))
        .expect("a LEAVE for the withdrawn acquire");
    assert_eq!(events(&mut m), vec![], "not told before the LEAVE is answered");
    assert!(!m.withdraw(t(4), ticket), "withdrawn twice");
    m.handle_reply(t(5), leave.id, Reply::Redis(RedisValue::Int(0)));
    assert_eq!(events(&mut m), vec![Event::Failed { ticket, owner: a, error: Error::Cancelled }]);

    let granted_ticket = m.acquire(t(6), a, AcquireOptions::default(), Nonce(4)).unwrap();
    let acquire = std::iter::from_fn(|| m.poll_command())
        .find(|c| matches!(&c.op, Op::Redis(RedisOp::Eval { script, .. }) if script.name != "polylock_leave"))
        .expect("the acquire");
    m.handle_reply(t(7), acquire.id, granted(12));
    assert!(!m.withdraw(t(8), granted_ticket), "a granted acquire is not withdrawn");
    assert_eq!(m.holder(), Some((a, 1, FencingToken(12))));
}

/// A withdrawal whose LEAVE the server does not answer is reported after a
/// bounded wait, not never: the caller's interrupt ends its wait.
#[test]
fn a_withdrawal_the_server_does_not_confirm_is_reported_within_a_bound() {
    let mut m = redis_machine();
    let t = |ms| Instant::from_millis(ms);
    let ticket = m.acquire(t(0), OwnerId(1), AcquireOptions::default(), Nonce(2)).unwrap();
    let acquire = m.poll_command().expect("the acquire");
    let queued = Reply::Redis(RedisValue::Array(vec![RedisValue::Int(0), RedisValue::Int(5_000), RedisValue::Int(1)]));
    m.handle_reply(t(1), acquire.id, queued);
    assert!(m.withdraw(t(10), ticket));
    while m.poll_command().is_some() {}
    assert_eq!(events(&mut m), vec![]);
    let by = m.poll_timeout().expect("a timer for the report");
    assert!(by <= t(10 + 1_000), "reported by {by:?}");
    m.handle_timeout(by);
    assert_eq!(events(&mut m), vec![Event::Failed { ticket, owner: OwnerId(1), error: Error::Cancelled }]);
}

/// The scripts send a grant's token as decimal digits (they never make it a
/// Lua number); older scripts sent an integer. Both are read as the same
/// token; anything else
/// in the token's place (a sign, a blank, a fraction, no digits, more than
/// 64 bits) is a protocol error, never a grant with a made-up token.
#[test]
fn a_grant_token_is_read_from_digits_or_an_integer_and_nothing_else() {
    let grant_with = |token: RedisValue| {
        let mut m = redis_machine();
        let t0 = Instant::from_millis(0);
        let ticket = m.acquire(t0, OwnerId(1), AcquireOptions::default(), Nonce(2)).unwrap();
        let cmd = m.poll_command().expect("the acquire script");
        m.handle_reply(t0, cmd.id, Reply::Redis(RedisValue::Array(vec![RedisValue::Int(1), token])));
        (ticket, events(&mut m))
    };
    for token in [RedisValue::Bulk(b"1733400000123456".to_vec()), RedisValue::Int(1_733_400_000_123_456)] {
        let (ticket, evs) = grant_with(token.clone());
        assert_eq!(
            evs,
            vec![Event::Granted { ticket, owner: OwnerId(1), token: FencingToken(1_733_400_000_123_456), reentry: 0 }],
            "{token:?}"
        );
    }
    for bad in ["", "+17", "-3", " 17", "17 ", "1.7e1", "0x11", "99999999999999999999"] {
        let (ticket, evs) = grant_with(RedisValue::Bulk(bad.as_bytes().to_vec()));
        assert!(
            matches!(evs.as_slice(), [Event::Failed { ticket: t, error: Error::Protocol(_), .. }] if *t == ticket),
            "{bad:?} gave {evs:?}"
        );
    }
}
