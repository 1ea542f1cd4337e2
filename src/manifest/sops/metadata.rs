//! A file's `sops:` block as sops writes it: the MAC, the data key wrapped for each
//! recipient, and the rule of which values are encrypted; its entries bounded before
//! any of them is opened.

use serde_json::Value;

use super::SopsError;

/// The most recipients (age or OpenPGP entries) a file may name, and the most stanzas an
/// age entry may hold: sops writes one entry per recipient, and one stanza in each.
pub const MAX_RECIPIENTS: usize = 64;

/// The largest armored data key read (an entry's `enc`): an RSA-4096 OpenPGP message of a
/// 32-byte key is under 1 KiB armored, an age one under 300 bytes.
const MAX_ENC: usize = 16 << 10;

/// The fields of a `sops:` block that berth reads.
#[derive(serde::Deserialize)]
pub(super) struct Metadata {
    pub(super) lastmodified: String,
    pub(super) mac: Option<String>,
    #[serde(default)]
    pub(super) age: Vec<AgeEntry>,
    #[serde(default)]
    pub(super) pgp: Vec<PgpEntry>,
    #[serde(default)]
    pub(super) key_groups: Vec<Value>,
    pub(super) unencrypted_suffix: Option<String>,
    pub(super) encrypted_suffix: Option<String>,
    pub(super) unencrypted_regex: Option<String>,
    pub(super) encrypted_regex: Option<String>,
    pub(super) unencrypted_comment_regex: Option<String>,
    pub(super) encrypted_comment_regex: Option<String>,
    #[serde(default)]
    pub(super) mac_only_encrypted: bool,
}

/// The data key wrapped for an age recipient.
#[derive(serde::Deserialize)]
pub(super) struct AgeEntry {
    pub(super) recipient: String,
    pub(super) enc: String,
}

/// The data key wrapped for an OpenPGP key, by its fingerprint.
#[derive(serde::Deserialize)]
pub(super) struct PgpEntry {
    pub(super) fp: String,
    pub(super) enc: String,
}

/// Refuses more recipients than [`MAX_RECIPIENTS`], an `enc` longer than a data key's
/// message can be, and an age entry of more stanzas than [`MAX_RECIPIENTS`] (counted in
/// one pass over its armor, before age parses it).
pub(super) fn bounded_entries(m: &Metadata) -> Result<(), SopsError> {
    let refuse = |what: String| Err(SopsError::Metadata(format!("{what}; refused unread")));
    let recipients = m.age.len() + m.pgp.len();
    if recipients > MAX_RECIPIENTS {
        return refuse(format!(
            "it names {recipients} recipients, more than the {MAX_RECIPIENTS} berth reads"
        ));
    }
    let encs = m.age.iter().map(|a| (&a.enc, "age", &a.recipient));
    let encs = encs.chain(m.pgp.iter().map(|p| (&p.enc, "OpenPGP", &p.fp)));
    for (enc, kind, recipient) in encs {
        if enc.len() > MAX_ENC {
            return refuse(format!(
                "the {kind} data key for {recipient} is {} bytes armored, more than a data key's {MAX_ENC}",
                enc.len()
            ));
        }
    }
    for a in &m.age {
        let stanzas = age_stanzas(&a.enc);
        if stanzas > MAX_RECIPIENTS {
            return refuse(format!(
                "the age data key for {} holds {stanzas} stanzas, more than the {MAX_RECIPIENTS} berth reads (sops writes one)",
                a.recipient
            ));
        }
    }
    Ok(())
}

/// How many stanzas (`-> ` lines) an armored age file's header holds, or more than
/// [`MAX_RECIPIENTS`] when its armor does not decode.
pub(super) fn age_stanzas(armored: &str) -> usize {
    use base64::Engine;
    let body: String = armored
        .lines()
        .map(str::trim)
        .filter(|l| !l.starts_with("-----"))
        .collect();
    match base64::engine::general_purpose::STANDARD.decode(body) {
        Ok(bytes) => memchr::memmem::find_iter(&bytes, b"\n-> ").count(),
        Err(_) => MAX_RECIPIENTS + 1,
    }
}
