//! On Redis a lock (or read-write lock) and a semaphore of one name would
//! share the key at the name, a hash for one and a counter for the other:
//! the server refuses the second kind's script with `WRONGTYPE`. That is the
//! caller's bad input, answered with a typed `InvalidName` that says so,
//! never a protocol error that stops the lock's machine.

mod steps;

use polylock_core::*;
use steps::{at, events, granted, one_command};

const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value \
                         script: 9bcb6046747732b9a244c3b66d2476b4520942ac, on @user_script:29.";

#[test]
fn an_acquire_on_a_name_holding_another_kind_fails_invalid_name_and_the_name_stays_usable() {
    let mut m = steps::redis_machine("t");
    let owner = OwnerId(1);
    let ticket = m.acquire(at(0), owner, AcquireOptions::default(), Nonce(2)).unwrap();
    let cmd = one_command(&mut m);
    m.handle_reply(at(1), cmd.id, Reply::Refused(WRONGTYPE.into()));
    match events(&mut m).as_slice() {
        [Event::Failed { ticket: t, owner: o, error: Error::InvalidName(why) }] => {
            assert_eq!((*t, *o), (ticket, owner));
            assert!(why.contains("another kind"), "the error says why: {why}");
        }
        other => panic!("not a typed refusal of the name: {other:?}"),
    }
    assert_eq!(m.poll_command(), None, "nothing to clean up: the script failed before it wrote");
    // Not a fatal state: once the name is free of the other kind, it works.
    let again = m.acquire(at(2), owner, AcquireOptions::default(), Nonce(3)).expect("not stuck in a fatal state");
    let cmd = one_command(&mut m);
    m.handle_reply(at(3), cmd.id, granted(9));
    assert_eq!(events(&mut m), vec![Event::Granted { ticket: again, owner, token: FencingToken(9), reentry: 0 }]);
}
