//! OpenPGP signatures (`git commit -S` with GnuPG): a signature checked against the
//! trusted keys and their subkeys, revocation and expiry; the armored key files.
use std::path::Path;

use jiff::Timestamp;
use pgp::composed::{Deserializable, DetachedSignature, SignedPublicKey, SignedPublicSubKey};
use pgp::packet::SignatureType;
use pgp::types::KeyDetails;

use super::{Signature, Trust, VerifyError};

impl Trust {
    /// Checks the armored OpenPGP `armored` over `data` against the trusted OpenPGP keys.
    pub(super) fn verify_openpgp(
        &self,
        commit: &str,
        armored: &str,
        data: &[u8],
        now: Timestamp,
    ) -> Result<Signature, VerifyError> {
        let (signature, _) = DetachedSignature::from_string(armored).map_err(|e| {
            VerifyError::bad(commit, None, format!("unreadable OpenPGP signature ({e})"))
        })?;
        let sig = &signature.signature;
        let issuer = issuer_named(sig);
        for key in &self.openpgp {
            // The primary key (`None`) or the signing subkey the signature names.
            let Some(component) = named_component(sig, key) else {
                continue;
            };
            return verify_with(commit, sig, key, component, data, now);
        }
        Err(VerifyError::Untrusted {
            commit: commit.to_string(),
            fingerprint: issuer,
            ssh: false,
        })
    }
}

/// The key `sig` says it was made with: its issuer fingerprint, else its key ID.
fn issuer_named(sig: &pgp::packet::Signature) -> String {
    sig.issuer_fingerprint()
        .first()
        .map(|f| format!("{f:X}"))
        .or_else(|| {
            sig.issuer_key_id()
                .first()
                .map(|k| k.to_string().to_uppercase())
        })
        .unwrap_or_else(|| "(none named)".into())
}

/// The part of `key` that `sig` names as its issuer: `Some(None)` for the primary key,
/// `Some(Some(subkey))` for one of its subkeys, `None` when it names neither.
fn named_component<'k>(
    sig: &pgp::packet::Signature,
    key: &'k SignedPublicKey,
) -> Option<Option<&'k SignedPublicSubKey>> {
    let names = |fingerprint: &pgp::types::Fingerprint, key_id: &pgp::types::KeyId| {
        sig.issuer_fingerprint().contains(&fingerprint) || sig.issuer_key_id().contains(&key_id)
    };
    if names(&key.fingerprint(), &key.legacy_key_id()) {
        return Some(None);
    }
    key.public_subkeys
        .iter()
        .find(|s| names(&s.key.fingerprint(), &s.key.legacy_key_id()))
        .map(Some)
}

/// Checks `sig` over `data` with the trusted `key` (or its signing `subkey`), and that
/// the key may sign at `now`: who signed, or why the commit is refused.
fn verify_with(
    commit: &str,
    sig: &pgp::packet::Signature,
    key: &SignedPublicKey,
    subkey: Option<&SignedPublicSubKey>,
    data: &[u8],
    now: Timestamp,
) -> Result<Signature, VerifyError> {
    let fingerprint = format!("{:X}", key.fingerprint());
    let checked = match subkey {
        None => sig.verify(key, data),
        Some(sub) => sig.verify(sub, data),
    };
    checked.map_err(|e| {
        VerifyError::bad(
            commit,
            Some(fingerprint.clone()),
            format!("it does not match the commit ({e}): was the commit changed after signing?"),
        )
    })?;
    let signer = key
        .details
        .users
        .first()
        .and_then(|u| u.id.as_str().map(str::to_owned))
        .unwrap_or_else(|| fingerprint.clone());
    if let Some(state) = invalid_at(key, subkey, now) {
        return Err(VerifyError::KeyInvalid {
            commit: commit.to_string(),
            fingerprint,
            signer,
            state,
        });
    }
    Ok(Signature {
        format: "openpgp".into(),
        signer,
        fingerprint,
    })
}

/// Why `key` (and its signing `subkey`, when the signature was made with one) may not
/// sign at `now`: revoked, or expired; `None` when it may.
fn invalid_at(
    key: &SignedPublicKey,
    subkey: Option<&SignedPublicSubKey>,
    now: Timestamp,
) -> Option<String> {
    if !key.details.revocation_signatures.is_empty() {
        return Some("is revoked".into());
    }
    let (own_fingerprint, own_id) = (key.fingerprint(), key.legacy_key_id());
    let self_signatures = key
        .details
        .users
        .iter()
        .flat_map(|u| &u.signatures)
        .chain(&key.details.direct_signatures)
        .filter(|s| {
            s.issuer_fingerprint().contains(&&own_fingerprint)
                || s.issuer_key_id().contains(&&own_id)
        });
    if let Some(at) = expires(key.created_at(), self_signatures).filter(|at| *at <= now) {
        return Some(format!("expired at {at}"));
    }
    let sub = subkey?;
    let of_type = |t| sub.signatures.iter().filter(move |s| s.typ() == Some(t));
    if of_type(SignatureType::SubkeyRevocation).next().is_some() {
        return Some(format!(
            "has its signing subkey {:X} revoked",
            sub.key.fingerprint()
        ));
    }
    let expiry = expires(sub.key.created_at(), of_type(SignatureType::SubkeyBinding));
    expiry
        .filter(|at| *at <= now)
        .map(|at| format!("has its signing subkey expired at {at}"))
}

/// When a key created at `created` expires: as its newest self-signature says (an older
/// one's expiry no longer counts once a newer one changed or removed it).
fn expires<'a>(
    created: pgp::types::Timestamp,
    self_signatures: impl Iterator<Item = &'a pgp::packet::Signature>,
) -> Option<Timestamp> {
    let newest = self_signatures.max_by_key(|s| s.created().map(|c| c.as_secs()))?;
    let seconds = newest.key_expiration_time()?.as_secs();
    if seconds == 0 {
        return None;
    }
    Timestamp::from_second(i64::from(created.as_secs()) + i64::from(seconds)).ok()
}

/// The public keys of an armored (or binary) OpenPGP file, each self-signature checked.
pub(super) fn openpgp_keys(path: &Path) -> Result<Vec<SignedPublicKey>, VerifyError> {
    let failed = |message: String| VerifyError::Keys {
        path: path.to_path_buf(),
        message,
    };
    let bytes = std::fs::read(path).map_err(|e| VerifyError::Unreadable {
        path: path.to_path_buf(),
        source: std::sync::Arc::new(e),
    })?;
    let (keys, _) = SignedPublicKey::from_reader_many(&bytes[..])
        .map_err(|e| failed(format!("not an OpenPGP public key ({e})")))?;
    let mut out = Vec::new();
    for key in keys {
        let key = key.map_err(|e| failed(format!("not an OpenPGP public key ({e})")))?;
        key.verify_bindings().map_err(|e| {
            failed(format!(
                "key {:X} has a broken self-signature ({e})",
                key.fingerprint()
            ))
        })?;
        out.push(key);
    }
    if out.is_empty() {
        return Err(failed("holds no OpenPGP public key".into()));
    }
    Ok(out)
}
