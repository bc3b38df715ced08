//! A sans-IO model of the Redis server, for the simulation only: keys with
//! TTLs, the effects of polylock's three scripts, pub/sub, and the faults
//! that lose or roll back data (eviction, restore from a snapshot). Each script
//! is re-stated here in Rust, line for line with the Lua in `src/redis.rs`;
//! the runtime's integration tests run the real Lua against a real server.

use std::collections::{BTreeMap, HashMap};

use polylock_core::{RedisValue, Reply};

#[derive(Debug, Clone, PartialEq)]
enum Value {
    Hash(BTreeMap<String, i64>),
    Counter(i64),
    ZSet(BTreeMap<String, f64>),
}

#[derive(Debug, Default)]
pub struct RedisModel {
    keys: HashMap<String, (Value, Option<u64>)>,
    /// channel -> subscribed clients
    pub subs: HashMap<String, Vec<usize>>,
    /// (time, client field, token, lock key) for every grant the server made.
    pub grants: Vec<(u64, String, u64, String)>,
    pub acquire_calls: u64,
    /// Publishes to polylock waiter channels (wake-ups sent).
    pub wakeups_sent: u64,
    pub releases: u64,
    /// The last value the server's clock gave, in microseconds.
    last_us: i64,
    /// The script cache: the scripts an `EVAL` has loaded, by name. Empty
    /// at the start and after a restore (a restart or a failover loses it).
    scripts: std::collections::HashSet<String>,
    /// `EVALSHA`s refused `NOSCRIPT` (the script did not run).
    pub noscripts: u64,
    /// Semaphores: grants made by handing freed permits to a queued waiter.
    pub sem_handoffs: u64,
    /// Semaphores: after a script, the free and held permits did not add up
    /// to the recorded number (what each script keeps, unless state is lost).
    pub sem_breaks: Vec<String>,
}

/// The key space at one moment.
#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot(HashMap<String, (Value, Option<u64>)>);

pub struct Effects {
    pub reply: Reply,
    /// (channel, payload) to publish after the reply
    pub publish: Vec<(String, String)>,
}

impl RedisModel {
    fn live(&mut self, now: u64, key: &str) -> Option<&mut Value> {
        if let Some((_, Some(exp))) = self.keys.get(key) {
            if *exp <= now {
                self.keys.remove(key);
            }
        }
        self.keys.get_mut(key).map(|(v, _)| v)
    }

    fn exists(&mut self, now: u64, key: &str) -> bool {
        self.live(now, key).is_some()
    }

    fn pexpire(&mut self, now: u64, key: &str, ms: u64) {
        if let Some(e) = self.keys.get_mut(key) {
            e.1 = Some(now + ms);
        }
    }

    fn pttl(&mut self, now: u64, key: &str) -> i64 {
        if !self.exists(now, key) {
            return -2;
        }
        match self.keys.get(key) {
            Some((_, Some(exp))) => (*exp - now) as i64,
            _ => -1,
        }
    }

    fn hexists(&mut self, now: u64, key: &str, field: &str) -> bool {
        matches!(self.live(now, key), Some(Value::Hash(h)) if h.contains_key(field))
    }

    /// HDEL of one field: whether it was there; an emptied hash is deleted.
    fn hdel(&mut self, now: u64, key: &str, field: &str) -> bool {
        let Some(Value::Hash(h)) = self.live(now, key) else { return false };
        let had = h.remove(field).is_some();
        if h.is_empty() {
            self.keys.remove(key);
        }
        had
    }

    /// The holder field of a lock key (for oracles).
    pub fn holder(&mut self, now: u64, key: &str) -> Option<String> {
        match self.live(now, key) {
            Some(Value::Hash(h)) => h.keys().next().cloned(),
            _ => None,
        }
    }

    pub fn key_count(&mut self, now: u64) -> usize {
        let keys: Vec<String> = self.keys.keys().cloned().collect();
        keys.iter().filter(|k| self.exists(now, k)).count()
    }

    pub fn has_key(&mut self, now: u64, key: &str) -> bool {
        self.exists(now, key)
    }

    fn zset(&mut self, now: u64, key: &str) -> Option<&mut BTreeMap<String, f64>> {
        match self.live(now, key) {
            Some(Value::ZSet(z)) => Some(z),
            _ => None,
        }
    }

    fn zrem(&mut self, now: u64, key: &str, member: &str) {
        if let Some(z) = self.zset(now, key) {
            z.remove(member);
            if z.is_empty() {
                self.keys.remove(key);
            }
        }
    }

    fn zadd(&mut self, now: u64, key: &str, member: &str, score: f64, nx: bool) {
        if self.zset(now, key).is_none() {
            self.keys.insert(key.to_owned(), (Value::ZSet(BTreeMap::new()), None));
        }
        let z = self.zset(now, key).expect("just made");
        if nx && z.contains_key(member) {
            return;
        }
        z.insert(member.to_owned(), score);
    }

    /// ZRANGE 0 0: lowest score, ties by member.
    fn zfirst(&mut self, now: u64, key: &str) -> Option<String> {
        let z = self.zset(now, key)?;
        z.iter().min_by(|a, b| a.1.partial_cmp(b.1).unwrap().then_with(|| a.0.cmp(b.0))).map(|(m, _)| m.clone())
    }

    fn first_waiter(&mut self, now: u64, qk: &str, dk: &str, pruned: &mut bool) -> Option<String> {
        loop {
            let h = self.zfirst(now, qk)?;
            let d = self.zset(now, dk).and_then(|z| z.get(&h).copied());
            if d.is_some_and(|d| d > now as f64) {
                return Some(h);
            }
            self.zrem(now, qk, &h);
            self.zrem(now, dk, &h);
            *pruned = true;
        }
    }

    /// Runs a script sent by SHA1 (`by_sha`) or with its source, as Redis
    /// does: by SHA1, only if an earlier `EVAL` loaded it since the start
    /// or the last restore; else refused `NOSCRIPT`, having run nothing.
    pub fn eval_op(&mut self, now: u64, script: &str, by_sha: bool, keys: &[String], args: &[String]) -> Effects {
        if by_sha && !self.scripts.contains(script) {
            self.noscripts += 1;
            let reply = Reply::Refused("NOSCRIPT No matching script. Please use EVAL.".into());
            return Effects { reply, publish: Vec::new() };
        }
        self.scripts.insert(script.to_owned());
        self.eval(now, script, keys, args)
    }

    pub fn eval(&mut self, now: u64, script: &str, keys: &[String], args: &[String]) -> Effects {
        let mut publish = Vec::new();
        let reply = match script {
            "polylock_acquire" => self.acquire(now, keys, args, &mut publish),
            "polylock_leave" => self.leave(now, keys, args, &mut publish),
            "polylock_rw_acquire" => self.rw_acquire(now, keys, args),
            "polylock_rw_leave" => self.rw_leave(now, keys, args, &mut publish),
            "polylock_rw_renew" => self.rw_renew(now, keys, args),
            "polylock_sem_acquire" => {
                let r = self.sem_acquire(now, keys, args, &mut publish);
                self.sem_check(now, keys, script);
                r
            }
            "polylock_sem_leave" => {
                let r = self.sem_leave(now, keys, args, &mut publish);
                self.sem_check(now, keys, script);
                r
            }
            "polylock_sem_renew" => self.sem_renew(now, keys, args),
            "polylock_renew" => {
                let lease: u64 = args[1].parse().unwrap();
                if self.hexists(now, &keys[0], &args[0]) {
                    self.pexpire(now, &keys[0], lease);
                    // PEXPIRE of an expired (gone) counter does nothing.
                    if self.exists(now, &keys[1]) {
                        self.pexpire(now, &keys[1], lease);
                    }
                    RedisValue::Int(1)
                } else {
                    RedisValue::Int(0)
                }
            }
            other => panic!("unknown script {other}"),
        };
        Effects { reply: Reply::Redis(reply), publish }
    }

    fn acquire(&mut self, now: u64, k: &[String], a: &[String], publish: &mut Vec<(String, String)>) -> RedisValue {
        self.acquire_calls += 1;
        let (lock, fence, q, d) = (&k[0], &k[1], &k[2], &k[3]);
        let (field, lease, wait, wttl, prefix, member) =
            (&a[0], a[1].parse::<u64>().unwrap(), a[2].as_str(), a[3].parse::<u64>().unwrap(), &a[4], &a[5]);
        let now_us = self.time_us(now);
        if self.hexists(now, lock, field) {
            // A retried grant: granted again, with a new token.
            return self.grant(now, now_us, lock, fence, field, lease);
        }
        let mut pruned = false;
        let first = self.first_waiter(now, q, d, &mut pruned);
        // Free, and nobody or we first in line.
        if !self.exists(now, lock) && (first.is_none() || first.as_deref() == Some(member.as_str())) {
            if first.is_some() {
                self.zrem(now, q, member);
                self.zrem(now, d, member);
            }
            return self.grant(now, now_us, lock, fence, field, lease);
        }
        if let Some(next) = first.as_ref().filter(|f| pruned && *f != member) {
            publish.push((format!("{prefix}:{next}"), "0".into()));
            self.wakeups_sent += 1;
        }
        let head = first.is_none() || first.as_deref() == Some(member.as_str());
        // "2": a recheck right after queueing leaves a live place as it is.
        let upkeep = match wait {
            "1" => true,
            // First in line is alive by first_waiter's check.
            "2" if first.as_deref() == Some(member.as_str()) => false,
            "2" => {
                self.zset(now, d).and_then(|z| z.get(member.as_str()).copied()).is_none_or(|until| until <= now as f64)
            }
            _ => false,
        };
        if upkeep {
            // now_us: the model's clock has ms resolution; a per-call counter breaks ties in arrival order.
            let arrival = now as f64 * 1000.0 + (self.acquire_calls % 1000) as f64;
            self.zadd(now, q, member, arrival, true);
            self.zadd(now, d, member, (now + wttl) as f64, false);
            // The queue lives as long as its longest-lived member.
            for key in [q, d] {
                if first.is_none() || self.pttl(now, key) < wttl as i64 {
                    self.pexpire(now, key, wttl);
                }
            }
        }
        RedisValue::Array(vec![RedisValue::Int(0), RedisValue::Int(self.pttl(now, lock)), RedisValue::Int(head as i64)])
    }

    /// ACQUIRE's `grant`: the field holds the lock for `lease`, with the next token.
    fn grant(&mut self, now: u64, now_us: i64, lock: &str, fence: &str, field: &str, lease: u64) -> RedisValue {
        let token = self.next_token(now, now_us, fence, lease);
        let mut h = BTreeMap::new();
        h.insert(field.to_owned(), 1);
        self.keys.insert(lock.to_owned(), (Value::Hash(h), Some(now + lease)));
        self.grants.push((now, field.to_owned(), token as u64, lock.to_owned()));
        // The mutex scripts answer with the token as a decimal string.
        RedisValue::Array(vec![RedisValue::Int(1), RedisValue::Bulk(token.to_string().into_bytes())])
    }

    fn leave(&mut self, now: u64, k: &[String], a: &[String], publish: &mut Vec<(String, String)>) -> RedisValue {
        let (lock, q, d, fence) = (&k[0], &k[1], &k[2], &k[3]);
        let (field, channel, prefix, member) = (&a[0], &a[1], &a[2], &a[3]);
        let now_us = self.time_us(now);
        let mut pruned = false;
        // HDEL: our field is the hash's only one while we hold the lock, so
        // deleting it deletes the lock.
        let held = self.hdel(now, lock, field);
        let was_first = !held && self.first_waiter(now, q, d, &mut pruned).as_deref() == Some(member.as_str());
        if !held {
            // A holder is never queued: LEAVE drops only a waiter's member.
            self.zrem(now, q, member);
            self.zrem(now, d, member);
        }
        if held {
            self.releases += 1;
        }
        let mut handed = false;
        if (held || was_first || pruned) && !self.exists(now, lock) {
            if let Some(first) = self.first_waiter(now, q, d, &mut pruned) {
                // Direct handoff: granted for the lease the member carries
                // (`<field>|<claim id>|<lease ms>`), else until its queue deadline.
                let parts: Vec<&str> = first.split('|').collect();
                let (first_field, lease) = match parts.as_slice() {
                    [f, _, l] if l.parse::<u64>().is_ok() => (f.to_string(), l.parse::<u64>().unwrap()),
                    _ => {
                        let until = self.zset(now, d).and_then(|z| z.get(&first).copied()).unwrap() as u64;
                        (
                            first.rsplit_once('|').map_or(first.as_str(), |(f, _)| f).to_owned(),
                            until.saturating_sub(now).max(1),
                        )
                    }
                };
                self.zrem(now, q, &first);
                self.zrem(now, d, &first);
                let mut h = BTreeMap::new();
                h.insert(first_field.clone(), 1);
                self.keys.insert(lock.clone(), (Value::Hash(h), Some(now + lease)));
                let token = self.next_token(now, now_us, fence, lease);
                self.grants.push((now, first_field, token as u64, lock.clone()));
                publish.push((format!("{prefix}:{first}"), token.to_string()));
                self.wakeups_sent += 1;
                handed = true;
            }
        }
        if (was_first || pruned) && !handed && self.exists(now, lock) {
            // Someone else holds it: the new first in line is told so.
            if let Some(next) = self.first_waiter(now, q, d, &mut pruned) {
                publish.push((format!("{prefix}:{next}"), "0".into()));
                self.wakeups_sent += 1;
            }
        }
        if held && !handed {
            publish.push((channel.clone(), "0".into()));
            if let Some(shard) = a.get(4).filter(|c| !c.is_empty()) {
                // SPUBLISH: a shard channel, which no SUBSCRIBE hears.
                publish.push((format!("shard:{shard}"), "0".into()));
            }
        }
        RedisValue::Int(held as i64)
    }

    // ---- the read-write lock's scripts (rw_scripts.rs), line for line --
    // The hash's `mode` field is stored as 1 (`read`) or 2 (`write`).

    fn rw_mode(&mut self, now: u64, lock: &str) -> Option<i64> {
        match self.live(now, lock) {
            Some(Value::Hash(h)) => h.get("mode").copied(),
            _ => None,
        }
    }

    /// `live_queue`: the live members in order, dead ones dropped.
    fn rw_live_queue(&mut self, now: u64, q: &str, d: &str) -> Vec<String> {
        let mut members: Vec<(String, f64)> = match self.zset(now, q) {
            Some(z) => z.iter().map(|(m, s)| (m.clone(), *s)).collect(),
            None => Vec::new(),
        };
        members.sort_by(|a, b| a.1.partial_cmp(&b.1).unwrap().then_with(|| a.0.cmp(&b.0)));
        let mut live = Vec::new();
        for (m, _) in members {
            let deadline = self.zset(now, d).and_then(|z| z.get(&m).copied());
            if deadline.is_some_and(|t| t > now as f64) {
                live.push(m);
            } else {
                self.zrem(now, q, &m);
                self.zrem(now, d, &m);
            }
        }
        live
    }

    /// `hold`: `field` holds in `mode` (1 read, 2 write) for `lease`, with the next token.
    #[allow(clippy::too_many_arguments)]
    fn rw_hold(
        &mut self,
        now: u64,
        now_us: i64,
        k: &[String],
        mode: i64,
        field: &str,
        lease: u64,
        timeout: &str,
    ) -> i64 {
        let lock = &k[0];
        if !self.exists(now, lock) {
            self.keys.insert(lock.clone(), (Value::Hash(BTreeMap::new()), None));
        }
        let Some(Value::Hash(h)) = self.live(now, lock) else { panic!("{lock} is not a hash") };
        if h.get("mode") != Some(&2) {
            h.insert("mode".into(), mode);
        }
        h.insert(field.to_owned(), 1);
        if mode == 1 {
            self.keys.insert(timeout.to_owned(), (Value::Counter(1), Some(now + lease)));
        }
        if self.pttl(now, lock) < lease as i64 {
            self.pexpire(now, lock, lease);
        }
        // token_for: the fence keeps the longer of its TTL and this lease.
        let keep = self.pttl(now, &k[1]).max(lease as i64) as u64;
        let token = self.next_token(now, now_us, &k[1], keep);
        let owner = field.strip_suffix(":write").unwrap_or(field);
        self.grants.push((now, owner.to_owned(), token as u64, lock.clone()));
        token
    }

    fn rw_acquire(&mut self, now: u64, k: &[String], a: &[String]) -> RedisValue {
        self.acquire_calls += 1;
        let (lock, q, d, timeout) = (&k[0], &k[2], &k[3], &k[4]);
        let (field, lease, wait, wttl, member) =
            (&a[0], a[1].parse::<u64>().unwrap(), a[2].as_str(), a[3].parse::<u64>().unwrap(), &a[5]);
        let reading = a[6] == "read";
        let mode_arg = if reading { 1 } else { 2 };
        let now_us = self.time_us(now);
        let granted =
            |token: i64| RedisValue::Array(vec![RedisValue::Int(1), RedisValue::Bulk(token.to_string().into_bytes())]);
        if self.hexists(now, lock, field) {
            return granted(self.rw_hold(now, now_us, k, mode_arg, field, lease, timeout));
        }
        let mode = self.rw_mode(now, lock);
        if reading && mode == Some(2) && self.hexists(now, lock, &a[7]) {
            return granted(self.rw_hold(now, now_us, k, 1, field, lease, timeout));
        }
        let live = self.rw_live_queue(now, q, d);
        let ahead = live.iter().position(|m| m == member).unwrap_or(live.len());
        let blocked = live[..ahead].iter().any(|m| !reading || m.starts_with("w|"));
        let free = !self.exists(now, lock) || (reading && mode == Some(1));
        if free && !blocked {
            self.zrem(now, q, member);
            self.zrem(now, d, member);
            return granted(self.rw_hold(now, now_us, k, mode_arg, field, lease, timeout));
        }
        if wait == "0" {
            return RedisValue::Array(vec![
                RedisValue::Int(0),
                RedisValue::Int(self.pttl(now, lock)),
                RedisValue::Int(0),
            ]);
        }
        let upkeep = match wait {
            "1" => true,
            _ => self.zset(now, d).and_then(|z| z.get(member.as_str()).copied()).is_none_or(|t| t <= now as f64),
        };
        if upkeep {
            let arrival = now as f64 * 1000.0 + (self.acquire_calls % 1000) as f64;
            self.zadd(now, q, member, arrival, true);
            self.zadd(now, d, member, (now + wttl) as f64, false);
            for key in [q, d] {
                if self.pttl(now, key) < wttl as i64 {
                    self.pexpire(now, key, wttl);
                }
            }
        }
        let head = !blocked;
        RedisValue::Array(vec![RedisValue::Int(0), RedisValue::Int(self.pttl(now, lock)), RedisValue::Int(head as i64)])
    }

    fn rw_leave(&mut self, now: u64, k: &[String], a: &[String], publish: &mut Vec<(String, String)>) -> RedisValue {
        let (lock, q, d, timeout) = (&k[0], &k[2], &k[3], &k[4]);
        let (field, channel, prefix, member, base) = (&a[0], &a[1], &a[2], &a[3], &a[6]);
        let reading = a[5] == "read";
        let now_us = self.time_us(now);
        let held = self.hexists(now, lock, field);
        if reading {
            self.keys.remove(timeout);
        }
        if held {
            let Some(Value::Hash(h)) = self.live(now, lock) else { unreachable!() };
            h.remove(field.as_str());
        }
        // Readers none of whose timeout keys is alive go (a mode'd hash only).
        let mut pruned = false;
        let (mut writers, mut others) = (0, 0);
        if self.rw_mode(now, lock).is_some() {
            let Some(Value::Hash(h)) = self.live(now, lock) else { unreachable!() };
            let fields: Vec<(String, i64)> =
                h.iter().filter(|(f, _)| *f != "mode").map(|(f, n)| (f.clone(), *n)).collect();
            for (f, n) in fields {
                let writer = f.ends_with(":write");
                let alive =
                    writer || (1..=n.max(1)).any(|i| self.exists(now, &format!("{base}:{f}:rwlock_timeout:{i}")));
                writers += writer as usize;
                if alive {
                    others += 1;
                } else {
                    let Some(Value::Hash(h)) = self.live(now, lock) else { unreachable!() };
                    h.remove(&f);
                    pruned = true;
                }
            }
        }
        if held || pruned {
            if others == 0 {
                self.keys.remove(lock);
                self.releases += 1;
            } else if writers == 0 {
                let Some(Value::Hash(h)) = self.live(now, lock) else { unreachable!() };
                h.insert("mode".into(), 1);
            }
        }
        self.zrem(now, q, member);
        self.zrem(now, d, member);
        let free = !self.exists(now, lock);
        let read_mode = self.rw_mode(now, lock) == Some(1);
        let mut handed = false;
        if free || read_mode {
            for (i, m) in self.rw_live_queue(now, q, d).into_iter().enumerate() {
                let parts: Vec<&str> = m.split('|').collect();
                let [kind, f, _, l] = parts.as_slice() else { break };
                let (f, lease) = (f.to_string(), l.parse::<u64>().unwrap());
                if *kind == "w" {
                    if i > 0 || !free {
                        break;
                    }
                    let token = self.rw_hold(now, now_us, k, 2, &f, lease, "");
                    self.zrem(now, q, &m);
                    self.zrem(now, d, &m);
                    publish.push((format!("{prefix}:{m}"), token.to_string()));
                    self.wakeups_sent += 1;
                    handed = true;
                    break;
                }
                let token = self.rw_hold(now, now_us, k, 1, &f, lease, &format!("{base}:{f}:rwlock_timeout:1"));
                self.zrem(now, q, &m);
                self.zrem(now, d, &m);
                publish.push((format!("{prefix}:{m}"), token.to_string()));
                self.wakeups_sent += 1;
                handed = true;
            }
        }
        if (held || pruned) && !handed && !self.exists(now, lock) {
            let message = if reading { "0" } else { "1" };
            publish.push((channel.clone(), message.into()));
            if let Some(shard) = a.get(4).filter(|c| !c.is_empty()) {
                publish.push((format!("shard:{shard}"), message.into()));
            }
        }
        RedisValue::Int(held as i64)
    }

    fn rw_renew(&mut self, now: u64, k: &[String], a: &[String]) -> RedisValue {
        let lease: u64 = a[1].parse().unwrap();
        if !self.hexists(now, &k[0], &a[0]) {
            return RedisValue::Int(0);
        }
        let mut left = -1;
        if a[2] == "read" {
            let mine = self.pttl(now, &k[1]);
            if mine == -2 {
                self.keys.insert(k[1].clone(), (Value::Counter(1), Some(now + lease)));
                if self.pttl(now, &k[0]) < lease as i64 {
                    self.pexpire(now, &k[0], lease);
                }
                return RedisValue::Int(0);
            }
            let Some(Value::Hash(h)) = self.live(now, &k[0]) else { unreachable!() };
            let readers: Vec<(String, i64)> = h
                .iter()
                .filter(|(f, _)| *f != "mode" && **f != a[0] && !f.ends_with(":write"))
                .map(|(f, n)| (f.clone(), *n))
                .collect();
            let base = &a[3];
            let other = readers
                .iter()
                .any(|(f, n)| (1..=(*n).max(1)).any(|i| self.exists(now, &format!("{base}:{f}:rwlock_timeout:{i}"))));
            if other {
                left = self.pttl(now, &k[0]);
                if left < 0 || (mine >= 0 && mine < left) {
                    left = mine;
                }
            }
            self.pexpire(now, &k[1], lease);
        }
        if self.pttl(now, &k[0]) < lease as i64 {
            self.pexpire(now, &k[0], lease);
        }
        RedisValue::Array(vec![RedisValue::Int(1), RedisValue::Int(left)])
    }

    // ---- Redisson's RReadWriteLock read half (RedissonReadLock), line for
    // line with its Lua: what an outside reader does beside ours. `base` is
    // `{name}`, a reader's timeout keys `{name}:<field>:rwlock_timeout:<n>`.

    /// `tryLockInnerAsync` of a reader (no writer of its own): granted
    /// (`true`) in a free or read-mode lock.
    pub fn redisson_read_lock(&mut self, now: u64, lock: &str, base: &str, field: &str, watchdog: u64) -> bool {
        let mode = self.rw_mode(now, lock);
        if mode == Some(2) {
            return false;
        }
        if mode.is_none() {
            let mut h = BTreeMap::new();
            h.insert("mode".to_owned(), 1);
            self.keys.insert(lock.to_owned(), (Value::Hash(h), None));
        }
        let Some(Value::Hash(h)) = self.live(now, lock) else { unreachable!() };
        let n = h.get(field).copied().unwrap_or(0) + 1;
        h.insert(field.to_owned(), n);
        self.keys.insert(format!("{base}:{field}:rwlock_timeout:{n}"), (Value::Counter(1), Some(now + watchdog)));
        let keep = self.pttl(now, lock).max(watchdog as i64) as u64;
        self.pexpire(now, lock, keep);
        true
    }

    /// `renewExpirationAsync`, the watchdog: while `field` holds, the hash
    /// and every reader's timeout key get `watchdog` ms, ours included.
    pub fn redisson_read_renew(&mut self, now: u64, lock: &str, base: &str, field: &str, watchdog: u64) -> bool {
        if !self.hexists(now, lock, field) {
            return false;
        }
        self.pexpire(now, lock, watchdog);
        let Some(Value::Hash(h)) = self.live(now, lock) else { unreachable!() };
        if h.len() > 1 {
            let readers: Vec<(String, i64)> =
                h.iter().filter(|(f, _)| *f != "mode").map(|(f, n)| (f.clone(), *n)).collect();
            for (f, n) in readers {
                for i in 1..=n {
                    self.pexpire(now, &format!("{base}:{f}:rwlock_timeout:{i}"), watchdog);
                }
            }
        }
        true
    }

    /// `unlockInnerAsync` of a reader: its hold ends; the hash then lives
    /// as long as the longest-lived timeout key, or goes (and Redisson's
    /// channel hears `0`) when none is alive. Returns the publish.
    pub fn redisson_read_unlock(&mut self, now: u64, lock: &str, base: &str, field: &str) -> Option<String> {
        let mode = self.rw_mode(now, lock)?;
        if !self.hexists(now, lock, field) {
            return None;
        }
        let Some(Value::Hash(h)) = self.live(now, lock) else { unreachable!() };
        let n = h[field] - 1;
        if n == 0 {
            h.remove(field);
        } else {
            h.insert(field.to_owned(), n);
        }
        self.keys.remove(&format!("{base}:{field}:rwlock_timeout:{}", n + 1));
        let Some(Value::Hash(h)) = self.live(now, lock) else { unreachable!() };
        if h.len() > 1 {
            let readers: Vec<(String, i64)> =
                h.iter().filter(|(f, _)| *f != "mode").map(|(f, n)| (f.clone(), *n)).collect();
            let mut max = -3;
            for (f, n) in readers {
                for i in 1..=n {
                    max = max.max(self.pttl(now, &format!("{base}:{f}:rwlock_timeout:{i}")));
                }
            }
            if max > 0 {
                self.pexpire(now, lock, max as u64);
                return None;
            }
            if mode == 2 {
                return None;
            }
        }
        self.keys.remove(lock);
        Some("0".to_owned())
    }

    /// Whether `field` holds the lock hash `key` (for oracles).
    pub fn holds(&mut self, now: u64, key: &str, field: &str) -> bool {
        self.hexists(now, key, field)
    }

    // ---- the semaphore's scripts (sem_scripts.rs), line for line -------
    // KEYS: counter, fence, queue, queue deadlines, permit expiries (and
    // ACQUIRE's recorded number of permits). The counter and the recorded
    // number are strings in Redis, counters here.

    fn get_int(&mut self, now: u64, key: &str) -> Option<i64> {
        match self.live(now, key) {
            Some(Value::Counter(c)) => Some(*c),
            _ => None,
        }
    }

    /// SET without options: the value, and no TTL.
    fn set_int(&mut self, key: &str, v: i64) {
        self.keys.insert(key.to_owned(), (Value::Counter(v), None));
    }

    /// INCRBY (DECRBY with `-n`): a missing key counts as 0; the TTL stays.
    fn incrby(&mut self, now: u64, key: &str, n: i64) {
        match self.live(now, key) {
            Some(Value::Counter(c)) => *c += n,
            Some(other) => panic!("INCRBY on {key}: {other:?}"),
            None => self.set_int(key, n),
        }
    }

    fn zscore(&mut self, now: u64, key: &str, member: &str) -> Option<f64> {
        self.zset(now, key).and_then(|z| z.get(member).copied())
    }

    fn zcard(&mut self, now: u64, key: &str) -> i64 {
        self.zset(now, key).map_or(0, |z| z.len() as i64)
    }

    /// ZREM of one member: how many it removed.
    fn zrem_count(&mut self, now: u64, key: &str, member: &str) -> i64 {
        let had = self.zscore(now, key, member).is_some();
        self.zrem(now, key, member);
        had as i64
    }

    /// ZADD XX: updates a member's score, adds nothing.
    fn zadd_xx(&mut self, now: u64, key: &str, member: &str, score: f64) {
        if let Some(s) = self.zset(now, key).and_then(|z| z.get_mut(member)) {
            *s = score;
        }
    }

    /// The prelude's reclaim: the permits whose expiry is in 0..=now
    /// (ZRANGEBYSCORE's bounds are inclusive) go back to the counter.
    /// Returns `#expired`.
    pub fn sem_reclaim(&mut self, now: u64, counter: &str, expiries: &str) -> i64 {
        let expired: Vec<String> = match self.zset(now, expiries) {
            Some(z) => z.iter().filter(|(_, s)| **s >= 0.0 && **s <= now as f64).map(|(m, _)| m.clone()).collect(),
            None => Vec::new(),
        };
        if !expired.is_empty() {
            for m in &expired {
                self.zrem(now, expiries, m);
            }
            self.sem_give_back(now, counter, expired.len() as i64);
        }
        expired.len() as i64
    }

    /// `give_back`: INCRBY only on a counter that exists (a missing one is
    /// rebuilt by the next acquire from the permits still held).
    fn sem_give_back(&mut self, now: u64, counter: &str, n: i64) {
        if n > 0 && self.exists(now, counter) {
            self.incrby(now, counter, n);
        }
    }

    /// `available()`: GET of the counter, 0 when missing.
    fn sem_available(&mut self, now: u64, counter: &str) -> i64 {
        self.get_int(now, counter).unwrap_or(0)
    }

    /// `token_for`: the next token; the fence keeps the longer of its TTL and the lease.
    fn sem_token_for(&mut self, now: u64, now_us: i64, fence: &str, lease: u64) -> i64 {
        let px = self.pttl(now, fence).max(lease as i64) as u64;
        self.next_token(now, now_us, fence, px)
    }

    /// `take`: `k` permits for `holder` until now + lease, with the next token.
    fn sem_take(&mut self, now: u64, now_us: i64, k: &[String], holder: &str, n: i64, lease: u64) -> i64 {
        self.incrby(now, &k[0], -n);
        let expiry = (now + lease) as f64;
        for i in 1..=n {
            self.zadd(now, &k[4], &format!("{holder}:{i}"), expiry, false);
        }
        let token = self.sem_token_for(now, now_us, &k[1], lease);
        self.grants.push((now, holder.to_owned(), token as u64, k[0].clone()));
        token
    }

    /// `string.match(m, '^p(%d+)|(.*)|[^|]*|(%d+)$')`: (k, holder, lease).
    /// `.*` is greedy, so the holder runs to the member's last pipe but one.
    fn sem_member(m: &str) -> Option<(i64, String, u64)> {
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        let (k, rest) = m.strip_prefix('p')?.split_once('|')?;
        let (rest, lease) = rest.rsplit_once('|')?;
        let (holder, _claim) = rest.rsplit_once('|')?;
        (digits(k) && digits(lease)).then(|| (k.parse().unwrap(), holder.to_owned(), lease.parse().unwrap()))
    }

    /// `hand_on`: grants the waiters at the queue's front while the first
    /// one's ask fits, dropping dead ones on the way; stops at the first
    /// live waiter that does not fit. Returns the token granted to `me`.
    fn sem_hand_on(
        &mut self,
        now: u64,
        now_us: i64,
        k: &[String],
        prefix: &str,
        me: Option<&str>,
        publish: &mut Vec<(String, String)>,
    ) -> Option<i64> {
        let mut mine = None;
        loop {
            let Some(m) = self.zfirst(now, &k[2]) else { return mine };
            let deadline = self.zscore(now, &k[3], &m);
            if deadline.is_some_and(|d| d > now as f64) {
                let available = self.sem_available(now, &k[0]);
                let Some((n, holder, lease)) = Self::sem_member(&m).filter(|(n, _, _)| *n <= available) else {
                    return mine;
                };
                let token = self.sem_take(now, now_us, k, &holder, n, lease);
                if me == Some(m.as_str()) {
                    mine = Some(token);
                } else {
                    publish.push((format!("{prefix}:{m}"), token.to_string()));
                    self.wakeups_sent += 1;
                    self.sem_handoffs += 1;
                }
            }
            self.zrem(now, &k[2], &m);
            self.zrem(now, &k[3], &m);
        }
    }

    /// ZRANK: the member's place in score order (ties by member), if there.
    fn zrank(&mut self, now: u64, key: &str, member: &str) -> Option<usize> {
        let z = self.zset(now, key)?;
        let score = *z.get(member)?;
        Some(z.iter().filter(|(m, s)| **s < score || (**s == score && m.as_str() < member)).count())
    }

    /// `next_expiry`: ms until the earliest held permit expires, -1 if none.
    fn sem_next_expiry(&mut self, now: u64, expiries: &str) -> i64 {
        match self.zfirst(now, expiries) {
            Some(m) => (self.zscore(now, expiries, &m).unwrap() as i64 - now as i64).max(1),
            None => -1,
        }
    }

    fn sem_acquire(&mut self, now: u64, k: &[String], a: &[String], publish: &mut Vec<(String, String)>) -> RedisValue {
        self.acquire_calls += 1;
        let now_us = self.time_us(now);
        self.sem_reclaim(now, &k[0], &k[4]);
        let (holder, lease, wait, wttl, prefix, member) =
            (&a[0], a[1].parse::<u64>().unwrap(), a[2].as_str(), a[3].parse::<u64>().unwrap(), &a[4], &a[5]);
        let (total, ask): (i64, i64) = (a[6].parse().unwrap(), a[7].parse().unwrap());
        let int = |v: i64| RedisValue::Int(v);
        let recorded = self.get_int(now, &k[5]);
        if let Some(r) = recorded.filter(|r| *r != total) {
            return RedisValue::Array(vec![int(-1), int(r)]);
        }
        if !self.exists(now, &k[0]) {
            // First use (or the counter was lost): permits still held stay held.
            let held = self.zcard(now, &k[4]);
            self.set_int(&k[0], total - held);
            self.set_int(&k[5], total);
        } else if recorded.is_none() {
            let found = self.sem_available(now, &k[0]) + self.zcard(now, &k[4]);
            if found != total {
                return RedisValue::Array(vec![int(-1), int(found)]);
            }
            self.set_int(&k[5], total);
        } else if self.sem_available(now, &k[0]) + self.zcard(now, &k[4]) < total {
            // Held ids lost without their permits given back: free again.
            let held = self.zcard(now, &k[4]);
            self.set_int(&k[0], total - held);
        }
        // Ours already (a grant whose reply was lost): renewed, with a new token.
        let ids: Vec<String> = (1..=ask).map(|i| format!("{holder}:{i}")).collect();
        let held = ids.iter().filter(|id| self.zscore(now, &k[4], id).is_some()).count() as i64;
        if held == ask {
            for id in &ids {
                self.zadd_xx(now, &k[4], id, (now + lease) as f64);
            }
            let token = self.sem_token_for(now, now_us, &k[1], lease);
            self.grants.push((now, holder.clone(), token as u64, k[0].clone()));
            return RedisValue::Array(vec![int(1), RedisValue::Bulk(token.to_string().into_bytes())]);
        } else if held > 0 {
            // Part of an earlier grant of ours expired: give back the rest.
            for id in &ids {
                let n = self.zrem_count(now, &k[4], id);
                self.sem_give_back(now, &k[0], n);
            }
        }
        if let Some(token) = self.sem_hand_on(now, now_us, k, prefix, Some(member), publish) {
            return RedisValue::Array(vec![int(1), RedisValue::Bulk(token.to_string().into_bytes())]);
        }
        // The queue's front is live now: anyone queued is ahead of a newcomer.
        let rank = self.zrank(now, &k[2], member);
        let ahead = rank.unwrap_or_else(|| self.zcard(now, &k[2]) as usize);
        if ahead == 0 && self.sem_available(now, &k[0]) >= ask {
            if rank.is_some() {
                self.zrem(now, &k[2], member);
                self.zrem(now, &k[3], member);
            }
            let token = self.sem_take(now, now_us, k, holder, ask, lease);
            return RedisValue::Array(vec![int(1), RedisValue::Bulk(token.to_string().into_bytes())]);
        }
        if wait == "0" {
            return RedisValue::Array(vec![int(0), int(self.sem_next_expiry(now, &k[4])), int(0)]);
        }
        let upkeep = match wait {
            "1" => true,
            "2" => self.zscore(now, &k[3], member).unwrap_or(0.0) <= now as f64,
            _ => false,
        };
        if upkeep {
            self.zadd(now, &k[2], member, now_us as f64, true);
            self.zadd(now, &k[3], member, (now + wttl) as f64, false);
            for key in [&k[2], &k[3]] {
                if self.pttl(now, key) < wttl as i64 {
                    self.pexpire(now, key, wttl);
                }
            }
        }
        RedisValue::Array(vec![int(0), int(self.sem_next_expiry(now, &k[4])), int((ahead == 0) as i64)])
    }

    fn sem_leave(&mut self, now: u64, k: &[String], a: &[String], publish: &mut Vec<(String, String)>) -> RedisValue {
        let now_us = self.time_us(now);
        let expired = self.sem_reclaim(now, &k[0], &k[4]);
        let (holder, channel, prefix, member, shard) = (&a[0], &a[1], &a[2], &a[3], &a[4]);
        let ask: i64 = a[5].parse().unwrap();
        let mut freed = 0;
        for i in 1..=ask {
            freed += self.zrem_count(now, &k[4], &format!("{holder}:{i}"));
        }
        self.sem_give_back(now, &k[0], freed);
        if freed > 0 {
            self.releases += 1;
        }
        self.zrem(now, &k[2], member);
        self.zrem(now, &k[3], member);
        // Always: our leaving the queue's front can let smaller asks behind us in.
        self.sem_hand_on(now, now_us, k, prefix, None, publish);
        let free = self.sem_available(now, &k[0]);
        if (freed > 0 || expired > 0) && free > 0 {
            publish.push((channel.clone(), free.to_string()));
            if !shard.is_empty() {
                publish.push((format!("shard:{shard}"), free.to_string()));
            }
        }
        RedisValue::Int((freed > 0) as i64)
    }

    fn sem_renew(&mut self, now: u64, k: &[String], a: &[String]) -> RedisValue {
        self.time_us(now);
        let (holder, lease, ask) = (&a[0], a[1].parse::<u64>().unwrap(), a[2].parse::<i64>().unwrap());
        for i in 1..=ask {
            if self.zscore(now, &k[0], &format!("{holder}:{i}")).is_none_or(|e| e <= now as f64) {
                return RedisValue::Int(0);
            }
        }
        for i in 1..=ask {
            self.zadd_xx(now, &k[0], &format!("{holder}:{i}"), (now + lease) as f64);
        }
        RedisValue::Int(1)
    }

    /// After a semaphore script: free plus held permits is the recorded
    /// number, and the counter is never negative (for the oracles; state
    /// lost behind the scripts' back breaks it).
    fn sem_check(&mut self, now: u64, k: &[String], script: &str) {
        // LEAVE does not name the recorded number's key: the sim's names hold no `}`.
        let record = k.get(5).cloned().unwrap_or_else(|| format!("polylock_permits:{{{}}}", k[0]));
        let Some(total) = self.get_int(now, &record) else { return };
        let Some(free) = self.get_int(now, &k[0]) else { return };
        let held = self.zcard(now, &k[4]);
        if free < 0 || free + held != total {
            self.sem_breaks.push(format!("{now} ms after {script}: {free} free + {held} held != {total} permits"));
        }
    }

    /// Keys live at `now` (for comparing states).
    pub fn live_keys(&self, now: u64) -> Snapshot {
        let live = self.keys.iter().filter(|(_, (_, exp))| exp.is_none_or(|e| e > now));
        Snapshot(live.map(|(k, v)| (k.clone(), v.clone())).collect())
    }

    /// The key space as the prelude's reclaim would leave it at `now`.
    pub fn reclaimed(&self, now: u64, counter: &str, expiries: &str) -> Snapshot {
        let mut copy = RedisModel { keys: self.keys.clone(), ..RedisModel::default() };
        copy.sem_reclaim(now, counter, expiries);
        copy.live_keys(now)
    }

    /// A counter's value (for oracles).
    pub fn counter(&mut self, now: u64, key: &str) -> Option<i64> {
        self.get_int(now, key)
    }

    /// The server's `TIME` in microseconds. The model's clock counts
    /// milliseconds; a script takes more than a microsecond, so two
    /// scripts never read the same value. It never goes back, not even
    /// when the data does (a restore).
    fn time_us(&mut self, now: u64) -> i64 {
        self.last_us = (now as i64 * 1000).max(self.last_us + 1);
        self.last_us
    }

    /// `max(counter + 1, now_us)`, stored back with the grant's lease as TTL.
    fn next_token(&mut self, now: u64, now_us: i64, fence: &str, lease: u64) -> i64 {
        let counter = match self.live(now, fence) {
            Some(Value::Counter(c)) => *c,
            _ => 0,
        };
        let token = (counter + 1).max(now_us);
        self.keys.insert(fence.to_owned(), (Value::Counter(token), Some(now + lease)));
        token
    }

    /// Deletes a key outright (a fault: someone ran DEL, or a restart lost data).
    pub fn del(&mut self, key: &str) {
        self.keys.remove(key);
    }

    /// A copy of the whole key space (what BGSAVE writes).
    pub fn snapshot(&self) -> Snapshot {
        Snapshot(self.keys.clone())
    }

    /// Replaces the key space by an earlier copy (a restart from that
    /// snapshot). Expiry times are absolute, as in an RDB file.
    pub fn restore(&mut self, copy: Snapshot) {
        self.keys = copy.0;
        self.flush_scripts();
    }

    /// `SCRIPT FLUSH`: the cache is empty, the data stays.
    pub fn flush_scripts(&mut self) {
        self.scripts.clear();
    }

    /// Deletes one live key, chosen by `pick` (an eviction).
    pub fn evict(&mut self, now: u64, pick: u64) {
        let mut live: Vec<String> = self.keys.keys().cloned().collect();
        live.retain(|k| self.keys.get(k).is_some_and(|(_, exp)| exp.is_none_or(|e| e > now)));
        live.sort();
        if !live.is_empty() {
            let k = live[(pick % live.len() as u64) as usize].clone();
            self.keys.remove(&k);
        }
    }

    /// Forgets everything (a restart without persistence).
    pub fn flush(&mut self) {
        self.keys.clear();
    }
}
