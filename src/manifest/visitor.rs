//! The [`Visitor`] trait and its combinators, after kubectl's resource Builder
//! (cli-runtime `visitor.go`): a visitor hands each item, or the error in its place, to a
//! callback; wrappers flatten lists, decorate, filter, check uniqueness and choose the
//! error policy. What the callback returns decides whether the walk goes on.

use std::collections::HashMap;

use serde_json::Value;

use super::error::ManifestError;
use super::object::{Manifest, ObjectKey, Origin};

/// What a visitor hands to its callback: a manifest, or the error in its place.
pub type Item = Result<Manifest, ManifestError>;

/// The callback's answer: `Err` stops the walk (unless a policy collects it).
pub type Flow = Result<(), ManifestError>;

/// Something that yields manifests.
pub trait Visitor {
    /// Hands each item to `f` in order; stops at the first `Err` that `f` returns.
    ///
    /// # Errors
    /// The error that stopped the walk.
    fn visit(&self, f: &mut dyn FnMut(Item) -> Flow) -> Flow;
}

impl<V: Visitor + ?Sized> Visitor for &V {
    fn visit(&self, f: &mut dyn FnMut(Item) -> Flow) -> Flow {
        (**self).visit(f)
    }
}

/// Changes a manifest in place (set a namespace, add a label).
pub trait Decorator {
    /// # Errors
    /// When the manifest cannot be decorated; it is then passed on as an error.
    fn decorate(&self, m: &mut Manifest) -> Result<(), ManifestError>;
}

/// Keeps or drops a manifest, quietly.
pub trait Filter {
    /// True to keep it.
    fn keep(&self, m: &Manifest) -> bool;
}

/// Visitors one after the other (kubectl's `VisitorList`).
pub struct VisitorList(pub Vec<Box<dyn Visitor>>);

impl Visitor for VisitorList {
    fn visit(&self, f: &mut dyn FnMut(Item) -> Flow) -> Flow {
        self.0.iter().try_for_each(|v| v.visit(f))
    }
}

/// A fixed list of manifests (kubectl's `InfoListVisitor`).
pub struct ManifestList(pub Vec<Manifest>);

impl Visitor for ManifestList {
    fn visit(&self, f: &mut dyn FnMut(Item) -> Flow) -> Flow {
        self.0.iter().try_for_each(|m| f(Ok(m.clone())))
    }
}

/// A list of manifests handed on without a copy: visited once; a second visit yields
/// nothing (the builder's second pass, over what the first one kept).
pub struct Once(pub std::cell::RefCell<Vec<Manifest>>);

impl Visitor for Once {
    fn visit(&self, f: &mut dyn FnMut(Item) -> Flow) -> Flow {
        let manifests = std::mem::take(&mut *self.0.borrow_mut());
        manifests.into_iter().try_for_each(|m| f(Ok(m)))
    }
}

/// Expands `kind: List` and `*List` objects into their items, nested lists included.
pub struct Flatten<V>(pub V);

impl<V: Visitor> Visitor for Flatten<V> {
    fn visit(&self, f: &mut dyn FnMut(Item) -> Flow) -> Flow {
        self.0.visit(&mut |item| match item {
            Ok(m) if is_list(&m) => flatten(m, f),
            other => f(other),
        })
    }
}

fn is_list(m: &Manifest) -> bool {
    m.kind().ends_with("List") && m.object.get("items").is_some()
}

fn flatten(list: Manifest, f: &mut dyn FnMut(Item) -> Flow) -> Flow {
    let Manifest {
        mut object,
        origin,
        decrypted,
    } = list;
    let Some(Value::Array(items)) = object.remove("items") else {
        return f(Err(ManifestError::Invalid {
            origin,
            message: "a List's items must be a sequence".into(),
        }));
    };
    for (i, item) in items.into_iter().enumerate() {
        let origin = Origin {
            item: Some(i + 1),
            ..origin.clone()
        };
        let item = match item {
            Value::Object(object) => Manifest {
                object,
                origin,
                // A value decrypted in the list stays marked in its item.
                decrypted: decrypted
                    .iter()
                    .filter_map(|p| p.strip_prefix(&format!("/items/{i}")))
                    .filter(|rest| rest.starts_with('/'))
                    .map(str::to_string)
                    .collect(),
            },
            other => {
                f(Err(ManifestError::NotAnObject {
                    origin,
                    found: json_type(&other),
                }))?;
                continue;
            }
        };
        if is_list(&item) {
            flatten(item, f)?;
        } else {
            f(Ok(item))?;
        }
    }
    Ok(())
}

/// The name of a JSON value's type, for messages.
pub fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "nothing",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}

/// Runs decorators in order on each manifest (kubectl's `DecoratedVisitor`); a
/// decorator's error replaces the manifest.
pub struct Decorated<'a, V> {
    /// The wrapped visitor.
    pub inner: V,
    /// Applied in order.
    pub decorators: Vec<Box<dyn Decorator + 'a>>,
}

impl<V: Visitor> Visitor for Decorated<'_, V> {
    fn visit(&self, f: &mut dyn FnMut(Item) -> Flow) -> Flow {
        self.inner.visit(&mut |item| {
            f(item.and_then(|mut m| {
                for d in &self.decorators {
                    d.decorate(&mut m)?;
                }
                Ok(m)
            }))
        })
    }
}

/// Drops manifests that any filter rejects (kubectl's `FilteredVisitor`).
pub struct Filtered<V> {
    /// The wrapped visitor.
    pub inner: V,
    /// All must keep a manifest for it to pass.
    pub filters: Vec<Box<dyn Filter>>,
}

impl<V: Visitor> Visitor for Filtered<V> {
    fn visit(&self, f: &mut dyn FnMut(Item) -> Flow) -> Flow {
        self.inner.visit(&mut |item| match item {
            Ok(m) if !self.filters.iter().all(|flt| flt.keep(&m)) => Ok(()),
            other => f(other),
        })
    }
}

/// Turns the second definition of an object into an error naming both places.
pub struct Unique<V>(pub V);

impl<V: Visitor> Visitor for Unique<V> {
    fn visit(&self, f: &mut dyn FnMut(Item) -> Flow) -> Flow {
        let mut seen: HashMap<ObjectKey, Origin> = HashMap::new();
        self.0.visit(&mut |item| {
            let Ok(m) = item else { return f(item) };
            if m.name().is_empty() {
                return f(Ok(m)); // a hook's generateName: a new object each run
            }
            let key = m.key();
            match seen.get(&key) {
                Some(first) => f(Err(ManifestError::Duplicate {
                    key: Box::new(key),
                    first: Box::new(first.clone()),
                    second: m.origin,
                })),
                None => {
                    seen.insert(key, m.origin.clone());
                    f(Ok(m))
                }
            }
        })
    }
}

/// The continue-on-error policy (kubectl's `ContinueOnErrorVisitor`): every error, from
/// the walk or from the callback, is collected and the walk goes on; the end result is
/// all of them. Without this wrapper the policy is fail-fast.
pub struct ContinueOnError<V>(pub V);

impl<V: Visitor> Visitor for ContinueOnError<V> {
    fn visit(&self, f: &mut dyn FnMut(Item) -> Flow) -> Flow {
        let mut errors = super::error::ErrorList::default();
        let walk = self.0.visit(&mut |item| {
            let result = match item {
                Ok(m) => f(Ok(m)),
                Err(e) => Err(e),
            };
            if let Err(e) = result {
                errors.push(e);
            }
            Ok(())
        });
        if let Err(e) = walk {
            errors.push(e);
        }
        ManifestError::aggregate(errors.into_vec()).map_or(Ok(()), Err)
    }
}

/// Runs a visitor and collects what it yields.
///
/// # Errors
/// The first error (fail-fast) or all of them (under [`ContinueOnError`]).
pub fn collect(v: &dyn Visitor) -> Result<Vec<Manifest>, ManifestError> {
    let mut out = Vec::new();
    v.visit(&mut |item| {
        out.push(item?);
        Ok(())
    })?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::object::test_manifest as m;
    use serde_json::json;

    fn cm(name: &str) -> Manifest {
        m(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}}))
    }

    struct Bad;
    impl Decorator for Bad {
        fn decorate(&self, m: &mut Manifest) -> Result<(), ManifestError> {
            if m.name().starts_with("bad") {
                return Err(ManifestError::Invalid {
                    origin: m.origin.clone(),
                    message: format!("{} is bad", m.name()),
                });
            }
            Ok(())
        }
    }

    #[test]
    fn flatten_expands_nested_lists_and_numbers_items() {
        let list = m(json!({"apiVersion": "v1", "kind": "List", "items": [
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}},
            {"apiVersion": "v1", "kind": "ConfigMapList", "items": [
                {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "b"}}
            ]},
        ]}));
        let got = collect(&Flatten(ManifestList(vec![list]))).unwrap();
        let names: Vec<_> = got.iter().map(|m| m.name()).collect();
        assert_eq!(names, ["a", "b"]);
        assert_eq!(got[0].origin.item, Some(1));
    }

    #[test]
    fn flatten_reports_items_that_are_not_objects() {
        let list = m(json!({"apiVersion": "v1", "kind": "List", "items": ["x"]}));
        let e = collect(&Flatten(ManifestList(vec![list]))).unwrap_err();
        assert!(
            e.to_string()
                .contains("item 1): a manifest must be a mapping"),
            "{e}"
        );
    }

    #[test]
    fn fail_fast_stops_at_first_error_and_continue_collects_all() {
        let list = || ManifestList(vec![cm("bad-1"), cm("ok"), cm("bad-2")]);
        let decorated = |v| Decorated {
            inner: v,
            decorators: vec![Box::new(Bad)],
        };
        let e = collect(&decorated(list())).unwrap_err();
        assert_eq!(e.to_string(), "f.yaml: bad-1 is bad");
        let e = collect(&ContinueOnError(decorated(list()))).unwrap_err();
        assert_eq!(e.into_vec().len(), 2);
    }

    #[test]
    fn unique_names_both_places() {
        let mut second = cm("a");
        second.origin = Origin {
            path: "g.yaml".into(),
            document: 2,
            line: 5,
            item: None,
        };
        let e = collect(&Unique(ManifestList(vec![cm("a"), second]))).unwrap_err();
        assert_eq!(
            e.to_string(),
            "ConfigMap a is defined twice: at f.yaml and at g.yaml:5 (document 2)"
        );
    }

    #[test]
    fn filtered_drops_quietly() {
        struct NotB;
        impl Filter for NotB {
            fn keep(&self, m: &Manifest) -> bool {
                m.name() != "b"
            }
        }
        let v = Filtered {
            inner: ManifestList(vec![cm("a"), cm("b")]),
            filters: vec![Box::new(NotB)],
        };
        assert_eq!(collect(&v).unwrap().len(), 1);
    }
}
