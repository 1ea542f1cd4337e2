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
//! - [`manifest`]: the Visitor pipeline that turns a checkout into manifests;
//! - [`testenv`]: a real local control plane (etcd, kube-apiserver,
//!   kube-controller-manager) and the kubelet stand-in, for tests, benchmarks and demos.

pub mod config;
pub mod manifest;
pub mod testenv;
