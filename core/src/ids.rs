//! Identifiers that cross the sans-IO boundary.

/// Who holds a lock inside one client: a thread, a task, an async context.
/// Chosen by the caller; reentrancy is counted per owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OwnerId(pub u64);

/// The process-wide source of [`OwnerId::fresh`]. An `AtomicU64` keeps core
/// free of std-only parts (wasm32 has one); starts at 1 so that 0 never names
/// an owner.
static NEXT_OWNER: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(1);

impl OwnerId {
    /// A new owner id, unique in this process and never reused (a dead
    /// thread's id may still hold a lock). Every binding takes its owners
    /// from here, so two bindings loaded in one process never share an id.
    /// Always above 0 and below 2^53 in practice, so it is a safe integer in
    /// JavaScript and a positive `long` in Java.
    pub fn fresh() -> OwnerId {
        OwnerId(NEXT_OWNER.fetch_add(1, core::sync::atomic::Ordering::Relaxed))
    }
}

/// Matches a backend reply to the command that asked for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RequestId(pub u64);

/// Names one `acquire` call, so its outcome event can find its caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Ticket(pub u64);

/// Names one server-side release, so `release().await` can find its end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ReleaseId(pub u64);

/// A fencing token: strictly increasing across grants of one lock name.
/// Redis: an `INCR`ed counter; ZooKeeper: the `czxid` of our node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FencingToken(pub u64);

/// 128 random bits from the operating system, supplied by the driver
/// (the core cannot read entropy on `wasm32-unknown-unknown`).
/// Formats as a canonical 36-character UUID, as Curator's protection prefix
/// and Redisson's client id do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Nonce(pub u128);

impl Nonce {
    /// A nonce derived from this one, for a retry that needs a fresh but
    /// unique identity (a new ZooKeeper node after a session expiry).
    pub(crate) fn derive(self, n: u64) -> Nonce {
        // splitmix64 on each half keeps derived values spread out and unique.
        fn mix(mut z: u64) -> u64 {
            z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        }
        let hi = (self.0 >> 64) as u64;
        let lo = self.0 as u64;
        Nonce(((mix(hi ^ n) as u128) << 64) | mix(lo.wrapping_add(n)) as u128)
    }

    /// Canonical UUID text (version 4 bits set), lowercase.
    pub fn to_uuid(self) -> String {
        let mut v = self.0;
        // version 4, variant 10xx: a well-formed random UUID.
        v = (v & !(0xF << 76)) | (0x4 << 76);
        v = (v & !(0x3 << 62)) | (0x2 << 62);
        let h = format!("{v:032x}");
        format!("{}-{}-{}-{}-{}", &h[0..8], &h[8..12], &h[12..16], &h[16..20], &h[20..32])
    }
}

/// Who holds a grant, as every backend stores it: `<client uuid>:<owner>`,
/// Redisson's `<client uuid>:<thread id>` layout. It is the Redis hash field
/// of the grant and the data of a ZooKeeper node, and what
/// [`crate::LockStatus::holder`] shows. The one definition of it.
pub fn holder_id(client_id: Nonce, owner: OwnerId) -> String {
    format!("{}:{}", client_id.to_uuid(), owner.0)
}

#[cfg(test)]
mod tests {
    use super::OwnerId;

    #[test]
    fn fresh_owner_ids_are_positive_and_never_repeat_across_threads() {
        let per_thread: Vec<Vec<OwnerId>> = (0..4)
            .map(|_| std::thread::spawn(|| (0..1000).map(|_| OwnerId::fresh()).collect::<Vec<_>>()))
            .collect::<Vec<_>>()
            .into_iter()
            .map(|t| t.join().unwrap())
            .collect();
        let mut all: Vec<u64> = per_thread.iter().flatten().map(|o| o.0).collect();
        assert!(all.iter().all(|&id| id > 0), "0 is never an owner");
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), 4000, "an id was handed out twice");
        // Each thread sees its own ids grow: the counter never goes back.
        for ids in &per_thread {
            assert!(ids.windows(2).all(|w| w[0] < w[1]));
        }
    }
}
