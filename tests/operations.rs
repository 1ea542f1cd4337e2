//! Running berth for weeks, for a team (issue 44): the state folder shared with a one-off
//! run, repositories owned by someone else, outages, namespaces, held apps, signals and
//! reloads — against the real control plane where the cluster is involved.

mod common;

use common::{Repo, Setup};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;

fn config_map(name: &str, value: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n  value: \"{value}\"\n"
    )
}

/// A relative `state_dir` is the configuration file's folder's, wherever berth starts.
#[tokio::test]
async fn a_relative_state_dir_is_read_from_the_configuration_files_folder() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let ns = common::namespace(&client, "relative").await;
    let repo = Repo::new();
    repo.write("a.yaml", &config_map("a", "1"));
    repo.commit("first");
    let setup = Setup::new(cp, "relative", &repo, &ns, "");
    let text = std::fs::read_to_string(&setup.config).unwrap();
    let text = text.replace(
        &format!("state_dir = \"{}\"", setup.state.path().display()),
        "state_dir = \"state\"",
    );
    std::fs::write(&setup.config, text).unwrap();
    let elsewhere = tempfile::tempdir().unwrap();

    let out = std::process::Command::new(env!("CARGO_BIN_EXE_berth"))
        .args(["sync", "--config"])
        .arg(&setup.config)
        .current_dir(elsewhere.path())
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(0), "{text}");
    let maps: Api<ConfigMap> = Api::namespaced(client, &ns);
    assert!(maps.get_opt("a").await.unwrap().is_some());
    let history = berth::history::HistoryLog::new(&setup.state.path().join("state"));
    assert_eq!(history.read("relative").unwrap().len(), 1);
    assert!(std::fs::read_dir(elsewhere.path())
        .unwrap()
        .next()
        .is_none());
}
