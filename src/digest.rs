//! Digests and their hex spelling: the one SHA-256 and the one lower-case hex encoding
//! behind every digest berth writes (inventory entries, cache and Lease names, event
//! fingerprints, HMAC signatures).

use sha2::{Digest, Sha256};

/// `bytes` as lower-case hex, two digits a byte.
pub fn hex(bytes: &[u8]) -> String {
    hex::encode(bytes)
}

/// The SHA-256 of `parts` fed one after the other (the digest of their concatenation).
pub fn sha256_parts<'a>(parts: impl IntoIterator<Item = &'a [u8]>) -> [u8; 32] {
    let mut hash = Sha256::new();
    for part in parts {
        hash.update(part);
    }
    hash.finalize().into()
}

/// The SHA-256 of `bytes`.
pub fn sha256(bytes: &[u8]) -> [u8; 32] {
    sha256_parts([bytes])
}

/// The SHA-256 of `bytes` in hex (64 digits).
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&sha256(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_is_two_lower_case_digits_a_byte() {
        assert_eq!(hex(&[0x00, 0x0f, 0xab, 0xff]), "000fabff");
        assert_eq!(hex(&[]), "");
    }

    #[test]
    fn sha256_is_the_standard_digest_and_parts_concatenate() {
        // `printf abc | sha256sum`
        let abc = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
        assert_eq!(sha256_hex(b"abc"), abc);
        assert_eq!(hex(&sha256_parts([&b"a"[..], b"", b"bc"])), abc);
    }
}
