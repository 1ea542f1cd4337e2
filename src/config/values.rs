//! Values written as text in the TOML: durations (`30s`), sizes (`4MiB`), the endpoint's
//! address (or `off`), and one path or a list of them.
use std::net::SocketAddr;
use std::time::Duration;

use serde::{Deserialize, Deserializer};

pub(super) fn listen<'de, D: Deserializer<'de>>(d: D) -> Result<Option<SocketAddr>, D::Error> {
    let text = String::deserialize(d)?;
    if text == "off" {
        return Ok(None);
    }
    text.parse().map(Some).map_err(|_| {
        serde::de::Error::custom(format!(
            "{text:?} is not an address like 127.0.0.1:9464 (or \"off\")"
        ))
    })
}

pub(super) fn duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let text = String::deserialize(d)?;
    humantime::parse_duration(&text).map_err(|e| {
        serde::de::Error::custom(format!(
            "invalid duration {text:?} ({e}): write a number and a unit, like 30s, 5m or 1h"
        ))
    })
}

#[derive(Deserialize)]
#[serde(untagged)]
enum SizeValue {
    Bytes(u64),
    Text(String),
}

pub(super) fn byte_size<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    match SizeValue::deserialize(d)? {
        SizeValue::Bytes(n) => Ok(n),
        SizeValue::Text(t) => parse_byte_size(&t).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "invalid size {t:?}: write bytes or a number and a unit, like 512KiB or 4MiB"
            ))
        }),
    }
}

/// Parses `4MiB`, `512 KiB`, `10MB` or a plain number of bytes.
pub fn parse_byte_size(text: &str) -> Option<u64> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let n: u64 = number.parse().ok()?;
    let factor: u64 = match unit.trim() {
        "" | "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        "KB" | "kB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        _ => return None,
    };
    n.checked_mul(factor)
}

/// A size as a person writes it: `1GiB`, `300MiB`, `12KiB`, or bytes when it is no whole
/// number of those.
pub fn show_size(bytes: u64) -> String {
    for (unit, factor) in [("GiB", 1u64 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)] {
        if bytes >= factor && bytes.is_multiple_of(factor) {
            return format!("{}{unit}", bytes / factor);
        }
    }
    format!("{bytes} bytes")
}

#[derive(Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

pub(super) fn one_or_many<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    Ok(match OneOrMany::deserialize(d)? {
        OneOrMany::One(s) => vec![s],
        OneOrMany::Many(v) => v,
    })
}
