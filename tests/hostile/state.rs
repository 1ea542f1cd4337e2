//! berth's own state, damaged or planted: it fails closed. A suspension marker that is not
//! one still suspends; a pid file signals nothing but a running berth; a torn set state
//! removes nothing. And a freeze of a set holds against a push adding a folder.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;

use crate::common::{self, Repo, Setup};

fn config_map(name: &str, namespace: &str) -> String {
    format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  namespace: {namespace}\ndata: {{k: v}}\n")
}

/// A set over `addons/*` writing into `ns`, in `setup`'s state folder.
fn set_setup(cp: &berth_testenv::ControlPlane, repo: &Repo, ns: &str, set: &str) -> Setup {
    let setup = Setup::new(cp, "unused", repo, ns, "path = \"none\"\nsuspend = true\n");
    let text = std::fs::read_to_string(&setup.config).unwrap()
        + &format!(
            "[[app_set]]\nname = \"{set}\"\nrepo = \"{}\"\nfolders = \"addons/*\"\nnamespace = \"{ns}\"\nprune = true\n",
            repo.dir.path().display()
        );
    std::fs::write(&setup.config, text).unwrap();
    setup
}

/// Finding 6: `berth suspend --set` suspends the set, its apps present and future: a
/// commit adding a folder to a frozen set syncs nothing until the set is resumed.
#[tokio::test]
async fn a_suspended_set_holds_against_a_folder_added_later() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let ns = common::namespace(&client, "frozen-set").await;
    let set = format!("frozen{}", std::process::id() % 100_000);
    let repo = Repo::new();
    repo.write("addons/a/cm.yaml", &config_map("a", &ns));
    repo.commit("a");
    let setup = set_setup(cp, &repo, &ns, &set);
    let (code, out, err) = setup.berth(&["sync"]);
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, err) = setup.berth(&["suspend", "--set", &set]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains(&format!("app set {set} suspended")), "{out}");
    repo.write("addons/b/cm.yaml", &config_map("b", &ns));
    repo.commit("b, during the freeze");
    let (code, out, err) = setup.berth(&["sync"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains(&format!("{set}-b: suspended (with its app set {set} by ")),
        "{out}"
    );
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    assert!(maps.get_opt("b").await.unwrap().is_none(), "{out}");
    let (code, out, err) = setup.berth(&["resume", "--set", &set]);
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, err) = setup.berth(&["sync"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(maps.get_opt("b").await.unwrap().is_some(), "{out}");
}

/// Finding 11: a suspension marker that is a folder, or not text, suspends and says so.
#[tokio::test]
async fn a_suspension_marker_that_is_not_one_still_suspends() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let ns = common::namespace(&client, "odd-marker").await;
    let repo = Repo::new();
    repo.write("cm.yaml", &config_map("held-back", &ns));
    repo.commit("one");
    let app = format!("marker{}", std::process::id() % 100_000);
    let setup = Setup::new(cp, &app, &repo, &ns, "");
    let folder = setup.state.path().join("suspended");
    std::fs::create_dir_all(folder.join(&app)).unwrap();
    let (code, out, err) = setup.berth(&["sync"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("is not a plain file: taken as suspended"),
        "{out}{err}"
    );
    std::fs::remove_dir(folder.join(&app)).unwrap();
    std::fs::write(folder.join(&app), [0xff, 0xfe, 0x00]).unwrap();
    let (code, out, err) = setup.berth(&["sync"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("is not text: taken as suspended"),
        "{out}{err}"
    );
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    assert!(maps.get_opt("held-back").await.unwrap().is_none());
}

/// Finding 11: `berth reload` signals only a running berth. A pid file naming 0 (its own
/// process group: this test would die of the SIGHUP), -1 (every process), a process that
/// is not berth, or a link, is refused.
#[test]
fn reload_signals_nothing_but_a_running_berth() {
    let state = tempfile::tempdir().unwrap();
    let config = state.path().join("berth.toml");
    std::fs::write(
        &config,
        format!(
            "[agent]\nstate_dir = \"{}\"\n[cluster]\n",
            state.path().display()
        ),
    )
    .unwrap();
    let pid_file = state.path().join("berth.pid");
    let reload = || {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_berth"))
            .args(["reload", "--config"])
            .arg(&config)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    for (pid, said) in [
        ("0", "does not hold a pid"),
        ("-1", "does not hold a pid"),
        ("1", "does not hold a pid"),
        (&std::process::id().to_string(), "which is not berth"),
    ] {
        std::fs::write(&pid_file, pid).unwrap();
        let (code, err) = reload();
        assert_eq!(code, Some(1), "{pid}: {err}");
        assert!(err.contains(said), "{pid}: {err}");
    }
    let elsewhere = state.path().join("elsewhere");
    std::fs::write(&elsewhere, std::process::id().to_string()).unwrap();
    std::fs::remove_file(&pid_file).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &pid_file).unwrap();
    let (code, err) = reload();
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("cannot be read"), "{err}");
}

/// Finding 11: a torn `sets/<set>.json`, while the set cannot be listed, removes nothing
/// and says so on every listing until it is listed again.
#[tokio::test]
async fn a_torn_set_state_removes_nothing_and_says_so() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let ns = common::namespace(&client, "torn-set").await;
    let set = format!("torn{}", std::process::id() % 100_000);
    let repo = Repo::new();
    repo.write("addons/a/cm.yaml", &config_map("kept", &ns));
    repo.commit("a");
    let setup = set_setup(cp, &repo, &ns, &set);
    let (code, out, err) = setup.berth(&["sync"]);
    assert_eq!(code, 0, "{out}{err}");
    let state_file = setup.state.path().join(format!("sets/{set}.json"));
    std::fs::write(&state_file, "{\"commit\": \"torn").unwrap();
    // The repository is gone for a while: the set cannot be listed either.
    let moved = repo.dir.path().with_extension("away");
    std::fs::rename(repo.dir.path(), &moved).unwrap();
    for _ in 0..2 {
        let (code, out, err) = setup.berth(&["sync"]);
        assert_eq!(code, 1, "{out}{err}");
        let said = format!("{out}{err}");
        assert!(
            said.contains("is not one (")
                && said.contains("none is removed until it is listed again"),
            "{said}"
        );
    }
    std::fs::rename(&moved, repo.dir.path()).unwrap();
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    assert!(maps.get_opt("kept").await.unwrap().is_some());
    let (code, out, err) = setup.berth(&["sync"]);
    assert_eq!(code, 0, "listed again, the state mended: {out}{err}");
    assert!(std::fs::read_to_string(&state_file)
        .unwrap()
        .contains("addons/a"));
}
