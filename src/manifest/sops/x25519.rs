//! An age X25519 identity that opens a file key as `age::x25519::Identity` does (the
//! recipient stanza of <https://c2sp.org/age#x25519-recipient-stanza>), for less: every
//! encrypted file of a render pays one agreement, and age's own identity also derives
//! its public key again each time (a third more). This one makes it once, and
//! multiplies on the Edwards curve (see [`Identity::agree`]).

use std::str::FromStr;

use age::secrecy::ExposeSecret;
use age::DecryptError;
use age_core::format::{FileKey, Stanza, FILE_KEY_BYTES};
use age_core::primitives::{aead_decrypt, hkdf};
use base64::Engine;
use bech32::FromBase32;
use curve25519_dalek::montgomery::MontgomeryPoint;
use subtle::ConstantTimeEq;
use zeroize::Zeroizing;

/// The stanza's tag, and the label its wrapping key is derived with.
const TAG: &str = "X25519";
const LABEL: &[u8] = b"age-encryption.org/v1/X25519";

/// An age identity (`AGE-SECRET-KEY-1…`) and its recipient.
pub(super) struct Identity {
    secret: Zeroizing<[u8; 32]>,
    public: MontgomeryPoint,
    /// The recipient as age writes it (`age1…`), to name it and match sops' entries.
    pub(super) recipient: String,
}

impl FromStr for Identity {
    type Err = ();

    /// Parses as age does; the text is never kept or shown.
    fn from_str(line: &str) -> Result<Self, ()> {
        let parsed = age::x25519::Identity::from_str(line).map_err(|_| ())?;
        let encoded = parsed.to_string();
        let (_, data, _) = bech32::decode(encoded.expose_secret()).map_err(|_| ())?;
        let bytes = Zeroizing::new(Vec::<u8>::from_base32(&data).map_err(|_| ())?);
        let secret: Zeroizing<[u8; 32]> = Zeroizing::new((&bytes[..]).try_into().map_err(|_| ())?);
        Ok(Identity {
            public: MontgomeryPoint::mul_base_clamped(*secret),
            secret,
            recipient: parsed.to_public().to_string(),
        })
    }
}

impl Identity {
    /// X25519 of the secret and `share` (RFC 7748). A share on the curve (any honest
    /// one) is multiplied as an Edwards point, which curve25519-dalek does with AVX2
    /// where the processor has it, a fifth faster than the Montgomery ladder; its
    /// u-coordinate is the same whichever of the two points the share names. A share on
    /// the twist goes through the ladder.
    fn agree(&self, share: [u8; 32]) -> [u8; 32] {
        let point = MontgomeryPoint(share);
        match point.to_edwards(0) {
            Some(edwards) => edwards.mul_clamped(*self.secret).to_montgomery().0,
            None => point.mul_clamped(*self.secret).0,
        }
    }
}

impl age::Identity for Identity {
    fn unwrap_stanza(&self, stanza: &Stanza) -> Option<Result<FileKey, DecryptError>> {
        if stanza.tag != TAG {
            return None;
        }
        // Canonical base64 of exactly 32 bytes, as age enforces.
        let share: [u8; 32] = match &stanza.args[..] {
            [arg] => match base64::engine::general_purpose::STANDARD_NO_PAD.decode(arg) {
                Ok(bytes) => match bytes.try_into() {
                    Ok(share) => share,
                    Err(_) => return Some(Err(DecryptError::InvalidHeader)),
                },
                Err(_) => return Some(Err(DecryptError::InvalidHeader)),
            },
            _ => return Some(Err(DecryptError::InvalidHeader)),
        };
        if stanza.body.len() != FILE_KEY_BYTES + 16 {
            return Some(Err(DecryptError::InvalidHeader));
        }
        let shared = Zeroizing::new(self.agree(share));
        // An all-zero secret: a share of small order, as age refuses.
        if bool::from(shared.ct_eq(&[0; 32])) {
            return Some(Err(DecryptError::InvalidHeader));
        }
        let mut salt = [0; 64];
        salt[..32].copy_from_slice(&share);
        salt[32..].copy_from_slice(self.public.as_bytes());
        let key = hkdf(&salt, LABEL, &shared[..]);
        // Another identity may open it: a failure is no error.
        let opened = Zeroizing::new(aead_decrypt(&key, FILE_KEY_BYTES, &stanza.body).ok()?);
        Some(Ok(FileKey::init_with_mut(|k| k.copy_from_slice(&opened))))
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};

    use super::*;

    /// A file key wrapped by age itself, for a fresh identity, opened by ours.
    #[test]
    fn opens_what_age_encrypts_and_names_the_recipient_as_age_does() {
        let theirs = age::x25519::Identity::generate();
        let line = theirs.to_string();
        let ours = Identity::from_str(line.expose_secret()).unwrap();
        assert_eq!(ours.recipient, theirs.to_public().to_string());
        let other = Identity::from_str(
            age::x25519::Identity::generate()
                .to_string()
                .expose_secret(),
        )
        .unwrap();
        for _ in 0..20 {
            let recipient = theirs.to_public();
            let encryptor =
                age::Encryptor::with_recipients(std::iter::once(&recipient as _)).unwrap();
            let mut sealed = Vec::new();
            let mut writer = encryptor.wrap_output(&mut sealed).unwrap();
            writer.write_all(b"a data key").unwrap();
            writer.finish().unwrap();
            let open = |identity: &Identity| {
                let decryptor = age::Decryptor::new(&sealed[..]).unwrap();
                let mut plain = Vec::new();
                decryptor
                    .decrypt(std::iter::once(identity as &dyn age::Identity))
                    .ok()?
                    .read_to_end(&mut plain)
                    .ok()?;
                Some(plain)
            };
            assert_eq!(open(&ours).as_deref(), Some(&b"a data key"[..]));
            assert_eq!(open(&other), None);
        }
    }

    /// The agreement equals RFC 7748's ladder for shares on the curve and on its twist.
    #[test]
    fn the_agreement_is_x25519_for_every_share() {
        let identity = Identity::from_str(
            age::x25519::Identity::generate()
                .to_string()
                .expose_secret(),
        )
        .unwrap();
        let mut twist = 0;
        for i in 0u32..400 {
            let mut share = [0u8; 32];
            share[..4].copy_from_slice(&i.wrapping_mul(2_654_435_761).to_le_bytes());
            share[17] = i as u8;
            share[31] &= 0x7f;
            let ladder = MontgomeryPoint(share).mul_clamped(*identity.secret).0;
            assert_eq!(identity.agree(share), ladder, "share {i}");
            twist += usize::from(MontgomeryPoint(share).to_edwards(0).is_none());
        }
        assert!((100..300).contains(&twist), "{twist} of 400 on the twist");
        // RFC 7748 §5.2's first test vector.
        let scalar: [u8; 32] =
            hex("a546e36bf0527c9d3b16154b82465edd62144c0ac1fc5a18506a2244ba449ac4");
        let u = hex("e6db6867583030db3594c1a424b15f7c726624ec26b3353b10a903a6d0ab1c4c");
        let ours = Identity {
            secret: Zeroizing::new(scalar),
            public: MontgomeryPoint::mul_base_clamped(scalar),
            recipient: String::new(),
        };
        assert_eq!(
            ours.agree(u),
            hex("c3da55379de9c6908e94ea4df28d084f32eccf03491c71f754b4075577a28552")
        );
    }

    fn hex(s: &str) -> [u8; 32] {
        let bytes: Vec<u8> = (0..32)
            .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap())
            .collect();
        bytes.try_into().unwrap()
    }
}
