//! XXH3, the hash behind every checksum on the wire and on disk, through an implementation
//! that picks AVX2 at run time. A build for baseline x86-64 otherwise hashes with SSE2
//! only, at about half the speed on the 1 KiB messages every send verifies
//! (docs/decisions.md, "XXH3 with run-time dispatch").

/// XXH3-64 (seed 0) of `bytes`.
#[inline]
pub fn xxh3_64(bytes: &[u8]) -> u64 {
    twox_hash::XxHash3_64::oneshot(bytes)
}

/// XXH3-128 (seed 0) of `bytes`.
#[inline]
pub fn xxh3_128(bytes: &[u8]) -> u128 {
    twox_hash::XxHash3_128::oneshot(bytes)
}

/// XXH3-128 (seed 0) of `parts` one after another, as if they were one slice.
pub fn xxh3_128_parts(parts: &[&[u8]]) -> u128 {
    let mut hasher = twox_hash::XxHash3_128::new();
    for part in parts {
        hasher.write(part);
    }
    hasher.finish_128()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The dispatching implementation agrees with the reference one at every length class
    /// XXH3 treats apart (0, 1-3, 4-8, 9-16, 17-128, 129-240, and long inputs with a
    /// partial last stripe and block).
    #[test]
    fn agrees_with_the_reference_implementation() {
        let data: Vec<u8> = (0..5000u32).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
        for len in [0, 1, 3, 4, 8, 9, 16, 17, 128, 129, 240, 241, 1023, 1024, 1025, 4096, 4999] {
            let input = &data[..len];
            assert_eq!(xxh3_64(input), xxhash_rust::xxh3::xxh3_64(input), "64 at {len}");
            assert_eq!(xxh3_128(input), xxhash_rust::xxh3::xxh3_128(input), "128 at {len}");
            let (head, tail) = input.split_at(len / 3);
            assert_eq!(xxh3_128_parts(&[head, tail]), xxh3_128(input), "128 in parts at {len}");
        }
        assert_eq!(xxh3_64(&[]), 0x2d06800538d394c2);
    }
}
