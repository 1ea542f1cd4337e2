//! Tests of the text scans: flow nesting counted as YAML's grammar has it, in linear
//! time, and both lines of a repeated key found.

use super::*;

#[test]
fn flow_depth_counts_flow_collections_only() {
    assert_eq!(flow_depth("a: [[[1]]]\n", 3), None);
    assert_eq!(flow_depth("a: [[[[1]]]]\n", 3), Some(1));
    assert_eq!(flow_depth("a:\n  b: {c: [\n  [[1]]]}\n", 3), Some(3));
    // Plain scalars, quotes, comments and block scalars hold brackets that are text.
    assert_eq!(flow_depth("a: b[[[[c\nd: '[[[[['\ne: \"{{{{\"\n", 3), None);
    assert_eq!(flow_depth("a: 1 # [[[[[[\n", 3), None);
    assert_eq!(flow_depth("a: |\n  [[[[[[\n  {{{{\nb: [1]\n", 3), None);
    assert_eq!(flow_depth("- [[[[\n", 3), Some(1));
    assert_eq!(flow_depth("a: \"x\\\"[[[[\"\n", 3), None);
    // An apostrophe inside a plain scalar opens no quote, in flow as in block.
    assert_eq!(flow_depth("data: [it's, [[[[\n", 3), Some(1));
    assert_eq!(flow_depth("data: [it\n  's, [[[[\n", 3), Some(2));
    assert_eq!(flow_depth("data: [a 'b, [[[[\n", 3), Some(1));
    assert_eq!(
        flow_depth("data: ['it''s', \"[[[[\", {k: '[[[['}]\n", 3),
        None
    );
    assert_eq!(flow_depth("{\"a\":\"[[[[\",\"b\":[\"{{{{\"]}\n", 3), None);
    assert_eq!(flow_depth("data: [a:\"b, [[[[\n", 3), Some(1));
}

#[test]
fn the_flow_bypass_is_refused_quickly() {
    let bomb = format!("data: [it's, {}\n", "[".repeat(200_000));
    let start = std::time::Instant::now();
    assert_eq!(flow_depth(&bomb, MAX_FLOW_DEPTH), Some(1));
    assert!(start.elapsed() < std::time::Duration::from_secs(1));
}

#[test]
fn flow_depth_is_linear() {
    let deep = format!("a: {}{}\n", "[".repeat(1_000_000), "]".repeat(1_000_000));
    let start = std::time::Instant::now();
    assert_eq!(flow_depth(&deep, MAX_FLOW_DEPTH), Some(1));
    assert!(start.elapsed() < std::time::Duration::from_secs(1));
}

#[test]
fn key_lines_find_both_keys_of_a_block_mapping() {
    let text = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n  labels: {}\n  name: b\ndata: {}\n";
    assert_eq!(key_lines(text, 4, 3, "name"), vec![4, 6]);
    assert_eq!(key_lines(text, 1, 1, "kind"), vec![2]);
}
