//! [`Builder`]: assembles the visitor chain for one render, as kubectl's resource Builder
//! does in `Do()`, and runs it under the chosen error policy.
//!
//! ```text
//! source (paths | stdin) → stream decode → flatten → require identity → typed check
//!                                                                         ⇒ raw manifests
//! raw → filter (ignore, Kind/name globs) → decorate (namespace, port protocol, label, annotations)
//!     → unique → error policy                                              ⇒ Vec<Manifest>
//! ```
//! It runs in two passes so that CustomResourceDefinitions anywhere in the commit tell
//! the namespace decorator the scope of their kinds.

use globset::GlobSet;

use super::bounds::Limits;
use super::confine::{Confine, Confinement};
use super::decorate::{
    AppLabel, DefaultPortProtocol, IgnoreAnnotated, ObjectGlobs, RequireIdentity, SetNamespace,
    SourceAnnotations,
};
use super::decrypt::Decryption;
use super::error::{ErrorList, ManifestError};
use super::helm::{Capabilities, Helm};
use super::kustomize::Kustomize;
use super::object::Manifest;
use super::scope::{CrdGuard, ScopeLookup, WithCrds};
use super::source::{PathSource, Stdin};
use super::typed::TypedCheck;
use super::visitor::{
    collect, ContinueOnError, Decorated, Decorator, Filtered, Flatten, Once, Unique, Visitor,
};
use crate::config::{AgentConfig, AppConfig};

/// What to do with a bad item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorPolicy {
    /// Stop at the first error.
    FailFast,
    /// Go on, and report every error at the end.
    CollectAll,
}

/// Where the manifests come from.
pub enum Input {
    /// Files and folders of a checkout.
    Paths(Box<PathSource>),
    /// Standard input.
    Stdin(Stdin),
}

/// One render's settings.
pub struct Builder<'a> {
    /// Where the manifests come from.
    pub input: Input,
    /// Namespace for namespaced objects that name none.
    pub namespace: String,
    /// The app: adds the ownership label when set.
    pub app: Option<String>,
    /// The commit: adds the source-commit annotation when set.
    pub commit: Option<String>,
    /// When set, only objects whose `Kind/name` matches are kept.
    pub include_objects: Option<GlobSet>,
    /// Objects whose `Kind/name` matches are dropped.
    pub exclude_objects: Option<GlobSet>,
    /// Fail fast or collect all.
    pub policy: ErrorPolicy,
    /// Who knows each kind's scope.
    pub scopes: &'a dyn ScopeLookup,
    /// Where the app may write; `None`: anywhere (`berth render` of loose files).
    pub confinement: Option<Confinement>,
}

impl<'a> Builder<'a> {
    /// Charts are rendered for a cluster of this version serving these API versions
    /// (`.Capabilities`).
    pub fn capabilities(
        mut self,
        kube_version: Option<&str>,
        api_versions: std::sync::Arc<[String]>,
    ) -> Self {
        let capabilities = Capabilities {
            kube_version: kube_version.map(str::to_string),
            api_versions,
        };
        if let Input::Paths(p) = &mut self.input {
            if let Some(h) = &mut p.helm {
                h.capabilities = capabilities.clone();
            }
            if let Some(k) = &mut p.kustomize {
                k.capabilities = capabilities;
            }
        }
        self
    }

    /// A builder for one app's paths in a checkout at `root`, with the agent's size caps
    /// and kustomize command.
    ///
    /// # Errors
    /// An invalid glob in the app's settings.
    pub fn for_app(
        app: &AppConfig,
        agent: &AgentConfig,
        root: &std::path::Path,
        scopes: &'a dyn ScopeLookup,
    ) -> Result<Self, globset::Error> {
        Ok(Builder {
            input: Input::Paths(Box::new(PathSource {
                root: root.to_path_buf(),
                prefix: String::new(),
                paths: app.path.clone(),
                include: app.include.set()?,
                exclude: app.exclude.set()?,
                limits: Limits::of(agent),
                kustomize: Kustomize::for_app(app, agent),
                helm: Helm::for_app(app, agent),
                allow_empty: app.allow_empty,
                decrypt: Decryption::for_app(app),
            })),
            namespace: app.namespace.clone(),
            app: Some(app.name.clone()),
            commit: None,
            include_objects: app.include_objects.set()?,
            exclude_objects: app.exclude_objects.set()?,
            policy: ErrorPolicy::CollectAll,
            scopes,
            confinement: Some(Confinement::for_app(app, agent)?),
        })
    }

    /// Runs the chain.
    ///
    /// # Errors
    /// The first error (fail-fast) or every error (collect-all), each naming its origin.
    pub fn render(&self) -> Result<Vec<Manifest>, ManifestError> {
        let (manifests, errors) = self.render_partial();
        match ManifestError::aggregate(errors) {
            Some(e) => Err(e),
            None => Ok(manifests),
        }
    }

    /// Runs the chain: the objects that render and every error of those that do not
    /// (`berth plan` plans the first and reports the second together). Past a resource
    /// bound, or with fail-fast, nothing renders.
    pub fn render_partial(&self) -> (Vec<Manifest>, Vec<ManifestError>) {
        let source: &dyn Visitor = match &self.input {
            Input::Paths(p) => &**p,
            Input::Stdin(s) => s,
        };
        let raw_chain = Decorated {
            inner: Flatten(source),
            decorators: vec![Box::new(RequireIdentity), Box::new(TypedCheck)],
        };
        let (raw, mut errors) = self.run(&raw_chain);
        let bound = errors.iter().any(ManifestError::is_bound);
        if (bound || self.policy == ErrorPolicy::FailFast) && !errors.is_empty() {
            return (Vec::new(), errors);
        }
        // Filtered first: an ignored or filtered object never decides how others are
        // classified (an ignored CRD re-declaring a kind's scope, say).
        let (kept, more) = self.run(&Filtered {
            inner: Once(raw.into()),
            filters: vec![
                Box::new(IgnoreAnnotated),
                Box::new(ObjectGlobs {
                    include: self.include_objects.clone(),
                    exclude: self.exclude_objects.clone(),
                }),
            ],
        });
        errors.extend(more);
        let scopes = WithCrds::new(&kept, self.scopes);
        let mut decorators: Vec<Box<dyn Decorator + '_>> = vec![
            Box::new(CrdGuard {
                served: self.scopes,
            }),
            Box::new(SetNamespace {
                namespace: self.namespace.clone(),
                scopes: &scopes,
            }),
            Box::new(DefaultPortProtocol),
        ];
        if let Some(confinement) = &self.confinement {
            decorators.push(Box::new(Confine {
                confinement,
                scopes: &scopes,
            }));
        }
        if let Some(app) = &self.app {
            decorators.push(Box::new(AppLabel(app.clone())));
        }
        decorators.push(Box::new(SourceAnnotations {
            commit: self.commit.clone(),
        }));
        let chain = Unique(Decorated {
            inner: Once(kept.into()),
            decorators,
        });
        let (manifests, more) = self.run(&chain);
        errors.extend(more);
        if self.policy == ErrorPolicy::FailFast && !errors.is_empty() {
            return (Vec::new(), errors);
        }
        // Each pass keeps its first errors; together, too.
        let errors = errors.into_iter().collect::<ErrorList>().into_vec();
        (manifests, errors)
    }

    /// Runs a chain under the policy; collect-all keeps the good manifests too, so the
    /// next pass can report their errors as well.
    fn run(&self, chain: &dyn Visitor) -> (Vec<Manifest>, Vec<ManifestError>) {
        if self.policy == ErrorPolicy::FailFast {
            return split(collect(chain));
        }
        let mut ok = Vec::new();
        let walk = ContinueOnError(chain).visit(&mut |item| {
            ok.push(item?);
            Ok(())
        });
        (
            ok,
            walk.err().map(ManifestError::into_vec).unwrap_or_default(),
        )
    }
}

fn split(r: Result<Vec<Manifest>, ManifestError>) -> (Vec<Manifest>, Vec<ManifestError>) {
    match r {
        Ok(m) => (m, Vec::new()),
        Err(e) => (Vec::new(), e.into_vec()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::BuiltinScopes;

    fn builder(root: &std::path::Path, policy: ErrorPolicy) -> Builder<'static> {
        Builder {
            input: Input::Paths(Box::new(PathSource {
                root: root.to_path_buf(),
                prefix: String::new(),
                paths: vec![".".into()],
                include: None,
                exclude: None,
                limits: Limits::default(),
                kustomize: None,
                helm: None,
                allow_empty: false,
                decrypt: None,
            })),
            namespace: "shop".into(),
            app: Some("shop".into()),
            commit: Some("abc1234".into()),
            include_objects: None,
            exclude_objects: None,
            policy,
            scopes: &BuiltinScopes,
            confinement: None,
        }
    }

    const FILES: &[(&str, &str)] = &[
        ("a-bad.yaml", "apiVersion: v1\nkind: ConfigMap\n  oops: [\n"),
        (
            "b-crd.yaml",
            "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {name: widgets.example.com}\nspec: {group: example.com, scope: Namespaced, names: {kind: Widget}}\n",
        ),
        (
            "c-objects.yaml",
            "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: twice}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: twice, namespace: shop}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: skipped, annotations: {berth.dev/ignore: \"true\"}}\n",
        ),
    ];

    fn repo() -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        for (name, text) in FILES {
            std::fs::write(d.path().join(name), text).unwrap();
        }
        d
    }

    #[test]
    fn collect_all_reports_decode_errors_and_duplicates_together() {
        let d = repo();
        let e = builder(d.path(), ErrorPolicy::CollectAll)
            .render()
            .unwrap_err();
        let all: Vec<String> = e.into_vec().iter().map(ToString::to_string).collect();
        assert_eq!(all.len(), 2, "{all:#?}");
        assert!(
            all[0].starts_with("a-bad.yaml:3 (document 1): invalid YAML"),
            "{all:#?}"
        );
        assert!(all[1].contains("ConfigMap shop/twice is defined twice: at c-objects.yaml:5 (document 2) and at c-objects.yaml:9 (document 3)"), "{all:#?}");
    }

    #[test]
    fn a_partial_render_gives_what_renders_beside_every_error() {
        let d = repo();
        let (manifests, errors) = builder(d.path(), ErrorPolicy::CollectAll).render_partial();
        assert_eq!(errors.len(), 2, "{errors:#?}");
        let names: Vec<&str> = manifests.iter().map(Manifest::name).collect();
        assert_eq!(names, ["widgets.example.com", "w", "twice"]);
        let (manifests, errors) = builder(d.path(), ErrorPolicy::FailFast).render_partial();
        assert!(manifests.is_empty() && errors.len() == 1);
    }

    #[test]
    fn fail_fast_stops_at_the_first_error() {
        let d = repo();
        let e = builder(d.path(), ErrorPolicy::FailFast)
            .render()
            .unwrap_err();
        assert_eq!(e.into_vec().len(), 1);
    }

    #[test]
    fn a_good_commit_is_decorated_and_crd_kinds_get_their_scope() {
        let d = repo();
        std::fs::remove_file(d.path().join("a-bad.yaml")).unwrap();
        let text = FILES[2]
            .1
            .replace("name: twice, namespace: shop", "name: once");
        std::fs::write(d.path().join("c-objects.yaml"), text).unwrap();
        let got = builder(d.path(), ErrorPolicy::FailFast).render().unwrap();
        let keys: Vec<String> = got.iter().map(|m| m.key().to_string()).collect();
        assert_eq!(
            keys,
            [
                "CustomResourceDefinition widgets.example.com",
                "Widget.example.com shop/w",
                "ConfigMap shop/twice",
                "ConfigMap shop/once"
            ]
        );
        let w = &got[1];
        assert_eq!(
            w.metadata().unwrap()["labels"][crate::manifest::LABEL_APP],
            "shop"
        );
        assert_eq!(
            w.annotation(crate::manifest::ANNOTATION_SOURCE_COMMIT),
            Some("abc1234")
        );
    }
}
