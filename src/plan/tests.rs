//! Tests of planning: what is written, kept, deferred and pruned, the next inventory,
//! write-ahead and adoption.
use super::*;

use crate::manifest::Origin;
use kube::api::ApiResource;

/// The whole plan at once: [`draft`], then [`Draft::settle`].
fn plan(
    manifests: Vec<Manifest>,
    resolve: impl Fn(&Manifest) -> Option<Resolved>,
    inventory: &Inventory,
    live: &HashMap<ObjectKey, LiveObject>,
) -> Result<Plan, Vec<UnknownKind>> {
    Ok(draft(manifests, resolve, inventory)?.settle(inventory, live))
}

fn cm(name: &str, data: &str) -> Manifest {
    Manifest {
        decrypted: Vec::new(),
        object: serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "shop"}, "data": {"k": data}
        }))
        .unwrap(),
        origin: Origin::file("cm.yaml"),
    }
}

fn resolve(m: &Manifest) -> Option<Resolved> {
    (m.kind() == "ConfigMap").then(|| Resolved {
        resource: ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&()),
        namespaced: true,
    })
}

fn entry(m: &Manifest, observed: &str) -> Entry {
    Entry {
        key: m.key(),
        api_version: "v1".into(),
        digest: digest(m),
        observed: observed.into(),
    }
}

fn live(entries: &[(&Manifest, &str)]) -> HashMap<ObjectKey, LiveObject> {
    entries
        .iter()
        .map(|(m, o)| {
            (
                m.key(),
                LiveObject {
                    observed: o.to_string(),
                    keep: false,
                    uid: None,
                    asked_by_another: None,
                },
            )
        })
        .collect()
}

#[test]
fn classifies_new_changed_drifted_same_and_prune() {
    let (same, changed, drifted, deleted, gone) = (
        cm("same", "1"),
        cm("changed", "1"),
        cm("drifted", "1"),
        cm("deleted", "1"),
        cm("gone", "1"),
    );
    let inventory = Inventory {
        commit: Some("abc".into()),
        objects: vec![
            entry(&same, "rv1"),
            entry(&changed, "rv2"),
            entry(&drifted, "rv3"),
            entry(&deleted, "rv4"),
            entry(&gone, "rv5"),
        ],
        held: None,
        ready: None,
        failed: false,
        origin: None,
        pre_hooks_ran: None,
    };
    let live = live(&[
        (&same, "rv1"),
        (&changed, "rv2"),
        (&drifted, "rv9"),
        (&gone, "rv5"),
    ]);
    let manifests = vec![
        same.clone(),
        cm("changed", "2"),
        drifted.clone(),
        deleted.clone(),
        cm("new", "1"),
    ];
    let read: Vec<String> = draft(manifests.clone(), resolve, &inventory)
        .unwrap()
        .unchanged()
        .map(|t| t.manifest.name().to_string())
        .collect();
    assert_eq!(
        read,
        ["same", "drifted", "deleted"],
        "only these are looked up"
    );
    let p = plan(manifests, resolve, &inventory, &live).unwrap();
    let changes: Vec<(&str, &Change)> = p
        .planned
        .iter()
        .map(|x| (x.target.manifest.name(), &x.change))
        .collect();
    assert_eq!(changes[0], ("same", &Change::Same));
    assert_eq!(changes[1], ("changed", &Change::Changed));
    assert!(matches!(changes[2], ("drifted", Change::Drifted(_))));
    assert_eq!(
        changes[3],
        (
            "deleted",
            &Change::Drifted("deleted from the cluster".into())
        )
    );
    assert_eq!(changes[4], ("new", &Change::New));
    assert_eq!(
        p.prune
            .iter()
            .map(|e| e.key.name.as_str())
            .collect::<Vec<_>>(),
        ["gone"]
    );
    assert!(!p.is_no_op());
}

#[test]
fn unchanged_commit_is_a_no_op() {
    let a = cm("a", "1");
    let inventory = Inventory {
        commit: None,
        objects: vec![entry(&a, "rv1")],
        held: None,
        ready: None,
        failed: false,
        origin: None,
        pre_hooks_ran: None,
    };
    let p = plan(vec![a.clone()], resolve, &inventory, &live(&[(&a, "rv1")])).unwrap();
    assert!(p.is_no_op());
}

#[test]
fn unknown_kinds_fail_unless_a_crd_of_the_commit_defines_them() {
    let widget = Manifest {
        decrypted: Vec::new(),
        object: serde_json::from_value(serde_json::json!({
            "apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}))
        .unwrap(),
        origin: Origin::file("w.yaml"),
    };
    let errors = plan(
        vec![widget.clone()],
        resolve,
        &Inventory::default(),
        &HashMap::new(),
    )
    .unwrap_err();
    assert!(
        errors[0]
            .to_string()
            .contains("w.yaml: unknown kind Widget in example.com/v1"),
        "{}",
        errors[0]
    );
    let crd = Manifest {
        decrypted: Vec::new(),
        object: serde_json::from_value(serde_json::json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.com"},
            "spec": {"group": "example.com", "scope": "Namespaced", "names": {"kind": "Widget"}}}))
        .unwrap(),
        origin: Origin::file("crd.yaml"),
    };
    let with_crds = |m: &Manifest| {
        resolve(m).or_else(|| {
            (m.kind() == "CustomResourceDefinition").then(|| Resolved {
                resource: ApiResource::erase::<k8s_openapi::api::core::v1::Namespace>(&()),
                namespaced: false,
            })
        })
    };
    let p = plan(
        vec![crd, widget],
        with_crds,
        &Inventory::default(),
        &HashMap::new(),
    )
    .unwrap();
    assert_eq!(p.planned.len(), 1);
    assert_eq!(p.deferred[0].name(), "w");
}

#[test]
fn split_keeps_the_unchanged_apart() {
    let (a, b) = (cm("a", "1"), cm("b", "1"));
    let planned = |m: &Manifest, change| Planned {
        target: Target {
            manifest: m.clone(),
            resolved: resolve(m).unwrap(),
        },
        change,
        digest: digest(m),
        live: None,
    };
    let (same, changed) = split(vec![planned(&a, Change::Same), planned(&b, Change::New)]);
    assert_eq!(same, [a.key()]);
    assert_eq!(changed.len(), 1);
    assert_eq!(changed[0].target.manifest.key(), b.key());
}

#[test]
fn next_inventory_after_a_complete_and_a_failed_apply() {
    let (kept, written, dropped) = (cm("kept", "1"), cm("written", "2"), cm("dropped", "1"));
    let old = Inventory {
        commit: Some("old".into()),
        objects: vec![
            entry(&kept, "rv1"),
            entry(&written, "rv1"),
            entry(&dropped, "rv1"),
        ],
        held: Some(Held {
            commit: "old".into(),
            reason: "rolled back".into(),
        }),
        ready: None,
        failed: false,
        origin: None,
        pre_hooks_ran: None,
    };
    let fresh = entry(&written, "rv9");

    // Complete: the unchanged and the written; the rest (prune candidates) go; not held.
    let next = next_inventory(&old, Some(&[kept.key()]), vec![fresh.clone()]);
    assert_eq!(next.objects, [entry(&kept, "rv1"), fresh.clone()]);
    assert_eq!(next.held, None);
    assert_eq!(
        next.commit.as_deref(),
        Some("old"),
        "the caller sets the new commit"
    );

    // Failed part way: nothing forgotten, what was written updated, held as it was.
    let next = next_inventory(&old, None, vec![fresh.clone()]);
    assert_eq!(
        next.objects,
        [entry(&kept, "rv1"), entry(&dropped, "rv1"), fresh]
    );
    assert_eq!(next.held, old.held);
}

#[test]
fn unfinished_entries_go_back_to_what_they_were_before_the_sync() {
    let (a, b, c) = (cm("a", "1"), cm("b", "1"), cm("c", "1"));
    let old = Inventory {
        commit: Some("c1".into()),
        objects: vec![entry(&a, "5"), entry(&c, "5")],
        held: None,
        ready: None,
        failed: false,
        origin: None,
        pre_hooks_ran: None,
    };
    let next = Inventory {
        commit: Some("c2".into()),
        objects: vec![entry(&a, "6"), entry(&b, "6"), entry(&c, "6")],
        held: None,
        ready: None,
        failed: false,
        origin: None,
        pre_hooks_ran: None,
    };
    let out = unfinished(&next, &old, &[a.key(), b.key()]);
    assert_eq!(
        out.commit.as_deref(),
        Some("c1"),
        "the last commit applied whole"
    );
    assert_eq!(out.objects[0].digest, UNFINISHED);
    assert_eq!(
        out.objects[0].observed, old.objects[0].observed,
        "as before"
    );
    assert_eq!(
        (
            out.objects[1].digest.as_str(),
            out.objects[1].observed.as_str()
        ),
        (PENDING, ""),
        "new in this sync: pending"
    );
    assert_eq!(out.objects[2], next.objects[2], "finished: as written");
}

#[test]
fn write_ahead_adds_pending_entries_for_new_objects_only() {
    let (a, b) = (cm("a", "1"), cm("b", "1"));
    let old = Inventory {
        commit: Some("c1".into()),
        objects: vec![entry(&a, "5")],
        held: None,
        ready: None,
        failed: false,
        origin: None,
        pre_hooks_ran: None,
    };
    let targets: Vec<Target> = [cm("a", "2"), b.clone()]
        .into_iter()
        .map(|m| Target {
            resolved: resolve(&m).unwrap(),
            manifest: m,
        })
        .collect();
    let ahead = write_ahead(&old, targets.iter().map(|t| (t, true)));
    assert_eq!(
        ahead.objects[0], old.objects[0],
        "held entries are untouched"
    );
    assert_eq!(ahead.objects.len(), 2);
    assert_eq!(ahead.objects[1].key, b.key());
    assert_eq!(ahead.objects[1].digest, PENDING);
    assert_eq!(ahead.commit, old.commit);
    assert_eq!(
        write_ahead(&ahead, targets.iter().map(|t| (t, true))),
        ahead,
        "nothing new: unchanged"
    );
}

#[test]
fn adopt_keeps_what_is_held_and_adds_the_rest() {
    let (a, b) = (cm("a", "1"), cm("b", "1"));
    let mut inv = Inventory {
        objects: vec![entry(&a, "5")],
        ..Inventory::default()
    };
    let added = inv.adopt([entry(&a, "9"), entry(&b, "7")]);
    assert_eq!(added, 1);
    assert_eq!(inv.objects, vec![entry(&a, "5"), entry(&b, "7")]);
}

#[test]
fn an_object_another_app_owns_is_taken_only_when_both_share_it() {
    let mine = cm("settings", "1");
    let mut marked = cm("shared", "1");
    marked.set_meta_entry("annotations", ANNOTATION_SHARED, "true");
    let draft = draft(
        vec![mine.clone(), marked.clone()],
        resolve,
        &Inventory::default(),
    )
    .unwrap();
    let owner = |shared| OtherOwner {
        app: "other".into(),
        shared,
        claim: crate::plan::Claim::Label,
    };
    let owners = HashMap::from([(mine.key(), owner(true)), (marked.key(), owner(true))]);
    let refused: Vec<String> = taken(draft.new_targets(), &owners)
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert!(
        refused[0].starts_with("cm.yaml: ConfigMap shop/settings belongs to app other"),
        "{refused:?}"
    );
    // Marked here but not on the live object: refused too.
    let owners = HashMap::from([(marked.key(), owner(false))]);
    assert_eq!(taken(draft.new_targets(), &owners).len(), 1);
}

#[test]
fn a_deployment_written_ahead_is_unfinished_until_the_sync_stores_its_end() {
    let web = Manifest {
        decrypted: Vec::new(),
        object: serde_json::from_value(serde_json::json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "shop"}, "spec": {"replicas": 1}
        }))
        .unwrap(),
        origin: Origin::file("web.yaml"),
    };
    let old = Inventory {
        commit: Some("c1".into()),
        objects: vec![entry(&web, "3")],
        ..Inventory::default()
    };
    let target = Target {
        resolved: Resolved {
            resource: ApiResource::erase::<k8s_openapi::api::apps::v1::Deployment>(&()),
            namespaced: true,
        },
        manifest: web,
    };
    let ahead = write_ahead(&old, [(&target, true)]);
    assert_eq!(ahead.objects[0].digest, UNFINISHED);
    assert_eq!(
        ahead.objects[0].observed, "3",
        "its rollout is still told apart"
    );
    assert_eq!(ahead.commit, old.commit);
    assert_eq!(
        write_ahead(&old, [(&target, false)]),
        old,
        "a Deployment whose spec stays starts no rollout: nothing written ahead"
    );
}

#[test]
fn a_kind_the_cluster_lacks_is_said_once_with_how_many_objects_use_it() {
    let errors = ["a", "b", "c"]
        .iter()
        .map(|name| UnknownKind::of(&cm(name, "1")))
        .collect();
    let said = UnknownKind::one_per_kind(errors);
    assert_eq!(said.len(), 1);
    assert!(
        said[0]
            .to_string()
            .ends_with("(and 2 more objects of this kind)"),
        "{}",
        said[0]
    );
}
