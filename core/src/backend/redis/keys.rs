//! Where a Redis lock lives: its keys and channels. The lock hash is the
//! name itself (Redisson's `getLock(name)` layout); polylock's own keys sit
//! in the lock key's cluster slot whatever braces the name holds.

use crate::{keyslot, Error, LockMode, LockName};

/// The keys and the release channel of one lock, computed once per lock
/// (a name with a `}` may need a search for its tag).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisKeys {
    lock: String,
    fence: String,
    queue: String,
    queue_deadline: String,
    channel: String,
    /// Read-write locks: Redisson's prefix of a reader's timeout keys
    /// (`{name}`, or the name itself when it holds a `{`).
    timeout_base: Option<String>,
    /// Semaphores: Redisson's sorted set of permit ids by expiry, and the
    /// key where polylock records the semaphore's number of permits.
    permits: Option<(String, String)>,
}

impl RedisKeys {
    /// Every key of the lock `name`, all in the lock key's Redis Cluster slot.
    pub fn of(name: &LockName) -> Self {
        let name = name.as_str();
        let suffix = own_key_suffix(name);
        RedisKeys {
            lock: name.to_owned(),
            fence: format!("polylock_fence:{suffix}"),
            queue: format!("polylock_queue:{suffix}"),
            queue_deadline: format!("polylock_queue_deadline:{suffix}"),
            channel: redisson_prefixed("redisson_lock__channel", name),
            timeout_base: None,
            permits: None,
        }
    }

    /// The keys of the semaphore `name`: Redisson's
    /// `RPermitExpirableSemaphore` (the available permits as a counter at
    /// the name, its permit ids by expiry in `{name}:timeout`, channel
    /// `redisson_sc:{name}`), the lock's fence counter, a waiter queue of
    /// its own, and `polylock_permits:K`, the number of permits every
    /// client must agree on.
    pub fn of_semaphore(name: &LockName) -> Self {
        let name = name.as_str();
        let suffix = own_key_suffix(name);
        let timeout = if name.contains('{') { format!("{name}:timeout") } else { format!("{{{name}}}:timeout") };
        RedisKeys {
            lock: name.to_owned(),
            fence: format!("polylock_fence:{suffix}"),
            queue: format!("polylock_semqueue:{suffix}"),
            queue_deadline: format!("polylock_semqueue_deadline:{suffix}"),
            channel: redisson_prefixed("redisson_sc", name),
            timeout_base: None,
            permits: Some((timeout, format!("polylock_permits:{suffix}"))),
        }
    }

    /// Semaphores: Redisson's sorted set of held permit ids, scored by
    /// their expiry (ms).
    pub fn permit_timeouts(&self) -> Option<&str> {
        self.permits.as_ref().map(|(t, _)| t.as_str())
    }

    /// Semaphores: where the agreed number of permits is recorded.
    pub fn permit_total(&self) -> Option<&str> {
        self.permits.as_ref().map(|(_, p)| p.as_str())
    }

    /// The keys of the read-write lock `name`: Redisson's `RReadWriteLock`
    /// hash at the name and its channel `redisson_rwlock:{name}`, the
    /// lock's one fence counter, and a waiter queue of its own.
    pub fn of_read_write(name: &LockName) -> Self {
        let name = name.as_str();
        let suffix = own_key_suffix(name);
        RedisKeys {
            lock: name.to_owned(),
            fence: format!("polylock_fence:{suffix}"),
            queue: format!("polylock_rwqueue:{suffix}"),
            queue_deadline: format!("polylock_rwqueue_deadline:{suffix}"),
            channel: redisson_prefixed("redisson_rwlock", name),
            timeout_base: Some(if name.contains('{') { name.to_owned() } else { format!("{{{name}}}") }),
            permits: None,
        }
    }

    /// Read-write locks: the key whose expiry says reader `field`'s one
    /// hold is alive (Redisson's `suffixName(name, field:rwlock_timeout):1`;
    /// polylock keeps one hold per reader on the server). A Redisson
    /// reader's release recomputes the lock's expiry from these keys.
    pub fn read_timeout(&self, field: &str) -> Option<String> {
        self.timeout_base.as_ref().map(|base| format!("{base}:{field}:rwlock_timeout:1"))
    }

    /// Read-write locks: what every reader's timeout key starts with (the
    /// scripts name the keys of readers they grant by handoff).
    pub fn timeout_base(&self) -> Option<&str> {
        self.timeout_base.as_deref()
    }

    /// The lock hash (Redisson layout: the key is the name), field
    /// [`crate::holder_id`], value the hold count.
    pub fn lock(&self) -> &str {
        &self.lock
    }

    /// The fencing counter (it expires with the lease of the last grant).
    pub fn fence(&self) -> &str {
        &self.fence
    }

    /// The FIFO of waiters (member: `<field>|<claim id>|<lease ms>`, score: arrival time).
    pub fn queue(&self) -> &str {
        &self.queue
    }

    /// The liveness deadlines of the waiters (member as in the queue, score: deadline).
    pub fn queue_deadline(&self) -> &str {
        &self.queue_deadline
    }

    /// The channel Redisson waiters listen on; every release publishes `0`
    /// here. Redisson's naming, so its waiters hear us:
    /// `redisson_lock__channel:name` when the name holds a `{`, else
    /// `redisson_lock__channel:{name}`.
    pub fn channel(&self) -> &str {
        &self.channel
    }

    /// [`Self::channel`] as a shard channel (`SPUBLISH`), where Redisson's
    /// waiters on a Redis Cluster listen by default (its
    /// `shardedSubscriptionMode` AUTO: `SSUBSCRIBE` on Redis 7). `None` when
    /// the channel is not in the lock key's slot (`a{`, `a}`, `a{}b`): a
    /// script may only publish there on a channel of its keys' slot.
    pub fn shard_channel(&self) -> Option<&str> {
        (keyslot::key_slot(&self.channel) == keyslot::key_slot(&self.lock)).then_some(self.channel.as_str())
    }

    /// The channel one polylock waiter listens on (Redisson's fair-lock
    /// naming: the lock's channel, `:`, the waiter), named by its queue member.
    pub fn waiter_channel(&self, member: &str) -> String {
        format!("{}:{member}", self.channel)
    }
}

/// Redis Cluster: whether Redisson's own keys of a read-write lock or a
/// semaphore named `name` (a reader's `suffixName(name, ..)` timeout key,
/// the semaphore's `{name}:timeout`) hash to the lock key's slot, whatever
/// follows the name in them. They do for a name without braces (`{name}`
/// is the tag and the lock key hashes the whole name) and for a name with a
/// hash tag of its own (every key starts with the name, so the tag is
/// found in it first). They do not for a name with braces but no tag
/// (`a{`, `a}`, `a{}b`, `}{`): Redisson's keys then hash a text of their
/// own, or the name's part before its `}`, and a script naming them and
/// the lock fails with CROSSSLOT.
pub fn redisson_keys_share_the_slot(name: &LockName) -> bool {
    let name = name.as_str();
    !name.contains(['{', '}']) || keyslot::hash_tag(name).is_some()
}

/// Redis Cluster: refuses a read-write lock or a semaphore whose Redisson
/// keys would sit in another slot than the lock key (see
/// [`redisson_keys_share_the_slot`]), before anything reaches the server.
/// Placing them elsewhere is no way out: Redisson reads and writes those
/// exact keys (a Redisson reader's unlock judges our readers by their
/// timeout keys), and Redisson itself cannot use such a name on a cluster.
/// A mutex has no such key: every name is placed.
pub fn refuse_split_keys_on_a_cluster(name: &LockName, mode: LockMode) -> Result<(), Error> {
    let primitive = match mode {
        LockMode::Read | LockMode::Write => "read-write lock",
        LockMode::Semaphore => "semaphore",
        LockMode::Exclusive | LockMode::Leader => return Ok(()),
    };
    if redisson_keys_share_the_slot(name) {
        return Ok(());
    }
    Err(Error::InvalidName(format!(
        "on a Redis Cluster a {primitive} name with braces needs a non-empty hash tag ('{{tag}}'): the keys \
         Redisson keeps beside {:?} would be in another slot",
        name.as_str()
    )))
}

/// Redisson's `prefixName`: `prefix:name` when the name holds a `{`, else
/// `prefix:{name}`.
fn redisson_prefixed(prefix: &str, name: &str) -> String {
    if name.contains('{') {
        format!("{prefix}:{name}")
    } else {
        format!("{prefix}:{{{name}}}")
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
/// shares with us ([`RedisKeys::channel`]).
fn own_key_suffix(name: &str) -> String {
    if !name.contains('}') {
        return format!("{{{name}}}");
    }
    let tag = match keyslot::hash_tag(name) {
        Some(tag) => tag.to_owned(),
        None => keyslot::tag_for_slot(keyslot::key_slot(name)),
    };
    format!("{{{tag}}}:{name}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keyslot::key_slot;

    fn keys(name: &str) -> RedisKeys {
        RedisKeys::of(&LockName::new(name).unwrap())
    }

    #[test]
    fn plain_and_path_names() {
        let k = keys("orders/42");
        assert_eq!(k.lock(), "orders/42");
        assert_eq!(k.channel(), "redisson_lock__channel:{orders/42}");
        assert_eq!(keys("/locks/orders-42").fence(), "polylock_fence:{/locks/orders-42}");
    }

    /// Every polylock key of a lock hashes to the lock key's cluster slot,
    /// for names of every brace shape (the Redis Cluster support needs it).
    #[test]
    fn every_key_of_a_lock_is_in_the_lock_keys_slot() {
        for name in keyslot::brace_shaped_names() {
            let k = keys(&name);
            let slot = key_slot(k.lock());
            for key in [k.fence(), k.queue(), k.queue_deadline()] {
                assert_eq!(key_slot(key), slot, "{key:?} is not in the slot of {name:?}");
            }
        }
    }

    /// Issue 46, item 5: every key of every primitive (the mutex, both
    /// halves of a read-write lock with readers' timeout keys of several
    /// fields, the semaphore) hashes to the lock key's slot, or the name is
    /// refused on a cluster, with `InvalidName`, by the machine itself;
    /// off a cluster every name is taken (Redisson's keys are only split by
    /// slots on a cluster).
    #[test]
    fn every_key_of_every_primitive_is_in_the_slot_or_the_name_is_refused_on_a_cluster() {
        use crate::{Backend, LockConfig, LockMachine, Nonce};
        let mut cluster = LockConfig::new(Backend::Redis);
        cluster.cluster = true;
        let mut refused = 0;
        for name in keyslot::brace_shaped_names() {
            let n = LockName::new(&name).unwrap();
            let slot = key_slot(&name);
            for mode in [LockMode::Exclusive, LockMode::Read, LockMode::Write, LockMode::Semaphore, LockMode::Leader] {
                let k = match mode {
                    LockMode::Exclusive | LockMode::Leader => RedisKeys::of(&n),
                    LockMode::Read | LockMode::Write => RedisKeys::of_read_write(&n),
                    LockMode::Semaphore => RedisKeys::of_semaphore(&n),
                };
                let mut all = vec![k.lock().to_owned(), k.fence().into(), k.queue().into(), k.queue_deadline().into()];
                for field in ["0c0c0c0c-0000-4000-8000-000000000000:1", "x:2", "reader"] {
                    all.extend(k.read_timeout(field));
                }
                all.extend(k.permit_timeouts().map(str::to_owned));
                all.extend(k.permit_total().map(str::to_owned));
                let split: Vec<&String> = all.iter().filter(|key| key_slot(key) != slot).collect();
                let on_cluster = LockMachine::with_mode(cluster.clone(), n.clone(), mode, Nonce(1));
                match on_cluster {
                    Ok(_) => assert!(split.is_empty(), "{name:?} {mode:?}: {split:?} not in the slot of the name"),
                    Err(Error::InvalidName(why)) => {
                        assert!(!split.is_empty(), "{name:?} {mode:?} refused, yet every key is in its slot: {why}");
                        refused += 1;
                    }
                    Err(e) => panic!("{name:?} {mode:?}: {e:?}"),
                }
                let single = LockMachine::with_mode(LockConfig::new(Backend::Redis), n.clone(), mode, Nonce(1));
                assert!(single.is_ok(), "{name:?} {mode:?} refused off a cluster: {single:?}");
            }
        }
        assert!(refused > 0);
    }

    /// Two names never share a key: a shared queue would let one lock's
    /// waiters block the other's.
    #[test]
    fn different_names_have_different_keys() {
        let mut seen = std::collections::HashMap::new();
        for name in keyslot::brace_shaped_names() {
            let k = keys(&name);
            for key in [k.fence(), k.queue(), k.queue_deadline()] {
                if let Some(other) = seen.insert(key.to_owned(), name.clone()) {
                    panic!("{name:?} and {other:?} share {key:?}");
                }
            }
        }
    }

    /// Redisson's `RPermitExpirableSemaphore` names, and polylock's keys of
    /// a semaphore in its slot, apart from the mutex's queue.
    #[test]
    fn semaphore_keys_are_redissons_and_ours_in_its_slot() {
        let k = RedisKeys::of_semaphore(&LockName::new("exports").unwrap());
        assert_eq!(k.lock(), "exports");
        assert_eq!(k.permit_timeouts(), Some("{exports}:timeout"));
        assert_eq!(k.channel(), "redisson_sc:{exports}");
        assert_eq!(k.permit_total(), Some("polylock_permits:{exports}"));
        assert_ne!(k.queue(), keys("exports").queue());
        let slot = key_slot(k.lock());
        for key in [k.fence(), k.queue(), k.queue_deadline(), k.permit_total().unwrap(), k.permit_timeouts().unwrap()] {
            assert_eq!(key_slot(key), slot, "{key}");
        }
        let braced = RedisKeys::of_semaphore(&LockName::new("jobs{7}").unwrap());
        assert_eq!(braced.permit_timeouts(), Some("jobs{7}:timeout"));
    }

    /// Redisson's `prefixName`: `prefix:name` when the name holds a `{`,
    /// else `prefix:{name}`; its waiters listen there.
    #[test]
    fn the_release_channel_is_redissons() {
        assert_eq!(keys("orders/42").channel(), "redisson_lock__channel:{orders/42}");
        assert_eq!(keys("orders{42}").channel(), "redisson_lock__channel:orders{42}");
        assert_eq!(keys("a{").channel(), "redisson_lock__channel:a{");
        assert_eq!(keys("a}").channel(), "redisson_lock__channel:{a}}");
    }

    /// The shard channel is Redisson's channel whenever that is in the lock
    /// key's slot (every name without braces, every name with a hash tag),
    /// and absent otherwise: a script publishing there would be refused.
    #[test]
    fn the_shard_channel_is_redissons_when_in_the_lock_keys_slot() {
        assert_eq!(keys("orders/42").shard_channel(), Some("redisson_lock__channel:{orders/42}"));
        assert_eq!(keys("orders{42}").shard_channel(), Some("redisson_lock__channel:orders{42}"));
        for name in ["a{", "a}", "a{}b"] {
            assert_eq!(keys(name).shard_channel(), None, "{name}");
        }
        for name in keyslot::brace_shaped_names() {
            let k = keys(&name);
            match k.shard_channel() {
                Some(channel) => assert_eq!(key_slot(channel), key_slot(k.lock()), "{name:?}"),
                None => assert_ne!(key_slot(k.channel()), key_slot(k.lock()), "{name:?}"),
            }
        }
    }
}
