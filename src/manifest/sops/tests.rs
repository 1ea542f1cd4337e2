//! Against files written by other tools (tests/fixtures/sops, made by
//! scripts/sops-fixtures): PyPI's sops 1.18 with an age recipient added by Debian's age,
//! and an encrypted_regex / mac_only_encrypted file built from the Go source's format.

use super::keys::open_openpgp;
use super::metadata::age_stanzas;
use super::rule::compiled;
use super::*;
use age::secrecy::ExposeSecret;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/sops");

fn read(name: &str) -> String {
    std::fs::read_to_string(format!("{FIXTURES}/{name}")).unwrap()
}

fn parse(name: &str) -> Value {
    let text = read(name);
    if name.ends_with(".json") {
        serde_json::from_str(&text).unwrap()
    } else {
        serde_yaml::from_str(&text).unwrap()
    }
}

fn keys() -> Keys {
    let mut keys = Keys::default();
    keys.add_age(&read("age.key")).unwrap();
    keys
}

/// `name` decrypted with the fixtures' age key.
fn decrypted(name: &str) -> Result<(Value, Vec<String>), SopsError> {
    let mut docs = [parse(name)];
    let mut paths = decrypt(&mut docs, &keys())?;
    let [doc] = docs;
    Ok((doc, paths.remove(0)))
}

#[test]
fn a_file_of_sops_1_18_decrypts_to_its_plain_text_with_types() {
    let (doc, paths) = decrypted("values.enc.yaml").unwrap();
    assert_eq!(doc, parse("plain/values.yaml"));
    assert_eq!(doc["app"]["replicas"], 3);
    assert_eq!(doc["app"]["debug"], false);
    assert_eq!(doc["app"]["ratio"], 1.5);
    assert!(paths.contains(&"/app/password".to_string()), "{paths:?}");
    assert!(paths.contains(&"/app/hosts/1".to_string()), "{paths:?}");
    assert!(!paths.contains(&"/app/note_unencrypted".to_string()));
    assert!(
        !paths.contains(&"/app/empty".to_string()),
        "empty values are not encrypted"
    );
    assert!(doc.get(METADATA).is_none());

    let (doc, _) = decrypted("secret.enc.json").unwrap();
    assert_eq!(doc, parse("plain/secret.json"));
}

/// The same files opened by the OpenPGP key sops 1.18 encrypted them for.
#[test]
fn a_file_of_sops_1_18_opens_with_its_openpgp_key() {
    let mut keys = Keys::default();
    keys.add_openpgp(&read("pgp-secret.asc"), None).unwrap();
    for (name, plain) in [
        ("values.enc.yaml", "plain/values.yaml"),
        ("secret.enc.json", "plain/secret.json"),
    ] {
        let mut docs = [parse(name)];
        decrypt(&mut docs, &keys).unwrap();
        assert_eq!(docs[0], parse(plain), "{name}");
    }
    let e = keys.add_openpgp(&read("age.key"), None).unwrap_err();
    assert_eq!(e, KeyError::OpenPgp);
    assert_eq!(e.to_string(), "not an ASCII-armored OpenPGP secret key");
}

#[test]
fn an_encrypted_regex_file_leaves_the_rest_in_clear_and_macs_only_what_is_encrypted() {
    let encrypted = parse("regex.enc.yaml");
    assert_eq!(encrypted["metadata"]["name"], "db-regex");
    let (doc, paths) = decrypted("regex.enc.yaml").unwrap();
    assert_eq!(doc, parse("plain/secret.yaml"));
    assert_eq!(
        paths,
        ["/stringData/password", "/stringData/port", "/data/token"]
    );
    // mac_only_encrypted: a value in clear may change without breaking the MAC.
    let mut renamed = encrypted.clone();
    renamed["metadata"]["name"] = "db-renamed".into();
    decrypt(&mut [renamed], &keys()).unwrap();
}

#[test]
fn an_edited_or_moved_value_is_refused() {
    // A value in clear edited (sops 1.18 MACs every value).
    let mut edited = parse("values.enc.yaml");
    edited["app"]["note_unencrypted"] = "changed".into();
    assert_eq!(decrypt(&mut [edited], &keys()), Err(SopsError::Mac));

    // An encrypted value removed.
    let mut removed = parse("values.enc.yaml");
    removed["app"].as_object_mut().unwrap().remove("password");
    assert_eq!(decrypt(&mut [removed], &keys()), Err(SopsError::Mac));

    // An encrypted value moved under another key: its additional data no longer fits.
    let mut moved = parse("values.enc.yaml");
    moved["app"]["name"] = moved["app"]["password"].clone();
    let e = decrypt(&mut [moved], &keys()).unwrap_err().to_string();
    assert!(e.starts_with("/app/name: does not decrypt"), "{e}");
    assert!(!e.contains("hunter2"));

    // A ciphertext changed.
    let mut changed = parse("values.enc.yaml");
    let text = changed["app"]["password"]
        .as_str()
        .unwrap()
        .replacen("data:", "data:AA", 1);
    changed["app"]["password"] = text.into();
    assert!(decrypt(&mut [changed], &keys()).is_err());
}

#[test]
fn a_file_for_other_recipients_names_them_and_the_keys_berth_holds() {
    let mut other = Keys::default();
    let identity = age::x25519::Identity::generate();
    other.add_age(identity.to_string().expose_secret()).unwrap();
    let e = decrypt(&mut [parse("values.enc.yaml")], &other)
        .unwrap_err()
        .to_string();
    let file_recipient = read("age.key")
        .lines()
        .find_map(|l| l.strip_prefix("# public key: "))
        .unwrap()
        .to_string();
    assert!(
        e.contains(&format!(
            "it is encrypted for age {file_recipient}, OpenPGP "
        )),
        "{e}"
    );
    assert!(
        e.contains(&format!("berth holds age {}", identity.to_public())),
        "{e}"
    );
    let e = decrypt(&mut [parse("values.enc.yaml")], &Keys::default()).unwrap_err();
    assert!(e.to_string().ends_with("berth holds no key"), "{e}");
}

#[test]
fn keys_files_take_comments_and_refuse_other_lines_without_echoing_them() {
    let mut keys = Keys::default();
    assert!(keys.add_age("# created\n\n").is_ok());
    let e = keys.add_age("AGE-SECRET-KEY-1NOTAKEY\n").unwrap_err();
    assert_eq!(e, KeyError::Age { line: 1 });
    assert_eq!(e.to_string(), "line 1 is not an age identity");
}

#[test]
fn the_rules_cover_what_is_below_the_key_they_match() {
    let suffix = Rule::UnencryptedSuffix("_unencrypted".into());
    assert!(suffix.encrypts("password", true));
    assert!(!suffix.encrypts("note_unencrypted", true));
    assert!(!suffix.encrypts("child", false), "below a clear key");
    let regex = Rule::EncryptedRegex(regex::Regex::new("^(data|stringData)$").unwrap());
    assert!(!regex.at_root());
    assert!(regex.encrypts("data", false));
    assert!(regex.encrypts("anything", true), "below data");
    assert!(!regex.encrypts("metadata", false));
}

#[test]
fn a_file_whose_rule_would_compile_to_a_huge_regex_is_refused() {
    // A commit's file names its own rule: compiling it is bounded.
    let e = compiled("(a{1000}){1000}").unwrap_err();
    assert!(e.to_string().contains("size limit"), "{e}");
    assert!(compiled("^(data|stringData)$").is_ok());
}

#[test]
fn a_file_looks_encrypted_by_a_top_level_sops_key_in_its_text() {
    assert!(looks_encrypted(read("regex.enc.yaml").as_bytes()));
    assert!(looks_encrypted(read("secret.enc.json").as_bytes()));
    assert!(looks_encrypted(b"sops:\n  mac: x\n"));
    assert!(!looks_encrypted(b"kind: ConfigMap\ndata:\n  sops: x\n"));
}

#[test]
fn a_file_whose_mac_was_removed_is_refused_not_taken_in_clear() {
    let mut stripped = parse("values.enc.yaml");
    stripped[METADATA].as_object_mut().unwrap().remove("mac");
    assert!(is_encrypted(&stripped));
    let e = decrypt(&mut [stripped], &keys()).unwrap_err().to_string();
    assert!(e.contains("it has no mac"), "{e}");
}

/// An armored age file whose header holds `n` X25519 stanzas.
fn age_of_stanzas(n: usize) -> String {
    use base64::Engine;
    let mut header = String::from("age-encryption.org/v1\n");
    for _ in 0..n {
        header.push_str("-> X25519 AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\nAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\n");
    }
    header.push_str("--- AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\n");
    let body = base64::engine::general_purpose::STANDARD.encode(header);
    format!("-----BEGIN AGE ENCRYPTED FILE-----\n{body}\n-----END AGE ENCRYPTED FILE-----\n")
}

#[test]
fn an_age_entry_of_thousands_of_stanzas_is_refused_before_age_parses_it() {
    let with = |enc: String| {
        let mut doc = parse("values.enc.yaml");
        doc[METADATA]["age"][0]["enc"] = enc.into();
        let start = std::time::Instant::now();
        let e = decrypt(&mut [doc], &keys()).unwrap_err().to_string();
        assert!(start.elapsed() < std::time::Duration::from_secs(1));
        e
    };
    assert_eq!(age_stanzas(&age_of_stanzas(6000)), 6000);
    let e = with(age_of_stanzas(6000));
    assert!(
        e.contains("bytes armored, more than a data key's 16384"),
        "{e}"
    );
    let e = with(age_of_stanzas(100));
    assert!(
        e.contains("holds 100 stanzas, more than the 64 berth reads"),
        "{e}"
    );
    let mut doc = parse("values.enc.yaml");
    let entry = doc[METADATA]["age"][0].clone();
    doc[METADATA]["age"] = Value::Array(vec![entry; 65]);
    let e = decrypt(&mut [doc], &keys()).unwrap_err().to_string();
    assert!(
        e.contains("recipients, more than the 64 berth reads"),
        "{e}"
    );
}

#[test]
fn an_openpgp_data_key_that_inflates_is_read_to_a_data_keys_size() {
    use pgp::composed::{ArmorOptions, Deserializable, MessageBuilder, SignedSecretKey};
    use pgp::crypto::sym::SymmetricKeyAlgorithm;
    use pgp::types::CompressionAlgorithm;
    let (secret, _) = SignedSecretKey::from_string(&read("pgp-secret.asc")).unwrap();
    let public = secret.to_public_key();
    // 64 MiB of zeros, compressed to about 64 KiB: a data key sops would never write.
    let zeros = std::io::Read::take(std::io::repeat(0), 64 << 20);
    let mut builder = MessageBuilder::from_reader("", zeros);
    builder.compression(CompressionAlgorithm::ZLIB);
    let mut rng = rand::thread_rng();
    let mut builder = builder.seipd_v1(&mut rng, SymmetricKeyAlgorithm::AES256);
    builder
        .encrypt_to_key(&mut rng, &public.public_subkeys[0])
        .unwrap();
    let enc = builder
        .to_armored_string(&mut rng, ArmorOptions::default())
        .unwrap();
    let mut keys = Keys::default();
    keys.add_openpgp(&read("pgp-secret.asc"), None).unwrap();
    assert_eq!(open_openpgp(&enc, &keys).map(|k| k.len()), Some(1024));
}
