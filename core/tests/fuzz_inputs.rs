//! The fuzz target's interpretation, over seeded random inputs, in every
//! `cargo test` (the coverage-guided run is `cargo +nightly fuzz run machine`).

#[test]
fn random_input_sequences_never_panic() {
    let mut state = 0x2545_F491_4F6C_DD1Du64;
    for len in 0..20_000usize {
        let data: Vec<u8> = (0..(len % 600))
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state as u8
            })
            .collect();
        polylock_core::fuzzing::run(&data);
    }
}
