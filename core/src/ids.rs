//! Identifiers that cross the sans-IO boundary.

/// Who holds a lock inside one client: a thread, a task, an async context.
/// Chosen by the caller; reentrancy is counted per owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OwnerId(pub u64);

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
