//! Git: a branch moved back to an older (signed) commit is a replay, refused unless the
//! operator accepts it; annotated tags sync, and with `mode = "tag"` the tag's own
//! signature is what counts.

use berth::history::Outcome;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;

use crate::common::gpg::Gpg;
use crate::common::{self, Repo, Setup};

fn config_map(value: &str) -> String {
    format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: release\ndata:\n  value: \"{value}\"\n")
}

async fn value(client: &kube::Client, ns: &str) -> Option<String> {
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    maps.get_opt("release").await.ok()??.data?.remove("value")
}

#[tokio::test]
async fn a_branch_moved_back_to_an_older_commit_is_refused() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let ns = common::namespace(&client, "rewind").await;
    let repo = Repo::new();
    repo.write("cm.yaml", &config_map("v1"));
    let first = repo.commit("v1");
    repo.write("cm.yaml", &config_map("v2"));
    repo.commit("v2");
    let setup = Setup::new(cp, "rewind", &repo, &ns, "");
    let (code, out, err) = setup.berth(&["sync"]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(value(&client, &ns).await.as_deref(), Some("v2"));

    // The attacker force-pushes the branch back to the older (once good) commit.
    repo.git(&["reset", "-q", "--hard", &first]);
    let (code, out, err) = setup.berth(&["sync"]);
    assert_eq!(code, 1, "{out}{err}");
    let said = format!("{out}{err}");
    assert!(
        said.contains("is not an ancestor of")
            && said.contains("refusing to apply it over the newer commit")
            && said.contains("berth sync --accept-rewind rewind"),
        "{said}"
    );
    assert_eq!(
        value(&client, &ns).await.as_deref(),
        Some("v2"),
        "nothing written"
    );
    let record = setup.history().pop().unwrap();
    assert_eq!(record.outcome, Outcome::Failed);
    assert!(record.history_rewritten.is_some());
    let (_, history, _) = setup.berth(&["history", "rewind"]);
    assert!(history.lines().count() >= 3, "{history}");

    // The operator means it, once.
    let (code, out, err) = setup.berth(&["sync", "--accept-rewind"]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(value(&client, &ns).await.as_deref(), Some("v1"));

    // Or for good: allow_rewind = true.
    repo.write("cm.yaml", &config_map("v3"));
    repo.commit("v3");
    let (code, out, err) = setup.berth(&["sync"]);
    assert_eq!(code, 0, "{out}{err}");
    repo.git(&["reset", "-q", "--hard", &first]);
    // The configuration ends in the app's table.
    let text = std::fs::read_to_string(&setup.config).unwrap();
    std::fs::write(&setup.config, format!("{text}allow_rewind = true\n")).unwrap();
    let (code, out, err) = setup.berth(&["sync"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("warning: previous commit"), "{out}");
    assert_eq!(value(&client, &ns).await.as_deref(), Some("v1"));
}

#[tokio::test]
async fn annotated_tags_sync_and_a_signed_tag_vouches_for_its_commit() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let ns = common::namespace(&client, "tagged").await;
    let keys = tempfile::tempdir().unwrap();
    let gpg = Gpg::new();
    let trusted = gpg.key("Release <release@example.com>", "1y", None);
    let stranger = gpg.key("Stranger <stranger@example.com>", "1y", None);
    gpg.export(&trusted, &keys.path().join("release.asc"));
    let program = gpg.program(None);
    let program = program.to_str().unwrap();

    let repo = Repo::new();
    repo.write("cm.yaml", &config_map("tagged"));
    repo.commit("unsigned commit");
    repo.git(&["tag", "-a", "annotated", "-m", "plain annotated tag"]);
    let tag = |name: &str, key: &str| {
        repo.git(&[
            "-c",
            &format!("gpg.program={program}"),
            "tag",
            "-s",
            "-u",
            key,
            name,
            "-m",
            name,
        ]);
    };
    tag("signed", &trusted);
    tag("by-stranger", &stranger);
    repo.git(&["tag", "lightweight"]);

    // An annotated tag syncs (it named a tag object, not a commit).
    let setup = Setup::new(cp, "tagged", &repo, &ns, "tag = \"annotated\"");
    let (code, out, err) = setup.berth(&["sync"]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(value(&client, &ns).await.as_deref(), Some("tagged"));

    // mode = "tag": the tag's signature by a trusted key counts for the unsigned commit.
    let verify = |tag: &str| {
        format!(
            "tag = \"{tag}\"\n[app.verify]\nmode = \"tag\"\nopenpgp_keys = [\"{}/release.asc\"]",
            keys.path().display()
        )
    };
    let setup = Setup::new(cp, "tagged", &repo, &ns, &verify("signed"));
    let (code, out, err) = setup.berth(&["sync"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("signed by Release <release@example.com>"),
        "{out}"
    );
    for (tag, says) in [
        ("by-stranger", "which is not trusted"),
        (
            "lightweight",
            "tag lightweight is not a signed annotated tag",
        ),
        ("annotated", "tag annotated is not a signed annotated tag"),
    ] {
        let setup = Setup::new(cp, "tagged", &repo, &ns, &verify(tag));
        let (code, out, err) = setup.berth(&["sync"]);
        assert_eq!(code, 1, "{tag}: {out}{err}");
        assert!(format!("{out}{err}").contains(says), "{tag}: {out}{err}");
    }
}
