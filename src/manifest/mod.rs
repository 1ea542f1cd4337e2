//! The manifest pipeline: a commit's files → [`Manifest`]s, through a chain of
//! [`Visitor`]s modelled on kubectl's resource Builder. Pure: it reads files under a root
//! and never talks to a cluster (the kind → scope lookup is passed in).
//!
//! - [`visitor`]: the trait and its combinators (flatten, decorate, filter, unique,
//!   continue-on-error);
//! - [`source`]: folders, files and stdin, with the path and size safety rules;
//! - [`kustomize`]: folders holding a kustomization, rendered by the real tool after its
//!   references are checked;
//! - [`read`]: reading a file under those rules (for kustomize too);
//! - [`decode`]: multi-document YAML and JSON streams, within [`bounds`] (flow depth
//!   before parsing, the decoded size of a document and of a render, duplicate keys);
//! - [`decrypt`]: files encrypted with [`sops`], decrypted in memory before their objects
//!   go on, each object knowing which of its values were (to mask them);
//! - [`decorate`]: identity checks, default namespace, ownership label, annotations, filters;
//! - [`emit`]: the YAML `berth render` prints, every string still a string to YAML 1.1;
//! - [`confine`]: `[app.scope]`, and berth's own state out of every app's reach;
//! - [`typed`]: built-in kinds read into their k8s-openapi types;
//! - [`scope`]: which kinds are namespaced;
//! - [`builder`]: assembles the chain for one render;
//! - [`object`] and [`error`]: the values that cross it.

pub mod bounds;
pub mod builder;
pub mod confine;
pub mod decode;
pub mod decorate;
pub mod decrypt;
pub mod emit;
pub mod error;
pub mod helm;
pub mod kustomize;
pub mod object;
pub mod read;
pub mod scope;
pub mod sops;
pub mod source;
pub mod tool;
pub mod typed;
pub mod visitor;
pub mod yaml11;

pub use bounds::Limits;
pub use builder::{Builder, ErrorPolicy, Input};
pub use error::ManifestError;
pub use kustomize::Kustomize;
pub use object::{Manifest, ObjectKey, Origin};
pub use scope::{BuiltinScopes, Scope, ScopeLookup};
pub use visitor::Visitor;

/// The ownership label: `berth.dev/app=<app>` on every object berth applies.
pub const LABEL_APP: &str = "berth.dev/app";
/// The prefix of the label each app that asked berth for a namespace (`create_namespace`)
/// sets on it: `namespace.berth.dev/APP`.
pub const LABEL_NAMESPACE_FOR: &str = "namespace.berth.dev/";
/// The repository-relative file an object came from.
pub const ANNOTATION_SOURCE_PATH: &str = "berth.dev/source-path";
/// The commit an object was applied from.
pub const ANNOTATION_SOURCE_COMMIT: &str = "berth.dev/source-commit";
/// `"true"`: berth skips the object.
pub const ANNOTATION_IGNORE: &str = "berth.dev/ignore";
/// `"true"` in every app that renders an object: they may share it (an object has one
/// owner otherwise).
pub const ANNOTATION_SHARED: &str = "berth.dev/shared";
/// Annotations that make an object a hook, not an object of the app: berth's, Argo CD's
/// and Helm's (read by `plan::phases`). A hook alone may be named by `generateName`.
pub const HOOK_ANNOTATIONS: [&str; 3] =
    ["berth.dev/hook", "argocd.argoproj.io/hook", "helm.sh/hook"];
