use super::*;
use crate::manifest::ObjectKey;
use crate::plan::Entry;

#[test]
fn text_is_split_at_character_boundaries_and_joins_back() {
    assert_eq!(split("", 4), vec![""]);
    assert_eq!(split("abcd", 4), vec!["abcd"]);
    assert_eq!(split("abcdefghij", 4), vec!["abcd", "efgh", "ij"]);
    let text = "aé€😀z".repeat(50);
    let pieces = split(&text, 7);
    assert!(pieces.iter().all(|p| p.len() <= 7 && !p.is_empty()));
    assert_eq!(pieces.concat(), text);
}

#[test]
fn the_local_copy_round_trips_and_is_replaced_whole() {
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(load_local(dir.path(), "shop"), None);
    let mut inv = Inventory {
        commit: Some("c1".into()),
        ..Inventory::default()
    };
    inv.objects.push(Entry {
        key: ObjectKey {
            group: String::new(),
            kind: "ConfigMap".into(),
            namespace: Some("shop".into()),
            name: "a".into(),
        },
        api_version: "v1".into(),
        digest: "d".into(),
        observed: "1".into(),
    });
    store_local(dir.path(), "shop", &inv).unwrap();
    assert_eq!(load_local(dir.path(), "shop"), Some(inv.clone()));
    inv.objects.clear();
    store_local(dir.path(), "shop", &inv).unwrap();
    assert_eq!(load_local(dir.path(), "shop"), Some(inv));
    std::fs::write(local_path(dir.path(), "shop"), "{torn").unwrap();
    assert_eq!(load_local(dir.path(), "shop"), None, "unreadable: no copy");
}
