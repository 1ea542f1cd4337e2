//! berth: a GitOps reconciliation agent. Git drives a Kubernetes cluster from one small
//! binary.
//!
//! ```text
//! trigger ─ interval · notify · webhook · `berth sync`
//!    │
//! source      git: fetch the ref, check out commit C
//!    │
//! pipeline    manifest::Builder — paths → decode → flatten → filter → decorate → unique
//!    │        → error policy                                      ⇒ Vec<Manifest>
//! plan        discovery · stages · diff against the inventory · pod-template hashes
//!    │
//! validate    server-side dry-run of every object; any failure → nothing is written
//!    │
//! apply       server-side apply, stage by stage
//!    │
//! rollout     follow each changed Deployment until complete, failed or timed out
//!    │
//! prune       delete what the last inventory had and this commit does not
//!    │
//! record      inventory · history record · logs
//! ```
//!
//! Modules:
//! - [`config`]: the TOML configuration (`parse`, `load`, `validate`);
//! - [`source`]: git fetch and checkout, ssh host keys, repository watches;
//! - [`manifest`]: the Visitor pipeline that turns a checkout into manifests;
//! - [`plan`]: what a sync writes, keeps and prunes (pure);
//! - [`diff`]: `berth plan`'s per-object diffs, Secret values masked (pure);
//! - [`cluster`]: client, discovery, apply, inventory, prune;
//! - [`sync`]: one sync of one app, step by step;
//! - [`history`]: the sync history log;
//! - [`agent`]: the daemon's tasks and triggers;
//! - [`testenv`]: a real local control plane (etcd, kube-apiserver,
//!   kube-controller-manager) and the kubelet stand-in, for tests, benchmarks and demos.

pub mod agent;
pub mod cluster;
pub mod config;
pub mod diff;
pub mod history;
pub mod manifest;
pub mod plan;
pub mod rollout;
pub mod service;
pub mod shutdown;
pub mod source;
pub mod sync;
pub mod testenv;

/// `1 object`, `2 objects`: counts in messages read as English.
pub fn plural(n: usize, noun: &str) -> String {
    if n == 1 {
        format!("{n} {noun}")
    } else {
        format!("{n} {noun}s")
    }
}
