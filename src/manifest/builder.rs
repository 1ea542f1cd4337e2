//! [`Builder`]: assembles the visitor chain for one render, as kubectl's resource Builder
//! does in `Do()`, and runs it under the chosen error policy.
//!
//! ```text
//! source (paths | stdin) → stream decode → flatten → require identity      ⇒ raw manifests
//! raw → filter (ignore, Kind/name globs) → decorate (namespace, label, annotations)
//!     → unique → error policy                                              ⇒ Vec<Manifest>
//! ```
//! It runs in two passes so that CustomResourceDefinitions anywhere in the commit tell
//! the namespace decorator the scope of their kinds.

use globset::{Glob, GlobSet, GlobSetBuilder};

use super::decorate::{
    AppLabel, IgnoreAnnotated, ObjectGlobs, RequireIdentity, SetNamespace, SourceAnnotations,
};
use super::error::ManifestError;
use super::object::Manifest;
use super::scope::{ScopeLookup, WithCrds};
use super::source::{Limits, PathSource, Stdin};
use super::visitor::{
    collect, ContinueOnError, Decorated, Decorator, Filtered, Flatten, ManifestList, Unique,
    Visitor,
};
use crate::config::AppConfig;

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
    Paths(PathSource),
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
}

impl<'a> Builder<'a> {
    /// A builder for one app's paths in a checkout at `root`.
    ///
    /// # Errors
    /// An invalid glob in the app's settings.
    pub fn for_app(
        app: &AppConfig,
        root: &std::path::Path,
        limits: Limits,
        scopes: &'a dyn ScopeLookup,
    ) -> Result<Self, globset::Error> {
        Ok(Builder {
            input: Input::Paths(PathSource {
                root: root.to_path_buf(),
                prefix: String::new(),
                paths: app.path.clone(),
                include: globs(&app.include)?,
                exclude: globs(&app.exclude)?,
                limits,
            }),
            namespace: app.namespace.clone(),
            app: Some(app.name.clone()),
            commit: None,
            include_objects: globs(&app.include_objects)?,
            exclude_objects: globs(&app.exclude_objects)?,
            policy: ErrorPolicy::CollectAll,
            scopes,
        })
    }

    /// Runs the chain.
    ///
    /// # Errors
    /// The first error (fail-fast) or every error (collect-all), each naming its origin.
    pub fn render(&self) -> Result<Vec<Manifest>, ManifestError> {
        let source: &dyn Visitor = match &self.input {
            Input::Paths(p) => p,
            Input::Stdin(s) => s,
        };
        let raw_chain = Decorated {
            inner: Flatten(source),
            decorators: vec![Box::new(RequireIdentity)],
        };
        let (raw, mut errors) = self.run(&raw_chain);
        if self.policy == ErrorPolicy::FailFast && !errors.is_empty() {
            return Err(ManifestError::aggregate(errors).expect("not empty"));
        }
        let scopes = WithCrds::new(&raw, self.scopes);
        let mut decorators: Vec<Box<dyn Decorator + '_>> = vec![Box::new(SetNamespace {
            namespace: self.namespace.clone(),
            scopes: &scopes,
        })];
        if let Some(app) = &self.app {
            decorators.push(Box::new(AppLabel(app.clone())));
        }
        decorators.push(Box::new(SourceAnnotations {
            commit: self.commit.clone(),
        }));
        let chain = Unique(Decorated {
            inner: Filtered {
                inner: ManifestList(raw),
                filters: vec![
                    Box::new(IgnoreAnnotated),
                    Box::new(ObjectGlobs {
                        include: self.include_objects.clone(),
                        exclude: self.exclude_objects.clone(),
                    }),
                ],
            },
            decorators,
        });
        let (manifests, more) = self.run(&chain);
        errors.extend(more);
        match ManifestError::aggregate(errors) {
            Some(e) => Err(e),
            None => Ok(manifests),
        }
    }

    fn run(&self, chain: &dyn Visitor) -> (Vec<Manifest>, Vec<ManifestError>) {
        let result = match self.policy {
            ErrorPolicy::FailFast => return split(collect(chain)),
            ErrorPolicy::CollectAll => {
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
        };
        result
    }
}

fn split(r: Result<Vec<Manifest>, ManifestError>) -> (Vec<Manifest>, Vec<ManifestError>) {
    match r {
        Ok(m) => (m, Vec::new()),
        Err(e) => (Vec::new(), e.into_vec()),
    }
}

/// Compiles globs; `None` for an empty list.
///
/// # Errors
/// The first invalid glob.
pub fn globs(patterns: &[String]) -> Result<Option<GlobSet>, globset::Error> {
    if patterns.is_empty() {
        return Ok(None);
    }
    let mut set = GlobSetBuilder::new();
    for p in patterns {
        set.add(Glob::new(p)?);
    }
    set.build().map(Some)
}
