//! On a Redis Cluster (`LockConfig::shard_release`), a release also
//! publishes on Redisson's channel as a shard channel, where Redisson's
//! cluster waiters listen by default (sharded pub/sub): LEAVE carries that
//! channel, when it is in the lock key's slot, and nothing otherwise.

use std::time::Duration;

use polylock_core::RedisOp;
use polylock_core::*;

/// The shard channel argument of the LEAVE that releases a held `name`.
fn leave_shard_arg(name: &str, shard_release: bool) -> String {
    let mut cfg = LockConfig::new(Backend::Redis);
    cfg.set_lease(Duration::from_secs(3));
    cfg.shard_release = shard_release;
    let mut m = LockMachine::new(cfg, LockName::new(name).unwrap(), Nonce(1)).unwrap();
    let owner = OwnerId(1);
    m.acquire(Instant::from_millis(0), owner, AcquireOptions::default(), Nonce(2)).unwrap();
    let grant = m.poll_command().expect("the acquire");
    let granted = RedisValue::Array(vec![RedisValue::Int(1), RedisValue::Int(7)]);
    m.handle_reply(Instant::from_millis(1), grant.id, Reply::Redis(granted));
    assert!(m.is_held_by(owner));
    let released = m.release(Instant::from_millis(2), owner).unwrap();
    assert!(matches!(released, ReleaseProgress::Releasing(_)), "{released:?}");
    let leave = m.poll_command().expect("the release");
    match leave.op {
        Op::Redis(RedisOp::Eval { script, args, .. }) if script.name == "polylock_leave" => {
            args.get(4).cloned().expect("LEAVE has a shard channel argument")
        }
        other => panic!("expected LEAVE, got {other:?}"),
    }
}

#[test]
fn a_release_on_a_cluster_also_publishes_on_redissons_shard_channel() {
    assert_eq!(leave_shard_arg("orders/42", true), "redisson_lock__channel:{orders/42}");
    assert_eq!(leave_shard_arg("orders{42}", true), "redisson_lock__channel:orders{42}");
}

#[test]
fn no_shard_channel_off_a_cluster_or_outside_the_lock_keys_slot() {
    assert_eq!(leave_shard_arg("orders/42", false), "");
    for name in ["a{", "a}", "a{}b"] {
        assert_eq!(leave_shard_arg(name, true), "", "{name}");
    }
}
