//! Lock names: validated once, then mapped to a Redis key and a ZooKeeper path.
//!
//! One name means the same lock from every language, so the mapping lives here:
//! - Redis: the key is the name itself (Redisson's `getLock(name)` layout).
//! - ZooKeeper: the path is the name if it starts with `/`, else `/` + name
//!   (so `client.lock("/locks/orders-42")` meets Curator's
//!   `InterProcessMutex(client, "/locks/orders-42")`).

use crate::Error;

/// Longest accepted name, in bytes.
pub const MAX_NAME_LEN: usize = 1024;

/// A validated lock name.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LockName(String);

impl LockName {
    /// Validates `name`. Rules (each failure is [`Error::InvalidName`] saying which):
    /// - 1 to 1024 bytes;
    /// - no NUL and no control characters (ZooKeeper refuses them in paths);
    /// - as a ZooKeeper path: no empty segment (`a//b`), no trailing `/`,
    ///   no `.` or `..` segment, not `/` alone and not under `/zookeeper`.
    pub fn new(name: &str) -> Result<Self, Error> {
        if name.is_empty() {
            return Err(Error::InvalidName("the name is empty".into()));
        }
        if name.len() > MAX_NAME_LEN {
            return Err(Error::InvalidName(format!(
                "the name is {} bytes long; the limit is {MAX_NAME_LEN}",
                name.len()
            )));
        }
        if let Some(c) = name.chars().find(|c| c.is_control()) {
            return Err(Error::InvalidName(format!("the name contains the control character U+{:04X}", c as u32)));
        }
        let path = zk_path_of(name);
        if path == "/" {
            return Err(Error::InvalidName("the name is only '/'".into()));
        }
        if path.ends_with('/') {
            return Err(Error::InvalidName("the name ends with '/'".into()));
        }
        for segment in path[1..].split('/') {
            match segment {
                "" => return Err(Error::InvalidName("the name has an empty path segment ('//')".into())),
                "." | ".." => return Err(Error::InvalidName(format!("the name has a '{segment}' path segment"))),
                _ => {}
            }
        }
        if path == "/zookeeper" || path.starts_with("/zookeeper/") {
            return Err(Error::InvalidName("'/zookeeper' is reserved by ZooKeeper".into()));
        }
        Ok(LockName(name.to_owned()))
    }

    /// The name as given.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Redis: the lock hash (Redisson layout: the key is the name).
    pub fn redis_key(&self) -> &str {
        &self.0
    }

    /// Redis: the fencing counter. `{name}` is a hash tag, so in cluster mode
    /// the counter lives in the same slot as the lock key whenever the name
    /// holds no braces of its own (the slot of `name` is the slot of `{name}`).
    pub fn redis_fence_key(&self) -> String {
        format!("polylock_fence:{{{}}}", self.0)
    }

    /// Redis: the FIFO of waiters (member: field, score: arrival time).
    pub fn redis_queue_key(&self) -> String {
        format!("polylock_queue:{{{}}}", self.0)
    }

    /// Redis: the liveness deadlines of the waiters (member: field, score: deadline).
    pub fn redis_queue_deadline_key(&self) -> String {
        format!("polylock_queue_deadline:{{{}}}", self.0)
    }

    /// Redis: the channel Redisson waiters listen on; every release publishes `0` here.
    pub fn redis_channel(&self) -> String {
        format!("redisson_lock__channel:{{{}}}", self.0)
    }

    /// Redis: the channel one polylock waiter listens on (Redisson's fair-lock
    /// naming), named by its queue member.
    pub fn redis_waiter_channel(&self, member: &str) -> String {
        format!("redisson_lock__channel:{{{}}}:{member}", self.0)
    }

    /// ZooKeeper: the lock's parent node; contenders are its children.
    pub fn zk_path(&self) -> String {
        zk_path_of(&self.0)
    }
}

fn zk_path_of(name: &str) -> String {
    if name.starts_with('/') {
        name.to_owned()
    } else {
        format!("/{name}")
    }
}

impl std::fmt::Display for LockName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_plain_and_path_names() {
        let n = LockName::new("orders/42").unwrap();
        assert_eq!(n.redis_key(), "orders/42");
        assert_eq!(n.zk_path(), "/orders/42");
        assert_eq!(n.redis_channel(), "redisson_lock__channel:{orders/42}");
        let p = LockName::new("/locks/orders-42").unwrap();
        assert_eq!(p.zk_path(), "/locks/orders-42");
        assert_eq!(p.redis_fence_key(), "polylock_fence:{/locks/orders-42}");
    }

    #[test]
    fn rejects_bad_names_with_a_reason() {
        let long = "x".repeat(MAX_NAME_LEN + 1);
        for (bad, why) in [
            ("", "empty"),
            ("a\0b", "U+0000"),
            ("a\nb", "U+000A"),
            (long.as_str(), "limit is 1024"),
            ("/", "only '/'"),
            ("a/", "ends with"),
            ("a//b", "empty path segment"),
            ("/a/../b", "'..'"),
            ("zookeeper/x", "reserved"),
        ] {
            match LockName::new(bad) {
                Err(Error::InvalidName(msg)) => assert!(msg.contains(why), "{bad:?}: {msg}"),
                other => panic!("{bad:?} gave {other:?}"),
            }
        }
        assert!(LockName::new(&"x".repeat(MAX_NAME_LEN)).is_ok());
    }
}
