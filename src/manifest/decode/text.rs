//! A file's bytes as text (UTF-8, or UTF-16 after a byte-order mark), and the line
//! where each of its YAML documents starts.

use std::borrow::Cow;

use super::ManifestError;

/// UTF-8 (a byte-order mark is dropped), or UTF-16 when it starts with a byte-order mark.
pub(super) fn decode_text<'a>(path: &str, bytes: &'a [u8]) -> Result<Cow<'a, str>, ManifestError> {
    let utf16 = |units: Vec<u16>| {
        String::from_utf16(&units).map_err(|_| ManifestError::NotUtf8 {
            path: path.to_string(),
            line: 1,
            byte: 0,
        })
    };
    let pairs = |b: &[u8], le: bool| -> Vec<u16> {
        b.chunks_exact(2)
            .map(|c| {
                if le {
                    u16::from_le_bytes([c[0], c[1]])
                } else {
                    u16::from_be_bytes([c[0], c[1]])
                }
            })
            .collect()
    };
    match bytes {
        [0xEF, 0xBB, 0xBF, rest @ ..] => utf8(path, rest),
        [0xFF, 0xFE, rest @ ..] => utf16(pairs(rest, true)).map(Cow::Owned),
        [0xFE, 0xFF, rest @ ..] => utf16(pairs(rest, false)).map(Cow::Owned),
        _ => utf8(path, bytes),
    }
}

/// The bytes as UTF-8, or the line and byte where they stop being it.
fn utf8<'a>(path: &str, bytes: &'a [u8]) -> Result<Cow<'a, str>, ManifestError> {
    std::str::from_utf8(bytes)
        .map(Cow::Borrowed)
        .map_err(|e| ManifestError::NotUtf8 {
            path: path.to_string(),
            line: bytes[..e.valid_up_to()]
                .iter()
                .filter(|&&b| b == b'\n')
                .count()
                + 1,
            byte: e.valid_up_to(),
        })
}

/// The 1-based line where each YAML document starts (its first content line), in the
/// order libyaml yields them: a `---` marker opens a document, and so does content
/// outside one; `...` closes one.
pub(super) fn document_lines(text: &str) -> Vec<usize> {
    let mut starts = Vec::new();
    let mut in_document = false;
    let mut at_marker = false;
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        if line == "---" || line.starts_with("--- ") || line.starts_with("---\t") {
            starts.push(n);
            in_document = true;
            at_marker = line.trim_end() == "---";
            continue;
        }
        if line.trim_end() == "..." {
            in_document = false;
            continue;
        }
        let trimmed = line.trim();
        let content = !trimmed.is_empty() && !trimmed.starts_with('#') && !line.starts_with('%');
        if !content {
            continue;
        }
        if !in_document {
            starts.push(n);
            in_document = true;
        } else if at_marker {
            if let Some(last) = starts.last_mut() {
                *last = n;
            }
        }
        at_marker = false;
    }
    starts
}
