//! Many apps: apps of one repository share its fetch and skip commits that change none of
//! their paths.

mod common;

use std::path::Path;
use std::time::Duration;

use berth::history::{HistoryLog, Outcome, SyncRecord};
use common::{eventually, Daemon, Repo};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;

fn config_map(name: &str, value: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n  value: \"{value}\"\n"
    )
}

/// A `berth run` configuration for `apps` (name, path) of one repository.
fn config(state: &Path, kubeconfig: &Path, repo: &Repo, ns: &str, apps: &[(&str, &str)]) -> String {
    let mut text = format!(
        "[agent]\nstate_dir = \"{}\"\ninterval = \"1h\"\njitter = \"0s\"\nlisten = \"off\"\n[cluster]\nkubeconfig = \"{}\"\n",
        state.display(),
        kubeconfig.display()
    );
    for (name, path) in apps {
        text.push_str(&format!(
            "[[app]]\nname = \"{name}\"\nrepo = \"{}\"\npath = \"{path}\"\nnamespace = \"{ns}\"\n",
            repo.dir.path().display()
        ));
    }
    text
}

fn history(state: &Path, app: &str) -> Vec<SyncRecord> {
    HistoryLog::new(state).read(app).unwrap_or_default()
}

/// The app's record of commit `sha`, once there is one.
fn record_of(state: &Path, app: &str, sha: &str) -> Option<SyncRecord> {
    history(state, app)
        .into_iter()
        .rev()
        .find(|r| r.commit.as_ref().is_some_and(|c| c.sha == sha))
}

#[tokio::test]
async fn apps_of_one_repository_share_its_fetch_and_skip_commits_that_miss_them() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let ns = common::namespace(&client, "monorepo").await;
    let repo = Repo::new();
    repo.write("apps/a/cm.yaml", &config_map("a", "1"));
    repo.write("apps/b/cm.yaml", &config_map("b", "1"));
    repo.write("apps/c/kustomization.yaml", "resources: [../../base]\n");
    repo.write("base/kustomization.yaml", "resources: [cm.yaml]\n");
    repo.write("base/cm.yaml", &config_map("c", "1"));
    let first = repo.commit("three apps");
    let state = tempfile::tempdir().unwrap();
    let path = state.path().join("berth.toml");
    let apps = [("a", "apps/a"), ("b", "apps/b"), ("c", "apps/c")];
    std::fs::write(
        &path,
        config(state.path(), &cp.kubeconfig, &repo, &ns, &apps),
    )
    .unwrap();
    let _daemon = Daemon::start(&path, &[]);
    let synced = |sha: &str, app: &str, outcome: Outcome| {
        record_of(state.path(), app, sha).is_some_and(|r| r.outcome == outcome)
    };
    eventually(
        "the first sync of every app",
        Duration::from_secs(60),
        || {
            apps.iter()
                .all(|(app, _)| synced(&first, app, Outcome::Succeeded))
        },
    );

    // A commit that changes only app a: b and c say so without syncing.
    repo.write("apps/a/cm.yaml", &config_map("a", "2"));
    let second = repo.commit("a only");
    eventually(
        "the syncs of the second commit",
        Duration::from_secs(30),
        || {
            synced(&second, "a", Outcome::Succeeded)
                && synced(&second, "b", Outcome::NoChange)
                && synced(&second, "c", Outcome::NoChange)
        },
    );
    let b = record_of(state.path(), "b", &second).unwrap();
    let note = b.note.clone().unwrap_or_default();
    assert!(
        note.contains(&format!(
            "commit {} changes nothing under apps/b",
            &second[..7]
        )),
        "{note}"
    );
    assert_eq!(b.requests, 0, "nothing was asked of the cluster");
    assert!(b.unchanged > 0, "the objects it manages are still counted");

    // A commit to the base that app c's kustomization reaches outside its path syncs c.
    repo.write("base/cm.yaml", &config_map("c", "2"));
    let third = repo.commit("the base");
    eventually(
        "the syncs of the third commit",
        Duration::from_secs(30),
        || {
            synced(&third, "c", Outcome::Succeeded)
                && synced(&third, "a", Outcome::NoChange)
                && synced(&third, "b", Outcome::NoChange)
        },
    );
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    common::wait_for_value(&maps, "c", "2", Duration::from_secs(5)).await;
    common::wait_for_value(&maps, "a", "2", Duration::from_secs(5)).await;

    // One cache for the repository, whatever the number of its apps.
    let sources: Vec<_> = std::fs::read_dir(state.path().join("sources"))
        .unwrap()
        .collect();
    assert_eq!(sources.len(), 1, "one repository cache: {sources:?}");
}

/// `GET /metrics` of a host; empty when it does not answer.
fn metrics(port: u16) -> String {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return String::new();
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    let _ = s.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

fn gauge(metrics: &str, name: &str) -> Option<usize> {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}

/// One sharded `berth run`.
struct Host {
    state: tempfile::TempDir,
    port: u16,
    daemon: Daemon,
}

impl Host {
    fn start(cp: &berth_testenv::ControlPlane, repo: &Repo, ns: &str, apps: &[String]) -> Host {
        let pairs: Vec<(&str, String)> = apps
            .iter()
            .map(|a| (a.as_str(), format!("apps/{a}")))
            .collect();
        let pairs: Vec<(&str, &str)> = pairs.iter().map(|(a, p)| (*a, p.as_str())).collect();
        Host::with(|state| config(state, &cp.kubeconfig, repo, ns, &pairs), ns)
    }

    /// A sharded host running the configuration `text(state_dir)` makes.
    fn with(text: impl Fn(&Path) -> String, ns: &str) -> Host {
        let state = tempfile::tempdir().unwrap();
        let port = common::free_port();
        let text = text(state.path()).replace(
            "listen = \"off\"\n",
            &format!("listen = \"127.0.0.1:{port}\"\nsharding = true\nlease_name = \"{ns}\"\nlease_duration = \"{}s\"\ninventory_namespace = \"{ns}\"\n", LEASE.as_secs()),
        );
        let path = state.path().join("berth.toml");
        std::fs::write(&path, text).unwrap();
        let daemon = Daemon::start(&path, &[]);
        Host {
            state,
            port,
            daemon,
        }
    }

    fn identity(&self) -> String {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
        format!("{}/{}", host.trim(), self.daemon.child.id())
    }

    /// This host's apps and live members, from its /metrics.
    fn shard(&self) -> Option<(usize, usize)> {
        let m = metrics(self.port);
        Some((
            gauge(&m, "berth_shard_apps")?,
            gauge(&m, "berth_shard_members")?,
        ))
    }
}

const LEASE: Duration = Duration::from_secs(4);

/// Waits until every host sees `hosts.len()` members and their shares add up to `apps`.
fn converged(hosts: &[&Host], apps: usize) {
    eventually(
        "the hosts agree on the membership",
        Duration::from_secs(30),
        || {
            let shards: Vec<_> = hosts.iter().map(|h| h.shard()).collect();
            shards
                .iter()
                .all(|s| s.is_some_and(|(_, m)| m == hosts.len()))
                && shards.iter().flatten().map(|(a, _)| a).sum::<usize>() == apps
        },
    );
}

/// Every host's records of `sha` that succeeded: app → hosts.
fn synced_by(hosts: &[&Host], apps: &[String], sha: &str) -> Vec<Vec<String>> {
    apps.iter()
        .map(|app| {
            hosts
                .iter()
                .filter(|h| {
                    record_of(h.state.path(), app, sha)
                        .is_some_and(|r| r.outcome == Outcome::Succeeded)
                })
                .map(|h| h.identity())
                .collect()
        })
        .collect()
}

#[tokio::test]
async fn three_hosts_share_thirty_apps_and_hand_them_over() {
    use berth::service::shards;
    use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let ns = common::namespace(&client, "shards").await;
    let repo = Repo::new();
    let apps: Vec<String> = (0..30).map(|i| format!("app{i:02}")).collect();
    let generation = |g: usize| {
        for a in &apps {
            repo.write(&format!("apps/{a}/cm.yaml"), &config_map(a, &g.to_string()));
        }
        repo.commit(&format!("generation {g}"))
    };
    let first = generation(1);
    // A host that vanished mid-sync still holds app00's Lease: nobody may sync app00 until
    // that claim expires (the hand-over window).
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);
    let claimed = jiff::Timestamp::now();
    let ghost = Lease {
        metadata: kube::api::ObjectMeta {
            name: Some(shards::app_lease("app00")),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some("ghost/1".into()),
            lease_duration_seconds: Some(6),
            renew_time: Some(MicroTime(claimed)),
            ..LeaseSpec::default()
        }),
    };
    leases.create(&Default::default(), &ghost).await.unwrap();
    let mut hosts: Vec<Host> = (0..3).map(|_| Host::start(cp, &repo, &ns, &apps)).collect();
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    for a in &apps {
        common::wait_for_value(&maps, a, "1", Duration::from_secs(60)).await;
    }
    let all: Vec<&Host> = hosts.iter().collect();
    let app00 = all
        .iter()
        .flat_map(|h| history(h.state.path(), "app00"))
        .filter(|r| r.commit.as_ref().is_some_and(|c| c.sha == first))
        .map(|r| r.started_at)
        .min()
        .unwrap();
    assert!(
        app00 >= claimed + jiff::SignedDuration::from_secs(6),
        "app00 synced at {app00} while another host's claim held until {}",
        claimed + jiff::SignedDuration::from_secs(6)
    );

    // Every app synced by exactly one host, none above its bound.
    converged(&all, 30);
    let members: Vec<String> = {
        let mut m: Vec<String> = all.iter().map(|h| h.identity()).collect();
        m.sort();
        m
    };
    for h in &all {
        let (share, _) = h.shard().unwrap();
        assert!(share <= shards::capacity(30, 3), "{share} apps on one host");
    }
    let second = generation(2);
    for a in &apps {
        common::wait_for_value(&maps, a, "2", Duration::from_secs(30)).await;
    }
    let owners = shards::assign(&apps, &members);
    eventually(
        "one record of the second commit per app",
        Duration::from_secs(20),
        || synced_by(&all, &apps, &second).iter().all(|h| h.len() == 1),
    );
    for (app, by) in apps.iter().zip(synced_by(&all, &apps, &second)) {
        assert_eq!(
            by,
            [owners[app].to_string()],
            "{app}: synced by the host it is assigned to"
        );
    }

    // One host dies: the others take its apps within the lease duration.
    let dead = hosts.remove(0);
    dead.daemon.signal(libc::SIGKILL);
    let killed = std::time::Instant::now();
    let third = generation(3);
    for a in &apps {
        common::wait_for_value(&maps, a, "3", LEASE + Duration::from_secs(20)).await;
    }
    let takeover = killed.elapsed();
    eprintln!("takeover: every app at the new commit {takeover:?} after a host was killed");
    let survivors: Vec<&Host> = hosts.iter().collect();
    converged(&survivors, 30);
    let rest: Vec<String> = members
        .iter()
        .filter(|m| **m != dead.identity())
        .cloned()
        .collect();
    let two = shards::assign(&apps, &rest);
    eventually(
        "one record of the third commit per app, by a survivor",
        Duration::from_secs(20),
        || {
            synced_by(&survivors, &apps, &third)
                .iter()
                .all(|h| h.len() == 1)
        },
    );

    // It comes back (a new process): at most its share moves.
    hosts.push(Host::start(cp, &repo, &ns, &apps));
    let all: Vec<&Host> = hosts.iter().collect();
    converged(&all, 30);
    let mut members: Vec<String> = all.iter().map(|h| h.identity()).collect();
    members.sort();
    let three = shards::assign(&apps, &members);
    let moved = apps.iter().filter(|a| two[*a] != three[*a]).count();
    let share = three.values().filter(|h| **h == all[2].identity()).count();
    eprintln!("rejoin: {moved} apps moved, the newcomer's share is {share}");
    // About the newcomer's share moves; the load bound can push a few more (6000 joins of
    // a third host to 30 apps, computed with shards::assign: 4 to 18 moved, 1.9 % over
    // the capacity of 13); a hash that is not consistent moves about 20.
    assert!(moved <= shards::capacity(30, 3) + 7, "{moved} apps moved");
    let fourth = generation(4);
    for a in &apps {
        common::wait_for_value(&maps, a, "4", Duration::from_secs(30)).await;
    }
    eventually(
        "one record of the fourth commit per app",
        Duration::from_secs(20),
        || synced_by(&all, &apps, &fourth).iter().all(|h| h.len() == 1),
    );

    // Never two writers at once: no two hosts' records of one app overlap in time.
    let mut every = vec![&dead];
    every.extend(all.iter());
    for app in &apps {
        let mut records: Vec<SyncRecord> = every
            .iter()
            .flat_map(|h| history(h.state.path(), app))
            .collect();
        records.sort_by_key(|r| r.started_at);
        for pair in records.windows(2) {
            assert!(
                pair[0].finished_at <= pair[1].started_at || pair[0].host == pair[1].host,
                "{app}: {:?} and {:?} synced at once",
                pair[0].host,
                pair[1].host
            );
        }
    }
}

/// Whether `record` wrote anything: an object created, configured or pruned, or objects
/// handed over.
fn wrote(record: &SyncRecord) -> bool {
    use berth::history::Action;
    let writes = [Action::Created, Action::Configured, Action::Pruned];
    record.objects.iter().any(|o| writes.contains(&o.action))
        || record
            .note
            .as_deref()
            .is_some_and(|n| n.contains("handed over"))
}

/// The ConfigMap `name`'s uid and owning app (its `berth.dev/app` label).
async fn uid_and_owner(maps: &Api<ConfigMap>, name: &str) -> Option<(String, String)> {
    let map = maps.get_opt(name).await.ok().flatten()?;
    let owner = map.metadata.labels?.get("berth.dev/app")?.clone();
    Some((map.metadata.uid?, owner))
}

#[tokio::test]
async fn three_sharded_hosts_hand_a_renamed_folder_over_once_twenty_times() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let ns = common::namespace(&client, "renames").await;
    let repo = Repo::new();
    for i in 0..8 {
        repo.write(
            &format!("apps/a{i}/cm.yaml"),
            &config_map(&format!("a{i}"), "1"),
        );
    }
    repo.write("apps/r0/cm.yaml", &config_map("moving", "1"));
    repo.commit("nine folders");
    let set = |state: &Path| {
        let text = config(state, &cp.kubeconfig, &repo, &ns, &[]);
        format!(
            "{text}[[app_set]]\nname = \"shop\"\nrepo = \"{}\"\nfolders = \"apps/*\"\napp_name = \"{{folder}}\"\nnamespace = \"{ns}\"\nprune = true\n",
            repo.dir.path().display()
        )
    };
    let hosts: Vec<Host> = (0..3).map(|_| Host::with(set, &ns)).collect();
    let all: Vec<&Host> = hosts.iter().collect();
    converged(&all, 9);
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let owned_by = async |app: &str| {
        let end = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            match uid_and_owner(&maps, "moving").await {
                Some((uid, owner)) if owner == app => return uid,
                now => assert!(
                    std::time::Instant::now() < end,
                    "moving not owned by {app} within 60 s: {now:?}"
                ),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    let uid = owned_by("r0").await;
    let mut commits = Vec::new();
    for run in 1..=20 {
        let (from, to) = (format!("r{}", run - 1), format!("r{run}"));
        repo.git(&["mv", &format!("apps/{from}"), &format!("apps/{to}")]);
        commits.push(repo.commit(&format!("{from} renamed to {to}")));
        assert_eq!(
            owned_by(&to).await,
            uid,
            "run {run}: the object was made again"
        );
    }
    converged(&all, 9);

    let records: Vec<(String, SyncRecord)> = all
        .iter()
        .flat_map(|h| {
            let log = HistoryLog::new(h.state.path());
            let apps = log.apps();
            let identity = h.identity();
            apps.into_iter()
                .flat_map(|app| history(h.state.path(), &app))
                .map(move |r| (identity.clone(), r))
                .collect::<Vec<_>>()
        })
        .collect();
    let failed: Vec<_> = (records.iter())
        .filter(|(_, r)| r.outcome == Outcome::Failed)
        .map(|(host, r)| format!("{host}: {} {:?}: {:?}", r.app, r.note, r.errors))
        .collect();
    assert!(failed.is_empty(), "failed records: {failed:#?}");
    for run in 1..=20 {
        let from = format!("r{}", run - 1);
        let handed: Vec<&String> = (records.iter())
            .filter(|(_, r)| {
                r.app == from && r.note.as_deref().is_some_and(|n| n.contains("handed over"))
            })
            .map(|(host, _)| host)
            .collect();
        assert_eq!(handed.len(), 1, "{from}: handed over by {handed:?}");
    }
    // At each commit, each app written by one host only.
    for sha in &commits {
        let mut writers = std::collections::BTreeMap::<&str, Vec<&String>>::new();
        for (host, r) in &records {
            let at = r.commit.as_ref().is_some_and(|c| &c.sha == sha);
            if at && wrote(r) {
                writers.entry(&r.app).or_default().push(host);
            }
        }
        for (app, hosts) in writers {
            let mut hosts = hosts.clone();
            hosts.sort();
            hosts.dedup();
            assert_eq!(hosts.len(), 1, "{app} at {sha}: written by {hosts:?}");
        }
    }
}

/// An inventory too large for one ConfigMap (the API server refuses data over 1 MiB; an
/// entry is ~150 bytes) is split over parts and read back whole; a smaller one deletes the
/// parts; a part edited by hand makes the inventory unreadable, not silently shorter.
#[tokio::test]
async fn an_inventory_of_twelve_thousand_objects_is_split_and_read_back() {
    use berth::cluster::{inventory, ClusterError};
    use berth::manifest::ObjectKey;
    use berth::plan::{Entry, Inventory};
    use kube::api::{ListParams, Patch, PatchParams};

    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let ns = common::namespace(&client, "inventory-parts").await;
    let entries = |n: usize| Inventory {
        commit: Some(format!("c{n}")),
        objects: (0..n)
            .map(|i| Entry {
                key: ObjectKey {
                    group: String::new(),
                    kind: "ConfigMap".into(),
                    namespace: Some("big".into()),
                    name: format!("config-{i:05}"),
                },
                api_version: "v1".into(),
                digest: format!("{:064x}", i * 7919),
                observed: format!("{}", 100_000 + i),
            })
            .collect(),
        held: None,
        ready: None,
        failed: false,
        origin: None,
        pre_hooks_ran: None,
    };
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let parts = || async {
        let labelled = ListParams::default().labels("berth.dev/inventory-part=big");
        let mut names: Vec<String> = api
            .list_metadata(&labelled)
            .await
            .unwrap()
            .items
            .into_iter()
            .filter_map(|p| p.metadata.name)
            .collect();
        names.sort();
        names
    };

    let large = entries(12_000);
    let v1 = inventory::store(&client, &ns, "big", "berth", &large, None)
        .await
        .expect("a large inventory is written");
    assert!(v1.parted);
    let written = parts().await;
    assert!(written.len() >= 2, "split over parts: {written:?}");
    let read = inventory::load(&client, &ns, "big").await.unwrap().unwrap();
    assert_eq!(read.inventory, large);
    assert_eq!(read.version, v1);

    let stale = inventory::store(&client, &ns, "big", "berth", &entries(5), None).await;
    assert!(stale.is_ok(), "no precondition: written");
    let refused = inventory::store(&client, &ns, "big", "berth", &large, Some(&v1)).await;
    assert!(
        matches!(refused, Err(ClusterError::InventoryChanged(_))),
        "a changed head refuses the write: {refused:?}"
    );

    let larger = entries(13_000);
    let now = inventory::load(&client, &ns, "big").await.unwrap().unwrap();
    let v2 = inventory::store(&client, &ns, "big", "berth", &larger, Some(&now.version))
        .await
        .unwrap();
    let read = inventory::load(&client, &ns, "big").await.unwrap().unwrap();
    assert_eq!(read.inventory, larger);
    let current = parts().await;
    assert!(
        current.iter().all(|p| !written.contains(p)),
        "the first inventory's parts are gone: {current:?}"
    );

    let first = &current[0];
    let edit = serde_json::json!({"data": {"inventory.json": "[]"}});
    api.patch(first, &PatchParams::default(), &Patch::Merge(&edit))
        .await
        .unwrap();
    let broken = inventory::load(&client, &ns, "big").await;
    match broken {
        Err(e @ ClusterError::Inventory { .. }) => {
            let message = e.to_string();
            assert!(message.contains("berth-inventory-big"), "{message}");
            assert!(message.contains("do not add up"), "{message}");
        }
        other => panic!("an edited part is an error: {other:?}"),
    }

    let small = entries(3);
    let v3 = inventory::store(&client, &ns, "big", "berth", &small, Some(&v2))
        .await
        .unwrap();
    assert!(!v3.parted);
    assert_eq!(
        parts().await,
        Vec::<String>::new(),
        "a small inventory leaves no parts"
    );
    let read = inventory::load(&client, &ns, "big").await.unwrap().unwrap();
    assert_eq!(read.inventory, small);
}
