//! Scripts go to Redis by SHA1 (`EVALSHA`); a server without the script
//! (restarted, failed over, `SCRIPT FLUSH`) refuses `NOSCRIPT` and runs
//! nothing. The claim then sends the same request again at once with its
//! source, but only while that request is still the one it waits for: a
//! request sent again after the claim moved on would run after what it sent
//! since (an acquire after the cancel that follows it: an orphan grant).

mod steps;

use polylock_core::RedisOp;
use polylock_core::*;
use steps::{at, events, granted, one_command};

const NOSCRIPT: &str = "NOSCRIPT No matching script. Please use EVAL.";

fn noscript() -> Reply {
    Reply::Refused(NOSCRIPT.to_owned())
}

/// The script, whether it goes by SHA1, its keys and its arguments.
fn script_of(cmd: &Command) -> (&'static str, bool, Vec<String>, Vec<String>) {
    match &cmd.op {
        Op::Redis(RedisOp::Eval { script, keys, args, by_sha }) => (script.name, *by_sha, keys.clone(), args.clone()),
        other => panic!("not a script: {other:?}"),
    }
}

fn acquire_and_grant(m: &mut LockMachine, owner: OwnerId) {
    m.acquire(at(0), owner, AcquireOptions::default(), Nonce(2)).unwrap();
    let cmd = one_command(m);
    m.handle_reply(at(1), cmd.id, granted(5));
    assert!(matches!(events(m).as_slice(), [Event::Granted { .. }]));
}

#[test]
fn a_script_goes_by_sha1_and_its_sha1_is_that_of_its_source() {
    let mut m = steps::redis_machine("orders/42");
    m.acquire(at(0), OwnerId(1), AcquireOptions::default(), Nonce(2)).unwrap();
    let cmd = one_command(&mut m);
    let Op::Redis(RedisOp::Eval { script, by_sha: true, .. }) = &cmd.op else { panic!("{cmd:?}") };
    // A known vector first: SHA1("abc").
    assert_eq!(sha1_smol_free("abc"), "a9993e364706816aba3e25717850c26c9cd0d89d");
    assert_eq!(script.sha1(), sha1_smol_free(script.source));
    assert_eq!(script.sha1().len(), 40);
}

/// An acquire refused NOSCRIPT goes again at once (no backoff: nothing ran,
/// and the source cannot be refused so), the same request with its source;
/// the claim's later scripts carry their source too.
#[test]
fn an_acquire_refused_noscript_goes_again_at_once_with_its_source() {
    let mut m = steps::redis_machine("orders/42");
    let owner = OwnerId(1);
    let ticket = m.acquire(at(0), owner, AcquireOptions::default(), Nonce(2)).unwrap();
    let first = one_command(&mut m);
    let (name, by_sha, keys, args) = script_of(&first);
    assert!(by_sha, "the first try goes by SHA1");
    m.handle_reply(at(1), first.id, noscript());
    let again = one_command(&mut m);
    assert_eq!(script_of(&again), (name, false, keys, args), "the same request, with its source");
    assert_eq!(events(&mut m), vec![], "not reported: nothing ran");
    m.handle_reply(at(2), again.id, granted(7));
    assert_eq!(events(&mut m), vec![Event::Granted { ticket, owner, token: FencingToken(7), reentry: 0 }]);
    assert!(matches!(m.release(at(3), owner), Ok(ReleaseProgress::Releasing(_))));
    let leave = one_command(&mut m);
    assert_eq!(script_of(&leave).0, "polylock_leave");
    assert!(!script_of(&leave).1, "this claim's scripts now carry their source");
}

/// A cancel's LEAVE went out behind the acquire, and then the acquire comes
/// back NOSCRIPT: it is not sent again (it would run after the LEAVE and
/// grant a lock nobody waits for). The LEAVE, answered, ends the claim and
/// leaves nothing on the server.
#[test]
fn an_acquire_refused_noscript_after_its_cancel_is_not_sent_again() {
    let mut m = steps::redis_machine("orders/42");
    let owner = OwnerId(1);
    let ticket = m.acquire(at(0), owner, AcquireOptions::default(), Nonce(2)).unwrap();
    let acquire = one_command(&mut m);
    assert!(m.cancel(at(1), ticket));
    let leave = std::iter::from_fn(|| m.poll_command())
        .find(|c| script_of(c).0 == "polylock_leave")
        .expect("the cancel's LEAVE");
    m.handle_reply(at(2), acquire.id, noscript());
    assert_eq!(m.poll_command(), None, "nothing sent again behind the LEAVE");
    m.handle_reply(at(3), leave.id, Reply::Redis(RedisValue::Int(0)));
    assert_eq!(m.poll_command(), None);
    assert_eq!(events(&mut m), vec![], "a cancelled ticket hears nothing more");
    assert!(!m.has_server_work());
}

/// A release and a renewal refused NOSCRIPT each go again at once with the
/// source: a release must not leave the lock held, a renewal must not let
/// the lease run out.
#[test]
fn a_release_and_a_renewal_refused_noscript_go_again_with_their_source() {
    let mut m = steps::redis_machine("orders/42");
    let owner = OwnerId(1);
    acquire_and_grant(&mut m, owner);
    // The renewal, due at a third of the lease.
    let renew_at = m.poll_timeout().expect("the renewal timer");
    m.handle_timeout(renew_at);
    let renew = one_command(&mut m);
    let (name, by_sha, keys, args) = script_of(&renew);
    assert_eq!((name, by_sha), ("polylock_renew", true));
    m.handle_reply(renew_at, renew.id, noscript());
    let again = one_command(&mut m);
    assert_eq!(script_of(&again), (name, false, keys, args));
    m.handle_reply(renew_at, again.id, Reply::Redis(RedisValue::Int(1)));
    assert_eq!(events(&mut m), vec![], "renewed, nothing to report");

    let mut m = steps::redis_machine("orders/43");
    acquire_and_grant(&mut m, owner);
    assert!(matches!(m.release(at(2), owner), Ok(ReleaseProgress::Releasing(_))));
    let leave = one_command(&mut m);
    let (name, by_sha, keys, args) = script_of(&leave);
    assert_eq!((name, by_sha), ("polylock_leave", true));
    m.handle_reply(at(3), leave.id, noscript());
    let again = one_command(&mut m);
    assert_eq!(script_of(&again), (name, false, keys, args));
    m.handle_reply(at(4), again.id, Reply::Redis(RedisValue::Int(1)));
    assert!(matches!(events(&mut m).as_slice(), [Event::Released { .. }]), "released once the LEAVE is answered");
    assert!(!m.has_server_work());
}

/// SHA1 of `s` in lowercase hex, written out here (RFC 3174) so that the
/// test does not check the core's hash with the same library.
fn sha1_smol_free(s: &str) -> String {
    let mut h: [u32; 5] = [0x67452301, 0xEFCDAB89, 0x98BADCFE, 0x10325476, 0xC3D2E1F0];
    let mut msg = s.as_bytes().to_vec();
    let bits = (msg.len() as u64) * 8;
    msg.push(0x80);
    while msg.len() % 64 != 56 {
        msg.push(0);
    }
    msg.extend_from_slice(&bits.to_be_bytes());
    for block in msg.chunks(64) {
        let mut w = [0u32; 80];
        for i in 0..16 {
            w[i] = u32::from_be_bytes([block[4 * i], block[4 * i + 1], block[4 * i + 2], block[4 * i + 3]]);
        }
        for i in 16..80 {
            w[i] = (w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16]).rotate_left(1);
        }
        let [mut a, mut b, mut c, mut d, mut e] = h;
        for (i, wi) in w.iter().enumerate() {
            let (f, k) = match i {
                0..=19 => ((b & c) | (!b & d), 0x5A827999),
                20..=39 => (b ^ c ^ d, 0x6ED9EBA1),
                40..=59 => ((b & c) | (b & d) | (c & d), 0x8F1BBCDC),
                _ => (b ^ c ^ d, 0xCA62C1D6),
            };
            let t = a.rotate_left(5).wrapping_add(f).wrapping_add(e).wrapping_add(k).wrapping_add(*wi);
            e = d;
            d = c;
            c = b.rotate_left(30);
            b = a;
            a = t;
        }
        for (x, y) in h.iter_mut().zip([a, b, c, d, e]) {
            *x = x.wrapping_add(y);
        }
    }
    h.iter().map(|x| format!("{x:08x}")).collect()
}
