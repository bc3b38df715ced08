//! Drives a machine with an arbitrary byte string read as a sequence of
//! inputs (application calls, replies of every shape, notifications,
//! connection changes, time jumps). Shared by the `cargo fuzz` target and
//! a seeded test, so both exercise the same interpretation. The machine
//! must never panic and its outputs must stay sane.

use crate::io::{ConnectionEvent, Notification, RedisValue, Reply, TransportError};
use crate::{AcquireOptions, Backend, Instant, LockConfig, LockMachine, LockName, Nonce, OwnerId, RequestId, Ticket};

struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn byte(&mut self) -> Option<u8> {
        let (b, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(*b)
    }
    fn u16(&mut self) -> Option<u16> {
        Some(u16::from(self.byte()?) << 8 | u16::from(self.byte()?))
    }
}

/// Runs one fuzz case. Panics only if the machine breaks an invariant.
pub fn run(data: &[u8]) {
    let mut b = Bytes(data);
    let Some(first) = b.byte() else { return };
    let backend = if first & 1 == 0 { Backend::Redis } else { Backend::ZooKeeper };
    let name = LockName::new("/fuzz/lock").expect("valid");
    let Ok(mut m) = LockMachine::new(LockConfig::new(backend), name, Nonce(u128::from(first))) else { return };
    let mut now = 0u64;
    let mut ids: Vec<RequestId> = Vec::new();
    let mut tickets: Vec<Ticket> = Vec::new();
    let mut nonce = 0u128;
    while let Some(op) = b.byte() {
        let t = Instant::from_millis(now);
        match op % 10 {
            0 => {
                let owner = OwnerId(u64::from(b.byte().unwrap_or(0) % 4));
                let flags = b.byte().unwrap_or(0);
                let opts = AcquireOptions {
                    no_wait: flags & 1 == 1,
                    deadline: (flags & 2 == 2).then(|| Instant::from_millis(now + u64::from(b.u16().unwrap_or(0)))),
                    lease: (flags & 4 == 4).then(|| std::time::Duration::from_millis(100 + u64::from(flags))),
                    permits: None,
                    stop_margin: std::time::Duration::ZERO,
                };
                nonce += 1;
                if let Ok(ticket) = m.acquire(t, owner, opts, Nonce(nonce)) {
                    tickets.push(ticket);
                }
            }
            1 => {
                let _ = m.release(t, OwnerId(u64::from(b.byte().unwrap_or(0) % 4)));
            }
            2 => {
                if let Some(ticket) = pick(&mut b, &tickets) {
                    let _ = m.cancel(t, ticket);
                }
            }
            3..=5 => {
                if let Some(id) = pick(&mut b, &ids) {
                    let reply = reply(&mut b);
                    m.handle_reply(t, id, reply);
                }
            }
            6 => {
                let n = match b.byte().unwrap_or(0) % 3 {
                    0 => Notification::Message {
                        // Our nonces are 1.. (see acquire above): aim at a live claim's channel.
                        channel: format!(
                            "redisson_lock__channel:{{/fuzz/lock}}:{}|{:032x}|30000",
                            m.holder_id(OwnerId(u64::from(b.byte().unwrap_or(0) % 4))),
                            u64::from(b.byte().unwrap_or(0) % 8)
                        ),
                        payload: b.u16().unwrap_or(0).to_string(),
                    },
                    1 => Notification::WatchFired { id: pick(&mut b, &ids).unwrap_or(RequestId(0)) },
                    _ => Notification::NodeDeleted { id: pick(&mut b, &ids).unwrap_or(RequestId(0)) },
                };
                m.handle_notification(t, n);
            }
            7 => {
                let ev = match b.byte().unwrap_or(0) % 3 {
                    0 => ConnectionEvent::Disconnected,
                    1 => ConnectionEvent::Connected,
                    _ => ConnectionEvent::SessionExpired,
                };
                m.handle_connection(t, ev);
            }
            8 => {
                // Jump to the next deadline (or a bit further), as a driver would.
                now = m.poll_timeout().map_or(now, |d| d.as_millis().max(now)) + u64::from(b.byte().unwrap_or(0));
                m.handle_timeout(Instant::from_millis(now));
            }
            _ => {
                // Time going backwards must be harmless.
                m.handle_timeout(Instant::from_millis(now.saturating_sub(u64::from(b.byte().unwrap_or(0)))));
            }
        }
        while let Some(cmd) = m.poll_command() {
            ids.push(cmd.id);
        }
        while m.poll_event().is_some() {}
        if let Some(d) = m.poll_timeout() {
            // A deadline may be due now, never unreachable.
            assert!(d.as_millis() < u64::MAX);
        }
        if let Some((_, count, _)) = m.holder() {
            assert!(count >= 1, "a holder with a zero hold count");
        }
    }
}

fn pick<T: Copy>(b: &mut Bytes<'_>, from: &[T]) -> Option<T> {
    if from.is_empty() {
        return None;
    }
    let i = usize::from(b.byte()?) % from.len();
    // Favour recent items: index from the end.
    Some(from[from.len() - 1 - i])
}

fn reply(b: &mut Bytes<'_>) -> Reply {
    let v = i64::from(b.u16().unwrap_or(0)) - 2;
    match b.byte().unwrap_or(0) % 12 {
        // A grant's token comes as an integer or as decimal digits (a
        // negative one as "-3": digits that are no token).
        0 if v % 2 == 0 => Reply::Redis(RedisValue::Array(vec![RedisValue::Int(1), RedisValue::Int(v)])),
        0 => Reply::Redis(RedisValue::Array(vec![RedisValue::Int(1), RedisValue::Bulk(v.to_string().into_bytes())])),
        1 => Reply::Redis(RedisValue::Array(vec![RedisValue::Int(0), RedisValue::Int(v)])),
        2 => Reply::Redis(RedisValue::Int(v % 3)),
        3 => Reply::Redis(RedisValue::Nil),
        4 => Reply::Created { path: format!("/fuzz/lock/_c_x-lock-{v:010}"), czxid: v },
        5 => Reply::Children((0..(v.rem_euclid(4))).map(|i| format!("_c_{i}-lock-{i:010}")).collect()),
        6 => Reply::Stat { czxid: v },
        7 => Reply::NoNode,
        8 => Reply::Done,
        9 => Reply::Failed(TransportError { message: "fuzz".into() }),
        // A refusal that is fatal, one that is a passing server state, or a
        // script the server lacks (sent again with its source).
        10 => Reply::Refused(["ERR fuzz", "BUSY fuzz", "NOSCRIPT fuzz"][v.rem_euclid(3) as usize].into()),
        _ => Reply::Redis(RedisValue::Status("OK".into())),
    }
}
