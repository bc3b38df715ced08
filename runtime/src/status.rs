//! `Client::status`: who holds a lock right now, as the server sees it.

use polylock_core::{Backend, LockName, Op, RedisValue, Reply};

use crate::client::Client;
use crate::error::{Error, Result};
use crate::transport::Transport;

/// A lock as the server sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    /// Held by anyone, in any process.
    pub held: bool,
    /// The holder's id: Redis `<client id>:<owner>` (Redisson's layout),
    /// ZooKeeper the holder node's data (ours: the same id; Curator's: an IP).
    pub holder: Option<String>,
    /// Redis: the last fencing token issued; ZooKeeper: the holder node's czxid.
    pub fencing_token: Option<u64>,
    /// Contenders waiting, where the backend can tell (Redis: polylock's
    /// queue, which Redisson waiters do not join; ZooKeeper: every node after the first).
    pub waiters: Option<usize>,
    /// Redis: milliseconds until the lease expires without renewal.
    pub ttl_ms: Option<i64>,
}

impl Client {
    /// Reads the lock's state from the server. Read-only.
    pub async fn status(&self, name: &str) -> Result<Status> {
        let n = LockName::new(name).map_err(|e| Error::from_core(name, e))?;
        match &self.shared.transport {
            Transport::Redis(_) => {
                let op = Op::Eval {
                    script: &polylock_core::redis::STATUS,
                    keys: vec![n.redis_key().to_owned(), n.redis_fence_key(), n.redis_queue_key()],
                    args: vec![],
                };
                match self.shared.transport.start(name, polylock_core::RequestId(0), op).await {
                    Reply::Redis(RedisValue::Array(v)) => match v.as_slice() {
                        [RedisValue::Bulk(h), RedisValue::Int(ttl), RedisValue::Int(token), RedisValue::Int(w)] => {
                            let holder = String::from_utf8_lossy(h).into_owned();
                            Ok(Status {
                                held: !holder.is_empty(),
                                holder: (!holder.is_empty()).then_some(holder),
                                fencing_token: (*token > 0).then_some(*token as u64),
                                waiters: Some(*w as usize),
                                ttl_ms: (*ttl >= 0).then_some(*ttl),
                            })
                        }
                        other => Err(Error::Protocol(format!("unexpected status reply {other:?}"))),
                    },
                    Reply::Failed(e) => Err(Error::Connect { addr: Backend::Redis.as_str().into(), reason: e.message }),
                    // One read, no timeout to retry within: a busy or loading server is named.
                    Reply::Refused(reply) if polylock_core::refusal::is_transient(Backend::Redis, &reply) => {
                        Err(Error::Unavailable { name: name.to_owned(), reply })
                    }
                    other => Err(Error::Protocol(format!("unexpected status reply {other:?}"))),
                }
            }
            Transport::Zk(z) => {
                let c = z.current();
                let path = n.zk_path();
                // The first node can vanish between the listing and the read:
                // list again (bounded; contenders come and go).
                for _ in 0..10 {
                    let children = match c.list_children(&path).await {
                        Ok(c) => c,
                        Err(zookeeper_client::Error::NoNode) => Vec::new(),
                        Err(e) => {
                            return Err(Error::Connect {
                                addr: Backend::ZooKeeper.as_str().into(),
                                reason: e.to_string(),
                            })
                        }
                    };
                    let sorted = polylock_core::zk::sorted_contenders(children);
                    let Some(first) = sorted.first() else {
                        return Ok(Status {
                            held: false,
                            holder: None,
                            fencing_token: None,
                            waiters: Some(0),
                            ttl_ms: None,
                        });
                    };
                    match c.get_data(&format!("{path}/{first}")).await {
                        Ok((data, stat)) => {
                            return Ok(Status {
                                held: true,
                                holder: Some(String::from_utf8_lossy(&data).into_owned()),
                                fencing_token: Some(stat.czxid as u64),
                                waiters: Some(sorted.len() - 1),
                                ttl_ms: None,
                            })
                        }
                        Err(zookeeper_client::Error::NoNode) => continue,
                        Err(e) => {
                            return Err(Error::Connect {
                                addr: Backend::ZooKeeper.as_str().into(),
                                reason: e.to_string(),
                            })
                        }
                    }
                }
                Err(Error::Protocol(format!("{path}: contenders changed too fast to read a status")))
            }
        }
    }
}
