//! cosign's keyed signatures, checked in-process: the signature manifest at the tag
//! `sha256-<digest>.sig` beside the artifact, each of its simple-signing layers a payload
//! naming the artifact's digest and, in an annotation, an ECDSA P-256 signature of that
//! payload. An artifact verifies when one payload names its digest and is signed by one
//! of the configured public keys (PEM, as `cosign generate-key-pair` writes them).
//!
//! Keyless signatures (a Fulcio certificate and a Rekor entry) are not checked: that needs
//! Sigstore's roots of trust and the transparency log's answers, which a cluster's agent
//! should not fetch per sync; nor are cosign 3's bundles stored as OCI referrers.

use std::path::Path;

use base64::Engine as _;
use p256::ecdsa::signature::Verifier as _;
use p256::ecdsa::{Signature, VerifyingKey};
use p256::pkcs8::DecodePublicKey as _;
use serde::Deserialize;

use super::http::Client;
use super::oci::{self, Reference};
use super::RegistryError;

/// A simple-signing payload's media type.
const SIMPLE_SIGNING: &str = "application/vnd.dev.cosign.simplesigning.v1+json";
/// The annotation holding the payload's signature (base64 of DER).
const SIGNATURE: &str = "dev.cosignproject.cosign/signature";
/// The largest payload read.
const MAX_PAYLOAD: u64 = 64 << 10;
/// The most signatures looked at for one artifact.
const MAX_SIGNATURES: usize = 32;

/// Reads the public keys at `paths`.
///
/// # Errors
/// A file that cannot be read or holds no ECDSA P-256 public key.
pub fn keys(paths: &[std::path::PathBuf]) -> Result<Vec<VerifyingKey>, RegistryError> {
    paths.iter().map(|p| key(p)).collect()
}

fn key(path: &Path) -> Result<VerifyingKey, RegistryError> {
    let unusable = |why: String| RegistryError::Key {
        path: path.to_path_buf(),
        why,
    };
    let text = crate::manifest::read::read_capped(std::fs::File::open(path), 64 << 10)
        .map_err(|e| unusable(e.to_string()))?;
    let text = String::from_utf8(text).map_err(|_| unusable("not PEM text".into()))?;
    let key = p256::PublicKey::from_public_key_pem(&text).map_err(|e| {
        unusable(format!(
            "not an ECDSA P-256 public key in PEM ({e}); cosign's keys are"
        ))
    })?;
    Ok(VerifyingKey::from(&key))
}

#[derive(Deserialize)]
struct Payload {
    critical: Critical,
}

#[derive(Deserialize)]
struct Critical {
    image: Image,
}

#[derive(Deserialize)]
struct Image {
    #[serde(rename = "docker-manifest-digest")]
    digest: String,
}

/// Checks that the artifact `digest` in `reference` carries a signature by one of `keys`.
///
/// # Errors
/// [`RegistryError::Unsigned`] when none does (or the signatures cannot be read).
pub async fn verify(
    client: &Client,
    reference: &Reference,
    digest: &str,
    keys: &[VerifyingKey],
    scratch: &Path,
) -> Result<(), RegistryError> {
    let unsigned = |why: String| RegistryError::Unsigned {
        artifact: format!("{reference}@{digest}"),
        why,
    };
    let tag = format!("{}.sig", digest.replace(':', "-"));
    let (manifest, _) = match oci::manifest(client, reference, &tag).await {
        Ok(found) => found,
        Err(RegistryError::Status { status: 404, .. }) => {
            return Err(unsigned(format!(
                "it carries no cosign signature (no tag {tag})"
            )))
        }
        Err(e) => return Err(e),
    };
    let signed: Vec<_> = manifest
        .layers
        .iter()
        .filter(|l| l.media_type == SIMPLE_SIGNING)
        .filter_map(|l| Some((l, l.annotations.get(SIGNATURE)?)))
        .take(MAX_SIGNATURES)
        .collect();
    for (layer, signature) in &signed {
        let Ok(signature) = base64::engine::general_purpose::STANDARD.decode(signature.trim())
        else {
            continue;
        };
        let Ok(signature) =
            Signature::from_der(&signature).or_else(|_| Signature::from_slice(&signature))
        else {
            continue;
        };
        let file = scratch.join(format!(
            "{}.{}",
            layer.digest.replace(':', "-"),
            crate::source::cache::unique()
        ));
        oci::blob(client, reference, layer, MAX_PAYLOAD, &file).await?;
        let payload = crate::manifest::read::read_capped(std::fs::File::open(&file), MAX_PAYLOAD)
            .map_err(|e| unsigned(e.to_string()))?;
        let _ = std::fs::remove_file(&file);
        if signed_by(&payload, &signature, keys, digest) {
            return Ok(());
        }
    }
    Err(unsigned(format!(
        "none of its {} signatures is by a key in [app.verify] cosign_keys and names this digest",
        signed.len()
    )))
}

/// Whether `payload` names `digest` and `signature` over it is by one of `keys`.
fn signed_by(payload: &[u8], signature: &Signature, keys: &[VerifyingKey], digest: &str) -> bool {
    let names =
        serde_json::from_slice::<Payload>(payload).is_ok_and(|p| p.critical.image.digest == digest);
    names && keys.iter().any(|k| k.verify(payload, signature).is_ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use p256::ecdsa::signature::Signer as _;
    use p256::ecdsa::SigningKey;

    fn payload(digest: &str) -> Vec<u8> {
        format!(r#"{{"critical":{{"identity":{{"docker-reference":"r/web"}},"image":{{"docker-manifest-digest":"{digest}"}},"type":"cosign container image signature"}},"optional":null}}"#).into_bytes()
    }

    #[test]
    fn a_payload_verifies_by_its_key_and_for_its_digest_only() {
        // Unit test of the check alone; the integration tests sign with Python's
        // cryptography, not with this crate.
        let signer = SigningKey::from_slice(&[7; 32]).unwrap();
        let other = SigningKey::from_slice(&[9; 32]).unwrap();
        let digest = "sha256:aa";
        let body = payload(digest);
        let signature: Signature = signer.sign(&body);
        let trusted = [VerifyingKey::from(&signer)];
        assert!(signed_by(&body, &signature, &trusted, digest));
        assert!(
            !signed_by(&body, &signature, &trusted, "sha256:bb"),
            "another artifact"
        );
        assert!(
            !signed_by(&body, &signature, &[VerifyingKey::from(&other)], digest),
            "another key"
        );
        let mut tampered = body.clone();
        tampered.push(b' ');
        assert!(!signed_by(&tampered, &signature, &trusted, digest));
    }
}
