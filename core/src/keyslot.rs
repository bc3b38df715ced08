//! Redis Cluster key slots: CRC16 (XMODEM) of the key's hash tag, mod 16384,
//! exactly as the server's `CLUSTER KEYSLOT` computes it.
//!
//! The hash tag is the text between the key's first `{` and the first `}`
//! after it, when that text is not empty; otherwise the whole key is
//! hashed. [`crate::LockName`] uses this to put every key of one lock in
//! the lock key's slot, whatever braces the name holds.

/// Number of slots of a Redis Cluster.
pub const SLOTS: u16 = 16384;

/// CRC16-CCITT (XMODEM: polynomial 0x1021, initial value 0), Redis's key hash.
pub fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in bytes {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 { (crc << 1) ^ 0x1021 } else { crc << 1 };
        }
    }
    crc
}

/// The part of `key` that Redis hashes: its hash tag if it has a non-empty
/// one, else the whole key.
pub fn hashed_part(key: &str) -> &str {
    hash_tag(key).unwrap_or(key)
}

/// The key's hash tag: the text between its first `{` and the next `}`,
/// if that is not empty.
pub fn hash_tag(key: &str) -> Option<&str> {
    let open = key.find('{')?;
    let rest = &key[open + 1..];
    let close = rest.find('}')?;
    (close > 0).then(|| &rest[..close])
}

/// The cluster slot of `key`, as `CLUSTER KEYSLOT` answers.
pub fn key_slot(key: &str) -> u16 {
    crc16(hashed_part(key).as_bytes()) % SLOTS
}

/// Alphabet of [`tag_for_slot`]: no braces, nothing a shell or a glob treats specially.
const TAG_ALPHABET: &[u8; 64] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz-_";

/// The first three-character text over `TAG_ALPHABET` (in alphabet
/// order) that hashes to `slot`. Every slot has one (a unit test goes
/// through all 64³ candidates once), so the search ends within 64³ steps;
/// it is only needed for names whose own text cannot serve as a tag.
pub fn tag_for_slot(slot: u16) -> String {
    let slot = slot % SLOTS;
    for i in 0..64 * 64 * 64 {
        let tag = tag_candidate(i);
        if crc16(&tag) % SLOTS == slot {
            return tag.iter().map(|&b| b as char).collect();
        }
    }
    unreachable!("every slot has a three-character tag (tested)")
}

fn tag_candidate(i: usize) -> [u8; 3] {
    [TAG_ALPHABET[i / 4096], TAG_ALPHABET[(i / 64) % 64], TAG_ALPHABET[i % 64]]
}

/// Lock names of every brace shape, for the tests that check key slots
/// (here and against a real server in the runtime's tests).
#[doc(hidden)]
pub fn brace_shaped_names() -> Vec<String> {
    let shapes = [
        "orders/42",
        "orders{42}",
        "{orders}42",
        "orders{42}{43}",
        "a{}b",
        "{}",
        "{}x{y}",
        "a{",
        "{",
        "a}",
        "}",
        "}{",
        "a}b{c",
        "a}b{c}",
        "a{b{c}d",
        "a{{b}}",
        "{{}}",
        "a{}}",
        "x{}{y}",
        "{abc}",
        "abc",
        "/locks/{tenant-7}/orders-42",
        "/locks/ord}ers",
        "ünïcødé{ключ}",
        "ünïcødé}",
    ];
    let mut names: Vec<String> = shapes.iter().map(|s| s.to_string()).collect();
    for i in 0..200 {
        names.push(format!("order-{i}"));
        names.push(format!("order}}{i}"));
        names.push(format!("order{{{i}"));
        names.push(format!("order{{}}{i}"));
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc16_matches_redis_test_vector_and_known_slots() {
        // The check value in the Redis Cluster specification.
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(key_slot("foo"), 12182);
        assert_eq!(key_slot("{user1000}.following"), key_slot("user1000"));
        assert_eq!(key_slot("foo{}{bar}"), crc16(b"foo{}{bar}") % SLOTS, "an empty tag hashes the whole key");
        assert_eq!(key_slot("foo{{bar}}zap"), key_slot("{bar"), "the tag ends at the first closing brace");
        assert_eq!(key_slot("foo{bar}{zap}"), key_slot("bar"), "only the first tag counts");
    }

    #[test]
    fn every_slot_has_a_three_character_tag() {
        let mut covered = vec![false; SLOTS as usize];
        for i in 0..64 * 64 * 64 {
            covered[(crc16(&tag_candidate(i)) % SLOTS) as usize] = true;
        }
        assert!(covered.iter().all(|&c| c), "some slot has no tag");
        for slot in [0, 1, 5461, 10922, 16383] {
            let tag = tag_for_slot(slot);
            assert_eq!(tag.len(), 3);
            assert_eq!(key_slot(&format!("x{{{tag}}}y")), slot);
        }
    }
}
