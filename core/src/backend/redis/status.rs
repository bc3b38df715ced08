//! Reading a Redis lock's status: one read-only script ([`super::STATUS`]).

use super::keys::RedisKeys;
use super::scripts::STATUS;
use crate::io::{Op, RedisOp, RedisValue, Reply};
use crate::status::{unexpected, LockStatus, PermitCounts, StatusStep};
use crate::{keyslot, Backend, Error};

/// A status read of one Redis lock.
#[derive(Debug)]
pub(crate) struct RedisStatusRead;

impl RedisStatusRead {
    /// `keys` of the mutex, `rw` of the read-write lock and `sem` of the
    /// semaphore of one name: the status shows whichever holds it.
    /// `cluster`: on a Redis Cluster every key of the script must be in the
    /// lock key's slot. Redisson's permit expiries of a name whose Redisson
    /// keys are not (`a{}b`: a semaphore of it is refused there, see
    /// [`super::keys::refuse_split_keys_on_a_cluster`], and Redisson cannot
    /// make one either) hold nothing: the semaphore's own queue, empty for
    /// such a name, is read in their place.
    pub(crate) fn start(keys: &RedisKeys, rw: &RedisKeys, sem: &RedisKeys, cluster: bool) -> (Self, Op) {
        let slot = keyslot::key_slot(keys.lock());
        let permit_timeouts =
            sem.permit_timeouts().map(|t| if cluster && keyslot::key_slot(t) != slot { sem.queue() } else { t });
        let keys = [keys.lock(), keys.fence(), keys.queue(), rw.queue()]
            .into_iter()
            .chain(permit_timeouts)
            .chain([sem.queue()])
            .chain(sem.permit_total())
            .map(str::to_owned)
            .collect();
        // With its source: a one-off read (`polylock status`), where EVALSHA
        // saves little and a NOSCRIPT would need a second try.
        (RedisStatusRead, Op::Redis(RedisOp::Eval { script: &STATUS, keys, args: vec![], by_sha: false }))
    }

    pub(crate) fn on_reply(&mut self, reply: Reply) -> StatusStep {
        StatusStep::Done(decode(reply))
    }
}

fn decode(reply: Reply) -> Result<LockStatus, Error> {
    match reply {
        Reply::Redis(RedisValue::Array(v)) => match v.as_slice() {
            [RedisValue::Bulk(h), RedisValue::Int(ttl), RedisValue::Int(token), RedisValue::Int(w), RedisValue::Int(r), rest @ ..] =>
            {
                let permits = match rest {
                    [] => None,
                    [RedisValue::Int(held), RedisValue::Int(total)] => Some(PermitCounts {
                        held: u32::try_from(*held).unwrap_or(0),
                        total: u32::try_from(*total).unwrap_or(0),
                    }),
                    other => return Err(Error::Protocol(format!("unexpected status permits {other:?}"))),
                };
                let holder = String::from_utf8_lossy(h).into_owned();
                Ok(LockStatus {
                    held: !holder.is_empty(),
                    holder: (!holder.is_empty()).then_some(holder),
                    fencing_token: u64::try_from(*token).ok().filter(|t| *t > 0),
                    waiters: usize::try_from(*w).ok(),
                    ttl_ms: (*ttl >= 0).then_some(*ttl),
                    readers: u32::try_from(*r).unwrap_or(0),
                    permits,
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
                readers: 0,
                permits: None
            }
        );
    }

    #[test]
    fn a_semaphore_shows_its_permits() {
        let Reply::Redis(RedisValue::Array(mut v)) = reply("c:9:1", 800, 7, 1) else { unreachable!() };
        v.extend([RedisValue::Int(2), RedisValue::Int(4)]);
        let st = decode(Reply::Redis(RedisValue::Array(v))).unwrap();
        assert_eq!(st.permits, Some(PermitCounts { held: 2, total: 4 }));
        assert!(st.held);
        assert_eq!(decode(reply("c:1", 900, 42, 2)).unwrap().permits, None, "a lock has no permits");
    }

    #[test]
    fn a_free_lock_has_no_holder_and_no_ttl() {
        let st = decode(reply("", -2, 0, 0)).unwrap();
        assert!(!st.held);
        assert_eq!((st.holder, st.fencing_token, st.ttl_ms), (None, None, None));
    }

    /// A lock held past its first lease: renewals extend the lock, not the
    /// fencing counter, which expires with the lease of the grant that set
    /// it (the next grant's token still exceeds it: it takes the server's
    /// clock). The script reads the missing counter as 0; the status shows
    /// the holder and no token, never a token of 0.
    #[test]
    fn a_held_lock_whose_counter_expired_shows_no_token() {
        let st = decode(reply("c:1", 900, 0, 0)).unwrap();
        assert!(st.held);
        assert_eq!(st.holder.as_deref(), Some("c:1"));
        assert_eq!(st.fencing_token, None);
    }

    #[test]
    fn a_busy_server_is_named_and_a_strange_reply_is_a_protocol_error() {
        assert!(matches!(decode(Reply::Refused("BUSY running a script".into())), Err(Error::Unavailable(_))));
        assert!(matches!(decode(Reply::Redis(RedisValue::Int(1))), Err(Error::Protocol(_))));
    }
}
