//! Where a repeated key is: the lines of a block mapping that hold it, for the error that
//! names them (the decoder reports where the mapping starts, not where the key repeats).

/// The lines (1-based) where `key` appears as a key of the block mapping whose first key
/// is at `line`, `column` (1-based, as the parser reports a mapping's start): the lines a
/// duplicate-key error names. Flow mappings and keys this cannot find give fewer lines.
pub fn key_lines(text: &str, line: usize, column: usize, key: &str) -> Vec<usize> {
    let indent = column.saturating_sub(1);
    let is_key = |rest: &str| {
        [
            format!("{key}:"),
            format!("\"{key}\":"),
            format!("'{key}':"),
        ]
        .iter()
        .any(|k| {
            rest.strip_prefix(k.as_str())
                .is_some_and(|r| r.is_empty() || r.starts_with([' ', '\t']))
        })
    };
    let mut found = Vec::new();
    for (n, l) in text
        .lines()
        .enumerate()
        .skip(line.saturating_sub(1))
        .map(|(i, l)| (i + 1, l))
    {
        let content = l.trim_start();
        let at = l.len() - content.len();
        if content.is_empty() || content.starts_with('#') {
            continue;
        }
        // The mapping's first line may start mid-line (`- name: a`); the others at its column.
        let rest = match (n == line, at.cmp(&indent)) {
            (true, _) => l.get(indent..).unwrap_or(""),
            (false, std::cmp::Ordering::Less) => break,
            (false, std::cmp::Ordering::Equal) => content,
            (false, std::cmp::Ordering::Greater) => continue,
        };
        if is_key(rest) {
            found.push(n);
        }
    }
    found
}
