//! The `sha256=<hex>` HMAC-SHA256 of an HTTP body — GitHub's `X-Hub-Signature-256`
//! scheme: checked on the webhooks that come in, sent with the notifications that go out.

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// `sha256=<hex>` of `body` under `secret`.
pub fn sign(secret: &[u8], body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes any key length");
    mac.update(body);
    format!(
        "sha256={}",
        crate::digest::hex(&mac.finalize().into_bytes())
    )
}

/// Whether `header` (`sha256=<hex>`) is the signature of `body` under `secret`, compared
/// in constant time.
pub fn matches(secret: &[u8], body: &[u8], header: &str) -> bool {
    let Some(signature) = header
        .strip_prefix("sha256=")
        .and_then(|h| hex::decode(h).ok())
    else {
        return false;
    };
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(secret) else {
        return false;
    };
    mac.update(body);
    mac.verify_slice(&signature).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_round_trip() {
        let sig = sign(b"secret", b"{}");
        assert!(sig.starts_with("sha256=") && sig.len() == 7 + 64);
        assert!(matches(b"secret", b"{}", &sig));
        assert!(!matches(b"other", b"{}", &sig));
        assert!(!matches(b"secret", b"{ }", &sig));
        assert!(!matches(b"secret", b"{}", "sha256=zz"));
        assert!(!matches(b"secret", b"{}", &sig[..sig.len() - 1]));
        // A sign is not a digit: `+a` read as a byte would let two spellings pass.
        let plus = format!("sha256=+{}", &sig[8..]);
        assert!(!matches(b"secret", b"{}", &plus));
    }
}
