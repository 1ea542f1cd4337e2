use std::time::Duration;

use super::*;

const MINIMAL: &str = r#"
[[app]]
name = "guestbook"
repo = "https://example.com/guestbook.git"
"#;

fn parse_err(text: &str) -> String {
    parse(text).expect_err("should not parse").to_string()
}

#[test]
fn a_new_configuration_holds_its_unchanged_apps_by_the_running_copy() {
    let text = |prune: bool| {
        format!("{MINIMAL}\n[[app]]\nname = \"shop\"\nrepo = \"/r\"\nprune = {prune}\n")
    };
    let running = parse(&text(true)).unwrap();
    let mut new = parse(&text(false)).unwrap();
    new.share_apps(&running);
    assert!(
        Arc::ptr_eq(&new.apps[0], &running.apps[0]),
        "guestbook unchanged: shared"
    );
    assert!(
        !Arc::ptr_eq(&new.apps[1], &running.apps[1]),
        "shop changed: its own"
    );
    assert!(!new.apps[1].prune);
}

fn invalid(text: &str) -> String {
    parse(text)
        .expect("parses")
        .validate()
        .expect_err("should not validate")
        .to_string()
}

#[test]
fn decrypt_keys_may_be_credentials_and_some_key_is_needed() {
    let c = parse(&format!(
        "{MINIMAL}[app.decrypt]\nprovider = \"sops\"\nage_key_files = [\"credential:sops-age\", \"/etc/berth/age.key\"]\nallow_decrypted_in = [\"ConfigMap\"]\n"
    ))
    .unwrap();
    c.validate().unwrap();
    let d = c.apps[0].decrypt.as_ref().unwrap();
    assert_eq!(
        d.age_key_files[1],
        std::path::Path::new("/etc/berth/age.key")
    );
    assert!(d.age_key_files[0].ends_with("sops-age"));
    let none = invalid(&format!("{MINIMAL}[app.decrypt]\nprovider = \"sops\"\n"));
    assert!(
        none.contains("app[0].decrypt: give the keys that open the app's files"),
        "{none}"
    );
    let kind = invalid(&format!(
        "{MINIMAL}[app.decrypt]\nprovider = \"sops\"\nage_key_files = [\"k\"]\nallow_decrypted_in = [\"config map\"]\n"
    ));
    assert!(kind.contains("\"config map\" is not a kind"), "{kind}");
    let other = parse_err(&format!("{MINIMAL}[app.decrypt]\nprovider = \"vault\"\n"));
    assert!(other.contains("unknown variant `vault`"), "{other}");
}

#[test]
fn a_revision_to_plan_is_a_commit_a_tag_or_a_branch() {
    let app = &parse(MINIMAL).unwrap().apps[0];
    let sha = "0123456789ABCDEF0123456789abcdef01234567";
    assert_eq!(
        app.at_revision(sha).unwrap().git_ref(),
        GitRef::Commit("0123456789abcdef0123456789abcdef01234567")
    );
    assert_eq!(
        app.at_revision("tags/v1.2").unwrap().git_ref(),
        GitRef::Tag("v1.2")
    );
    assert_eq!(
        app.at_revision("refs/heads/feature/x").unwrap().git_ref(),
        GitRef::Branch("feature/x")
    );
    assert_eq!(
        app.at_revision("refs/pull/7/head").unwrap().git_ref(),
        GitRef::Ref("refs/pull/7/head")
    );
    let branch = app.at_revision("fix-db").unwrap();
    assert_eq!(branch.git_ref(), GitRef::Branch("fix-db"));
    assert!(
        branch.allow_rewind,
        "a branch forked before the applied commit"
    );
    for bad in ["", "-x", "a..b", "a b"] {
        assert!(app.at_revision(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn minimal_config_gets_defaults() {
    let c = parse(MINIMAL).unwrap();
    c.validate().unwrap();
    assert_eq!(c.agent.field_manager, "berth");
    assert_eq!(c.agent.interval, Duration::from_secs(60));
    assert_eq!(c.agent.max_file_size, 4 << 20);
    let app = &c.apps[0];
    assert_eq!(app.path, vec!["."]);
    assert_eq!(app.namespace, "default");
    assert!(!app.prune);
    assert_eq!(app.rollout.engine, RolloutEngine::Cluster);
    assert_eq!(app.rollout.on_failure, OnFailure::Rollback);
}

#[test]
fn the_shipped_example_config_is_valid_and_complete() {
    let text = include_str!("../../config/berth.toml");
    let c = parse(text).unwrap();
    c.validate().unwrap();
    let app = &c.apps[0];
    assert_eq!(app.rollout.timeout, Duration::from_secs(300));
    assert_eq!(c.agent, AgentConfig::default(), "documented defaults drift");
}

#[test]
fn the_status_page_off_loopback_needs_credentials() {
    let with = |agent: &str| format!("[agent]\nstatus_page = true\n{agent}\n{MINIMAL}");
    let e = invalid(&with("listen = \"0.0.0.0:9464\""));
    assert!(
        e.contains("agent.status_page: agent.listen (0.0.0.0:9464) is not a loopback address: set agent.status_page_credentials"),
        "{e}"
    );
    let e = invalid(&with("listen = \"off\""));
    assert!(e.contains("agent.listen, which is off"), "{e}");
    let e = invalid(&with("status_page_credentials_on_loopback = true"));
    assert!(
        e.contains("agent.status_page_credentials_on_loopback: is on, and agent.status_page_credentials is not set"),
        "{e}"
    );
    for fine in [
        "listen = \"127.0.0.1:9464\"",
        "listen = \"[::1]:9464\"",
        "listen = \"0.0.0.0:9464\"\nstatus_page_credentials = \"credential:status-page\"",
        "status_page_credentials_on_loopback = true\nstatus_page_credentials = \"credential:status-page\"",
    ] {
        parse(&with(fine)).unwrap().validate().unwrap();
    }
}

#[test]
fn unknown_key_names_its_path_and_line() {
    let e = parse_err(&format!("{MINIMAL}[app.rollout]\nengin = \"agent\"\n"));
    assert!(e.contains("app[0].rollout.engin"), "{e}");
    assert!(e.contains("unknown field"), "{e}");
    assert!(e.contains("did you mean `engine`?"), "{e}");
    assert!(e.starts_with("6:"), "{e}");
    // Nothing near: no guess.
    let e = parse_err(&format!("{MINIMAL}[app.rollout]\nzzzz = 1\n"));
    assert!(!e.contains("did you mean"), "{e}");
}

#[test]
fn dependencies_must_name_apps_and_not_go_round() {
    let app = |name: &str, deps: &str| {
        format!("[[app]]\nname = \"{name}\"\nrepo = \"/r\"\ndepends_on = {deps}\n")
    };
    let e = invalid(&format!(
        "{}{}{}",
        app("crds", "[\"operator\"]"),
        app("operator", "[\"crds\"]"),
        app("app", "[\"operatr\", \"app\"]")
    ));
    assert!(
        e.contains("app[0].depends_on: a dependency cycle: crds -> operator -> crds"),
        "{e}"
    );
    assert!(
        e.contains("app[2].depends_on: no app named \"operatr\" (apps: app, crds, operator)"),
        "{e}"
    );
    assert!(
        e.contains("app[2].depends_on: \"app\" is the app itself"),
        "{e}"
    );
    let fine = format!("{}{}", app("crds", "[]"), app("operator", "[\"crds\"]"));
    parse(&fine).unwrap().validate().unwrap();
}

#[test]
fn kube_versions_are_two_or_three_numbers() {
    for good in ["1.31", "v1.31", "v1.31.2", "1.9.0"] {
        assert!(is_kube_version(good), "{good}");
    }
    for bad in [
        "", "1", "v", "1.31.2.1", "1.x", "1..2", "v1.31-rc", "1.31 --x", "-1.2",
    ] {
        assert!(!is_kube_version(bad), "{bad}");
    }
}

#[test]
fn chart_repositories_and_kube_versions_must_be_what_they_say() {
    let config =
        |agent: &str, cluster: &str| format!("[agent]\n{agent}\n[cluster]\n{cluster}\n{MINIMAL}");
    parse(&config(
        "allow_remote_charts = [\"https://charts.example.com/stable\", \"http://127.0.0.1:8080\", \"oci://127.0.0.1:5000/charts\"]",
        "kube_version = \"v1.31.2\"",
    ))
    .unwrap()
    .validate()
    .unwrap();
    for url in [
        "charts.example.com",
        "file:///srv/charts",
        "https://",
        "https://u:p@h/",
        "oci://",
        "oci://u:p@r/c",
    ] {
        let e = invalid(&config(&format!("allow_remote_charts = [{url:?}]"), ""));
        assert!(
            e.contains("agent.allow_remote_charts") && e.contains("is not a chart repository URL"),
            "{url}: {e}"
        );
    }
    let e = invalid(&config("", "kube_version = \"latest\""));
    assert!(
        e.contains("cluster.kube_version: \"latest\" is not a Kubernetes version"),
        "{e}"
    );
}

#[test]
fn unknown_top_level_table_is_refused() {
    let e = parse_err("[agnet]\ninterval = \"1m\"\n");
    assert!(e.contains("agnet"), "{e}");
}

#[test]
fn bad_duration_names_key_and_explains() {
    let e = parse_err(&format!(
        "{MINIMAL}[app.rollout]\ntimeout = \"5 parsecs\"\n"
    ));
    assert!(e.contains("app[0].rollout.timeout"), "{e}");
    assert!(e.contains("invalid duration \"5 parsecs\""), "{e}");
}

#[test]
fn missing_required_key() {
    let e = parse_err("[[app]]\nrepo = \"x\"\n");
    assert!(
        e.contains("app[0]") && e.contains("missing field `name`"),
        "{e}"
    );
}

#[test]
fn bad_enum_value() {
    let e = parse_err(&format!("{MINIMAL}[app.rollout]\non_failure = \"panic\"\n"));
    assert!(e.contains("app[0].rollout.on_failure"), "{e}");
}

#[test]
fn duplicate_app_names() {
    let e = invalid(&format!("{MINIMAL}{MINIMAL}"));
    assert!(
        e.contains("app[1].name: duplicate app name \"guestbook\""),
        "{e}"
    );
}

#[test]
fn more_than_one_ref() {
    let e = invalid(&format!("{MINIMAL}branch = \"main\"\ntag = \"v1\"\n"));
    assert!(
        e.contains("at most one of branch, tag, commit and ref"),
        "{e}"
    );
    for (name, said) in [
        (
            "refs/heads/main",
            "is a branch or a tag: give branch or tag instead",
        ),
        ("pull/1/head", "is not a full ref name (refs/…)"),
        ("refs/pull/1/head..", "is not a full ref name (refs/…)"),
    ] {
        let e = invalid(&format!("{MINIMAL}ref = {name:?}\n"));
        assert!(e.contains(&format!("app[0].ref: {name:?} {said}")), "{e}");
    }
    let app = parse(&format!("{MINIMAL}ref = \"refs/pull/7/head\"\n")).unwrap();
    app.validate().unwrap();
    assert_eq!(app.apps[0].git_ref(), GitRef::Ref("refs/pull/7/head"));
}

#[test]
fn short_commit_is_refused() {
    let e = invalid(&format!("{MINIMAL}commit = \"abc1234\"\n"));
    assert!(e.contains("app[0].commit"), "{e}");
}

#[test]
fn escaping_paths_are_refused() {
    let e = invalid(&format!(
        "{MINIMAL}path = [\"deploy/../../etc\", \"/etc\"]\n"
    ));
    assert!(
        e.contains("\"deploy/../../etc\" escapes the repository root"),
        "{e}"
    );
    assert!(e.contains("\"/etc\" is absolute"), "{e}");
    assert!(check_repo_path("a/../b").is_ok());
}

#[test]
fn bad_app_name_and_glob() {
    let e = invalid("[[app]]\nname = \"Guest_Book\"\nrepo = \"x\"\ninclude = [\"a[\"]\n");
    assert!(e.contains("app[0].name"), "{e}");
    assert!(e.contains("app[0].include: invalid glob"), "{e}");
}

#[test]
fn sizes_accept_units_and_numbers() {
    assert_eq!(parse_byte_size("4MiB"), Some(4 << 20));
    assert_eq!(parse_byte_size("512 KiB"), Some(512 << 10));
    assert_eq!(parse_byte_size("1000"), Some(1000));
    assert_eq!(parse_byte_size("4 parsecs"), None);
    let c = parse("[agent]\nmax_file_size = 1024\nmax_app_size = \"1GiB\"\n").unwrap();
    assert_eq!(
        (c.agent.max_file_size, c.agent.max_app_size),
        (1024, 1 << 30)
    );
    let e = parse_err("[agent]\nmax_file_size = \"lots\"\n");
    assert!(
        e.contains("agent.max_file_size") && e.contains("invalid size"),
        "{e}"
    );
}

#[test]
fn path_may_be_a_single_string() {
    let c = parse(&format!("{MINIMAL}path = \"deploy\"\n")).unwrap();
    assert_eq!(c.apps[0].path, vec!["deploy"]);
}

#[test]
fn a_sets_file_settings_are_anchored_at_the_configuration_folder() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("berth.toml");
    let text = "[[app_set]]\nname = \"addons\"\nrepo = \"/r\"\nwebhook_secret_file = \"hooks/{set}\"\n[app_set.auth]\nknown_hosts = \"/etc/ssh/known\"\nssh_key_file = \"credential:deploy\"\n[app_set.decrypt]\nprovider = \"sops\"\nage_key_files = [\"keys/age\"]\n";
    std::fs::write(&path, text).unwrap();
    let c = load(&path).unwrap();
    let t = &c.app_sets[0].template;
    let folder = std::path::absolute(dir.path()).unwrap();
    let at = |p: &str| toml::Value::String(folder.join(p).display().to_string());
    assert_eq!(t["webhook_secret_file"], at("hooks/{set}"));
    assert_eq!(t["decrypt"]["age_key_files"][0], at("keys/age"));
    assert_eq!(t["auth"]["known_hosts"].as_str(), Some("/etc/ssh/known"));
    assert_eq!(
        t["auth"]["ssh_key_file"].as_str(),
        Some("credential:deploy")
    );
}

#[test]
fn load_names_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("berth.toml");
    std::fs::write(&path, format!("{MINIMAL}{MINIMAL}")).unwrap();
    let e = load(&path).unwrap_err().to_string();
    assert!(e.starts_with(&format!("{}:", path.display())), "{e}");
    let e = load(&dir.path().join("missing.toml"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("cannot read config file"), "{e}");
}

#[test]
fn image_policies_and_updates_are_checked() {
    let good = r#"
[[app]]
name = "shop"
repo = "https://git.example.com/shop.git"
[app.image_updates]
author = "berth <berth@example.com>"
[[image_policy]]
name = "shop"
image = "registry.example.com/team/shop"
semver = "^1.4"
[[image_policy]]
name = "builds"
image = "registry.example.com/team/shop"
order = "numerical"
extract = '^main-[a-f0-9]+-(?P<ts>[0-9]+)$'
"#;
    let config = parse(good).unwrap();
    config.validate().unwrap();
    assert_eq!(
        config.image_policy("builds").unwrap().interval.as_secs(),
        60
    );

    let bad = r#"
[[app]]
name = "shop"
repo = "https://git.example.com/shop.git"
tag = "v1"
[app.image_updates]
author = "berth"
[[image_policy]]
name = "Shop"
image = "shop"
semver = "^1.4"
order = "numerical"
extract = "("
interval = "1s"
"#;
    let err = parse(bad).unwrap().validate().unwrap_err().to_string();
    for said in [
        "app[0].image_updates.push_branch: the app follows a tag, a commit or a ref",
        "app[0].image_updates.author: \"berth\" is not an author",
        "image_policy[0].name: \"Shop\" is not a DNS label",
        "image_policy[0].image: \"shop\" names no registry",
        "image_policy[0].order: give semver or order, not both",
        "image_policy[0].extract: not a regular expression",
        "image_policy[0].interval: must be at least 10s",
    ] {
        assert!(err.contains(said), "{said} in {err}");
    }
}

#[test]
fn a_canary_names_its_checks_and_rises_to_100() {
    let canary = |steps: &str, analysis: &str| {
        format!("{MINIMAL}[app.rollout]\nstrategy = \"canary\"\nsteps = {steps}\n{analysis}")
    };
    let errors = "[[analysis]]\nname = \"errors\"\nprometheus = \"http://127.0.0.1:9090\"\nquery = 'sum(errors{version=\"{version}\"})'\nmax = 0.05\ninterval = \"5s\"\ncount = 3\n";
    let good = canary(
        r#"[{ weight = 20, pause = "30s", analysis = ["errors"] }, { weight = 50, analysis = ["errors"] }, { weight = 100 }]"#,
        errors,
    );
    let c = parse(&good).unwrap();
    c.validate().unwrap();
    let rollout = &c.apps[0].rollout;
    assert_eq!(rollout.strategy, Strategy::Canary);
    assert_eq!(
        rollout.steps[0].pause,
        Some(crate::config::Pause::For(Duration::from_secs(30)))
    );
    assert_eq!(rollout.steps[1].pause, None);
    assert_eq!(c.analyses[0].count, 3);
    assert_eq!(c.analyses[0].failure_limit, 0);

    let err = invalid(&canary(
        r#"[{ weight = 50, analysis = ["latency"] }, { weight = 20 }]"#,
        errors,
    ));
    assert!(
        err.contains("app[0].rollout: steps[0]: no [[analysis]] named \"latency\" (known: errors)"),
        "{err}"
    );
    let err = invalid(&canary("[{ weight = 50 }, { weight = 20 }]", ""));
    assert!(
        err.contains("steps[1]: weight 20 must be over the step before (50)"),
        "{err}"
    );
    let err = invalid(&canary("[{ weight = 50 }]", ""));
    assert!(err.contains("a canary ends at weight = 100"), "{err}");
    let err = invalid(&canary("[]", ""));
    assert!(err.contains("a canary needs steps"), "{err}");
    let err = invalid(&format!(
        "{MINIMAL}[app.rollout]\nsteps = [{{ weight = 100 }}]\n"
    ));
    assert!(err.contains("set strategy = \"canary\""), "{err}");
    let held = parse(&canary(
        r#"[{ weight = 50, pause = "promote" }, { weight = 100 }]"#,
        "",
    ))
    .unwrap();
    let pause = held.apps[0].rollout.steps[0].pause;
    assert_eq!(pause, Some(crate::config::Pause::UntilPromoted));
    let err = parse_err(&canary(
        r#"[{ weight = 50, pause = "soon" }, { weight = 100 }]"#,
        "",
    ));
    assert!(
        err.contains("invalid pause \"soon\"")
            && err.contains("or \"promote\" to hold the step until berth promote APP"),
        "{err}"
    );
    let blue_green =
        |keys: &str| format!("{MINIMAL}[app.rollout]\nstrategy = \"blue-green\"\n{keys}\n{errors}");
    let c = parse(&blue_green(
        "preview_service = \"web-preview\"\nactive_service = \"web\"\nanalysis = [\"errors\"]\nscale_down_delay = \"1m\"",
    ))
    .unwrap();
    c.validate().unwrap();
    assert_eq!(c.apps[0].rollout.scale_down_delay, Duration::from_secs(60));
    for (keys, said) in [
        (
            "active_service = \"web\"",
            "blue-green needs preview_service and active_service",
        ),
        (
            "preview_service = \"web\"\nactive_service = \"web\"",
            "are both \"web\": blue-green needs two Services",
        ),
        (
            "preview_service = \"p\"\nactive_service = \"a\"\nanalysis = [\"latency\"]",
            "analysis: no [[analysis]] named \"latency\"",
        ),
    ] {
        let err = invalid(&blue_green(keys));
        assert!(err.contains(said), "{said} in {err}");
    }
    let err = invalid(&canary("[{ weight = 100 }]\nactive_service = \"web\"", ""));
    assert!(
        err.contains("are blue-green's: set strategy = \"blue-green\""),
        "{err}"
    );
    let err = parse_err(&format!("{MINIMAL}[app.rollout]\nstrategy = \"linear\"\n"));
    assert!(err.contains("app[0].rollout.strategy"), "{err}");
    let err = invalid(&format!(
        "{MINIMAL}[[analysis]]\nname = \"a\"\nprometheus = \"http://p\"\n[[analysis]]\nname = \"a\"\nhttp = \"http://h\"\nquery = \"up\"\ncount = 0\n"
    ));
    for said in [
        "analysis[0].query: prometheus needs a query",
        "analysis[0].max: a query's result needs a bound: max or min",
        "analysis[1].name: duplicate analysis name \"a\"",
        "analysis[1].query: a query is asked of prometheus; an http check has none",
        "analysis[1].count: must be 1 or more",
    ] {
        assert!(err.contains(said), "{said} in {err}");
    }
    let err = invalid(&format!(
        "{MINIMAL}[[analysis]]\nname = \"smoke\"\njob = \"/etc/berth/smoke.yaml\"\nmax = 1.0\n[[analysis]]\nname = \"both\"\njob = \"/etc/berth/smoke.yaml\"\nhttp = \"http://h\"\n"
    ));
    for said in [
        "analysis[0].job: a Job check passes when its Job completes: it has no query, max, min or equals",
        "analysis[1].http: a check is one of prometheus, http or job",
    ] {
        assert!(err.contains(said), "{said} in {err}");
    }
}
