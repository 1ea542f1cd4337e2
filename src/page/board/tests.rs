use super::*;

fn app(name: &str, repo: &str) -> AppConfig {
    crate::config::test_app(&format!("name = \"{name}\"\nrepo = \"{repo}\""))
}

fn record(app: &str, outcome: Outcome) -> SyncRecord {
    SyncRecord {
        outcome,
        note: Some("rollout failed at abc1234".into()),
        ..SyncRecord::new("r1".into(), app, Trigger::Cli, Timestamp::now(), None)
    }
}

#[test]
fn a_change_grows_the_version_and_only_its_app_is_new_since() {
    let board = Board::default();
    board.set_apps(&[app("a", "/r"), app("b", "/r")], |_| None);
    let seen = *board.changed().borrow();
    board.syncing("a");
    let names = ["a".to_string(), "b".to_string()];
    assert_eq!(board.among(&names, None).len(), 2);
    let changed = board.among(&names, Some(seen));
    assert_eq!(changed.len(), 1);
    assert_eq!(changed[0].name, "a");
    assert_eq!(changed[0].state, State::Syncing);
    // The same state again is no change: no reader is woken.
    let now = *board.changed().borrow();
    board.progress("a", Some("apply"), "applying 3 objects");
    board.progress("a", Some("apply"), "applying 3 objects");
    assert_eq!(*board.changed().borrow(), now + 1);
}

#[test]
fn a_page_copies_its_apps_alone_and_counts_the_rest() {
    let board = Board::default();
    let apps: Vec<AppConfig> = (0..7).map(|i| app(&format!("app-{i}"), "/r")).collect();
    board.set_apps(&apps, |_| None);
    let (page, kept) = board.page(|a| a.name != "app-3", 2, 3);
    let names: Vec<&str> = page.iter().map(|a| a.name.as_str()).collect();
    assert_eq!(names, ["app-2", "app-4", "app-5"]);
    assert_eq!(kept, 6);
    assert_eq!(board.page(|_| true, 10, 3), (Vec::new(), 7));
}

#[test]
fn a_held_sync_keeps_the_last_record_and_says_why() {
    let board = Board::default();
    board.set_apps(&[app("a", "/r")], |_| Some(record("a", Outcome::Succeeded)));
    board.synced("a", &record("a", Outcome::Held), Timestamp::now());
    let a = board.app("a").unwrap();
    assert_eq!(a.last.unwrap().outcome, Outcome::Succeeded);
    assert_eq!(a.held.as_deref(), Some("rollout failed at abc1234"));
    assert_eq!(a.state, State::Idle);
}

#[test]
fn a_repository_token_is_never_shown() {
    let board = Board::default();
    board.set_apps(
        &[app("a", "https://bot:s3cr3t@git.example.com/shop.git")],
        |_| None,
    );
    let json = serde_json::to_string(&board.page(|_| true, 0, usize::MAX).0).unwrap();
    assert!(!json.contains("s3cr3t"), "{json}");
    assert!(json.contains("git.example.com/shop.git"), "{json}");
}

#[test]
fn removed_apps_leave_the_board() {
    let board = Board::default();
    board.set_apps(&[app("a", "/r"), app("b", "/r")], |_| None);
    board.set_apps(&[app("b", "/r")], |_| None);
    let names: Vec<String> = board
        .page(|_| true, 0, usize::MAX)
        .0
        .into_iter()
        .map(|a| a.name)
        .collect();
    assert_eq!(names, ["b"]);
}
