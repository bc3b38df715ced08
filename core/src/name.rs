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
pub struct LockName {
    name: String,
    /// What follows `prefix:` in each of polylock's own Redis keys (see
    /// [`LockName::redis_fence_key`]); computed once, as it may take a search.
    own_key_suffix: String,
}

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
        Ok(LockName { name: name.to_owned(), own_key_suffix: own_key_suffix(name) })
    }

    /// The name as given.
    pub fn as_str(&self) -> &str {
        &self.name
    }

    /// Redis: the lock hash (Redisson layout: the key is the name).
    pub fn redis_key(&self) -> &str {
        &self.name
    }

    /// Redis: the fencing counter (it expires with the lease of the last
    /// grant). Like the queue keys, in the lock key's cluster slot whatever
    /// braces the name holds (see `own_key_suffix`).
    pub fn redis_fence_key(&self) -> String {
        self.redis_own_key("polylock_fence")
    }

    /// Redis: the FIFO of waiters (member: `<field>|<claim id>|<lease ms>`, score: arrival time).
    pub fn redis_queue_key(&self) -> String {
        self.redis_own_key("polylock_queue")
    }

    /// Redis: the liveness deadlines of the waiters (member as in the queue, score: deadline).
    pub fn redis_queue_deadline_key(&self) -> String {
        self.redis_own_key("polylock_queue_deadline")
    }

    fn redis_own_key(&self, prefix: &str) -> String {
        format!("{prefix}:{}", self.own_key_suffix)
    }

    /// Redis: the channel Redisson waiters listen on; every release
    /// publishes `0` here. Redisson's naming, so its waiters hear us:
    /// `redisson_lock__channel:name` when the name holds a `{`, else
    /// `redisson_lock__channel:{name}`.
    pub fn redis_channel(&self) -> String {
        if self.name.contains('{') {
            format!("redisson_lock__channel:{}", self.name)
        } else {
            format!("redisson_lock__channel:{{{}}}", self.name)
        }
    }

    /// Redis: the channel one polylock waiter listens on (Redisson's fair-lock
    /// naming: the lock's channel, `:`, the waiter), named by its queue member.
    pub fn redis_waiter_channel(&self, member: &str) -> String {
        format!("{}:{member}", self.redis_channel())
    }

    /// ZooKeeper: the lock's parent node; contenders are its children.
    pub fn zk_path(&self) -> String {
        zk_path_of(&self.name)
    }
}

/// Redis: what follows `prefix:` in polylock's own keys of a lock, so that
/// each is in the lock key's cluster slot and never shared with another name:
/// - a name without `}`: `prefix:{name}`. The braces are the key's
///   hash tag, and the tag is the whole name, which is what Redis hashes
///   for such a name (an unclosed `{` of the name is inside our tag);
/// - a name with a `}`: `prefix:{tag}:name`, the tag being the name's
///   own hash tag when it has one (`orders{42}`: `42`), else a short
///   text computed to hash to the name's slot (`a{}b`, `a}b`: Redis
///   hashes the whole name, which cannot sit inside braces).
///
/// The two shapes never meet: a `{tag}:name` key holds a `}` after its
/// tag, a `{name}` key does not. Redisson's rule (`prefix:name` when the
/// name holds a `{`) would put `a{}b`'s keys in another slot and give
/// `abc` and `{abc}` one queue; it is kept for the channel Redisson
/// shares with us ([`LockName::redis_channel`]).
fn own_key_suffix(name: &str) -> String {
    if !name.contains('}') {
        return format!("{{{name}}}");
    }
    let tag = match crate::keyslot::hash_tag(name) {
        Some(tag) => tag.to_owned(),
        None => crate::keyslot::tag_for_slot(crate::keyslot::key_slot(name)),
    };
    format!("{{{tag}}}:{name}")
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
        f.write_str(&self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keyslot::key_slot;

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

    /// Every polylock key of a lock hashes to the lock key's cluster slot,
    /// for names of every brace shape (the Redis Cluster support needs it).
    #[test]
    fn every_key_of_a_lock_is_in_the_lock_keys_slot() {
        for name in crate::keyslot::brace_shaped_names() {
            let n = LockName::new(&name).unwrap();
            let slot = key_slot(n.redis_key());
            for key in [n.redis_fence_key(), n.redis_queue_key(), n.redis_queue_deadline_key()] {
                assert_eq!(key_slot(&key), slot, "{key:?} is not in the slot of {name:?}");
            }
        }
    }

    /// Two names never share a key: a shared queue would let one lock's
    /// waiters block the other's.
    #[test]
    fn different_names_have_different_keys() {
        let mut seen = std::collections::HashMap::new();
        for name in crate::keyslot::brace_shaped_names() {
            let n = LockName::new(&name).unwrap();
            for key in [n.redis_fence_key(), n.redis_queue_key(), n.redis_queue_deadline_key()] {
                if let Some(other) = seen.insert(key.clone(), name.clone()) {
                    panic!("{name:?} and {other:?} share {key:?}");
                }
            }
        }
    }

    /// Redisson's `prefixName`: `prefix:name` when the name holds a `{`,
    /// else `prefix:{name}`; its waiters listen there.
    #[test]
    fn the_release_channel_is_redissons() {
        let channel = |name: &str| LockName::new(name).unwrap().redis_channel();
        assert_eq!(channel("orders/42"), "redisson_lock__channel:{orders/42}");
        assert_eq!(channel("orders{42}"), "redisson_lock__channel:orders{42}");
        assert_eq!(channel("a{"), "redisson_lock__channel:a{");
        assert_eq!(channel("a}"), "redisson_lock__channel:{a}}");
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
