//! Reading a Redis lock's status: one read-only script ([`super::STATUS`]).

use super::keys::RedisKeys;
use super::scripts::STATUS;
use crate::io::{Op, RedisOp, RedisValue, Reply};
use crate::status::{unexpected, LockStatus, StatusStep};
use crate::{Backend, Error};

/// A status read of one Redis lock.
#[derive(Debug)]
pub(crate) struct RedisStatusRead;

impl RedisStatusRead {
    /// `keys` of the mutex and `rw` of the read-write lock of one name:
    /// the status shows whichever holds it.
    pub(crate) fn start(keys: &RedisKeys, rw: &RedisKeys) -> (Self, Op) {
        let keys =
            vec![keys.lock().to_owned(), keys.fence().to_owned(), keys.queue().to_owned(), rw.queue().to_owned()];
        (RedisStatusRead, Op::Redis(RedisOp::Eval { script: &STATUS, keys, args: vec![] }))
    }

    pub(crate) fn on_reply(&mut self, reply: Reply) -> StatusStep {
        StatusStep::Done(decode(reply))
    }
}

fn decode(reply: Reply) -> Result<LockStatus, Error> {
    match reply {
        Reply::Redis(RedisValue::Array(v)) => match v.as_slice() {
            [RedisValue::Bulk(h), RedisValue::Int(ttl), RedisValue::Int(token), RedisValue::Int(w), RedisValue::Int(r)] =>
            {
                let holder = String::from_utf8_lossy(h).into_owned();
                Ok(LockStatus {
                    held: !holder.is_empty(),
                    holder: (!holder.is_empty()).then_some(holder),
                    fencing_token: u64::try_from(*token).ok().filter(|t| *t > 0),
                    waiters: usize::try_from(*w).ok(),
                    ttl_ms: (*ttl >= 0).then_some(*ttl),
                    readers: u32::try_from(*r).unwrap_or(0),
                })
            }
            other => Err(Error::Protocol(format!("unexpected status reply {other:?}"))),
        },
        // One read, no timeout to retry within: a busy or loading server is named.
        Reply::Refused(text) if crate::refusal::is_transient(Backend::Redis, &text) => Err(Error::Unavailable(text)),
        other => Err(unexpected(other)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(holder: &str, ttl: i64, token: i64, waiters: i64) -> Reply {
        Reply::Redis(RedisValue::Array(vec![
            RedisValue::Bulk(holder.as_bytes().to_vec()),
            RedisValue::Int(ttl),
            RedisValue::Int(token),
            RedisValue::Int(waiters),
            RedisValue::Int(0),
        ]))
    }

    #[test]
    fn a_held_lock_shows_its_holder_token_waiters_and_ttl() {
        let st = decode(reply("c:1", 900, 42, 2)).unwrap();
        assert_eq!(
            st,
            LockStatus {
                held: true,
                holder: Some("c:1".into()),
                fencing_token: Some(42),
                waiters: Some(2),
                ttl_ms: Some(900),
                readers: 0
            }
        );
    }

    #[test]
    fn a_free_lock_has_no_holder_and_no_ttl() {
        let st = decode(reply("", -2, 0, 0)).unwrap();
        assert!(!st.held);
        assert_eq!((st.holder, st.fencing_token, st.ttl_ms), (None, None, None));
    }

    #[test]
    fn a_busy_server_is_named_and_a_strange_reply_is_a_protocol_error() {
        assert!(matches!(decode(Reply::Refused("BUSY running a script".into())), Err(Error::Unavailable(_))));
        assert!(matches!(decode(Reply::Redis(RedisValue::Int(1))), Err(Error::Protocol(_))));
    }
}
