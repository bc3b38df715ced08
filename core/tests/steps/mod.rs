//! Helpers for the tests that drive one machine by hand, step by step:
//! instants, the one command it must send, the events it reports, and the
//! Redis replies its scripts get.

#![allow(dead_code)]

use polylock_core::{Backend, Command, Event, Instant, LockConfig, LockMachine, LockName, Nonce, RedisValue, Reply};

pub fn at(ms: u64) -> Instant {
    Instant::from_millis(ms)
}

/// The one command the machine has to send now.
pub fn one_command(m: &mut LockMachine) -> Command {
    let cmd = m.poll_command().expect("a command to send");
    assert_eq!(m.poll_command(), None, "one command at a time here");
    cmd
}

pub fn events(m: &mut LockMachine) -> Vec<Event> {
    std::iter::from_fn(|| m.poll_event()).collect()
}

/// ACQUIRE's answer: granted with `token` (a decimal string, as the
/// mutex scripts send it).
pub fn granted(token: i64) -> Reply {
    Reply::Redis(RedisValue::Array(vec![RedisValue::Int(1), RedisValue::Bulk(token.to_string().into_bytes())]))
}

/// A Redis machine with the default config for the lock `name`.
pub fn redis_machine(name: &str) -> LockMachine {
    LockMachine::new(LockConfig::new(Backend::Redis), LockName::new(name).unwrap(), Nonce(1)).unwrap()
}
