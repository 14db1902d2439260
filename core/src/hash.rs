//! A stable fingerprint of bytes (64-bit FNV-1a; not a cryptographic hash), for model versions,
//! dataset fingerprints and campaign settings.

pub const FNV_OFFSET: u64 = 0xCBF2_9CE4_8422_2325;

/// Continues the FNV-1a hash `hash` over `bytes`; start from `FNV_OFFSET`.
pub fn fnv1a(bytes: &[u8], mut hash: u64) -> u64 {
    for b in bytes {
        hash ^= u64::from(*b);
        hash = hash.wrapping_mul(0x0000_0100_0000_01B3);
    }
    hash
}
