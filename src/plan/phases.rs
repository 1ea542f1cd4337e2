//! Where an object goes in the one ordered sync, without I/O: `pre` hooks → waves, lowest
//! first (each applied, then waited healthy, before the next) → `post` hooks; on failure
//! the `fail` hooks. Read from berth's annotations, Argo CD's and Helm's — the one table
//! in `docs/ordering.md` — in that order of precedence.

use crate::manifest::{Manifest, HOOK_ANNOTATIONS};

/// `berth.dev/wave: "-1"`: the object's wave (default 0), or a hook's order in its phase.
pub const WAVE: &str = "berth.dev/wave";
/// `berth.dev/hook: pre|post|fail` (several: `pre,post`).
pub const HOOK: &str = HOOK_ANNOTATIONS[0];
/// `berth.dev/hook-delete: before|succeeded|failed` (several: `before,succeeded`).
pub const HOOK_DELETE: &str = "berth.dev/hook-delete";
const ARGO_WAVE: &str = "argocd.argoproj.io/sync-wave";
const ARGO_HOOK: &str = HOOK_ANNOTATIONS[1];
const ARGO_DELETE: &str = "argocd.argoproj.io/hook-delete-policy";
const HELM_HOOK: &str = HOOK_ANNOTATIONS[2];
const HELM_WEIGHT: &str = "helm.sh/hook-weight";
const HELM_DELETE: &str = "helm.sh/hook-delete-policy";

/// When a hook runs.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum HookPhase {
    /// Before any object of the app is written.
    Pre,
    /// With its wave (Argo CD's `Sync`): once the wave's objects are healthy.
    Sync,
    /// After every wave is healthy and the prune is done.
    Post,
    /// When the sync fails after its dry run passed.
    Fail,
}

impl HookPhase {
    /// `pre`, `sync`, `post`, `fail`.
    pub fn as_str(self) -> &'static str {
        match self {
            HookPhase::Pre => "pre",
            HookPhase::Sync => "sync",
            HookPhase::Post => "post",
            HookPhase::Fail => "fail",
        }
    }
}

/// When a hook's object is deleted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeletePolicy {
    /// Before the hook runs again (the one of the last run, found by its labels).
    pub before: bool,
    /// As soon as it succeeded.
    pub succeeded: bool,
    /// As soon as it failed.
    pub failed: bool,
}

/// A hook: an object created on each sync that changes something, waited on, and deleted
/// by its policy; never an inventory object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hook {
    /// The phases it runs in (Argo CD allows `PreSync,PostSync`).
    pub phases: Vec<HookPhase>,
    /// Its order in its phase, lowest first (`berth.dev/wave`, Argo CD's sync wave, Helm's
    /// hook weight).
    pub wave: i32,
    /// When its object is deleted.
    pub delete: DeletePolicy,
}

/// Where an object goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Place {
    /// An object of the app, applied in this wave.
    Wave(i32),
    /// A hook.
    Hook(Hook),
    /// Not applied by this sync: why (Argo CD's `Skip`; a Helm hook for another event).
    Skip(String),
}

/// An annotation berth cannot read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{origin}: {kind} {name}: annotation {key}: {message}")]
pub struct PhaseError {
    /// Where the object came from.
    pub origin: String,
    /// Its kind.
    pub kind: String,
    /// Its name (or generateName).
    pub name: String,
    /// The annotation.
    pub key: &'static str,
    /// What is wrong, and what it may be.
    pub message: String,
}

/// What one word of a hook annotation means for this sync.
enum Word {
    /// The hook runs in this phase.
    Phase(HookPhase),
    /// Not on this sync (a Helm hook of another event, Argo CD's `PostDelete`).
    NotNow,
    /// The object is not applied at all (Argo CD's `Skip`).
    Skip,
    /// Not a word of this annotation.
    Unknown,
}

/// One tool's hook annotations: its keys and its words.
struct Dialect {
    /// The hook annotation.
    hook: &'static str,
    /// The words it takes, for an error.
    phases: &'static str,
    /// A word of it, on the app's first sync (`false`) or a later one.
    word: fn(&str, bool) -> Word,
    /// Its delete-policy annotation.
    delete: &'static str,
    /// That annotation's words for: before the next run, once succeeded, once failed.
    deletes: [&'static str; 3],
    /// The annotation ordering its hooks in their phase.
    order: &'static str,
}

/// berth's, Argo CD's and Helm's hook annotations, in order of precedence.
const DIALECTS: [Dialect; 3] = [
    Dialect {
        hook: HOOK,
        phases: "pre, post or fail",
        word: |w, _| match w {
            "pre" => Word::Phase(HookPhase::Pre),
            "post" => Word::Phase(HookPhase::Post),
            "fail" => Word::Phase(HookPhase::Fail),
            _ => Word::Unknown,
        },
        delete: HOOK_DELETE,
        deletes: ["before", "succeeded", "failed"],
        order: WAVE,
    },
    Dialect {
        hook: ARGO_HOOK,
        phases: "PreSync, Sync, PostSync, SyncFail, PostDelete or Skip",
        word: |w, _| match w {
            "PreSync" => Word::Phase(HookPhase::Pre),
            "Sync" => Word::Phase(HookPhase::Sync),
            "PostSync" => Word::Phase(HookPhase::Post),
            "SyncFail" => Word::Phase(HookPhase::Fail),
            "Skip" => Word::Skip,
            // Argo CD runs it when the application is deleted, never on a sync.
            "PostDelete" => Word::NotNow,
            _ => Word::Unknown,
        },
        delete: ARGO_DELETE,
        deletes: ["BeforeHookCreation", "HookSucceeded", "HookFailed"],
        order: ARGO_WAVE,
    },
    Dialect {
        hook: HELM_HOOK,
        phases: "a Helm hook (pre-install, pre-upgrade, post-install, post-upgrade, test, pre-delete, post-delete, pre-rollback, post-rollback)",
        word: |w, upgrade| match (w, upgrade) {
            ("pre-install", false) | ("pre-upgrade", true) => Word::Phase(HookPhase::Pre),
            ("post-install", false) | ("post-upgrade", true) => Word::Phase(HookPhase::Post),
            (
                "pre-install" | "pre-upgrade" | "post-install" | "post-upgrade" | "test"
                | "test-success" | "pre-delete" | "post-delete" | "pre-rollback"
                | "post-rollback",
                _,
            ) => Word::NotNow,
            _ => Word::Unknown,
        },
        delete: HELM_DELETE,
        deletes: ["before-hook-creation", "hook-succeeded", "hook-failed"],
        order: HELM_WEIGHT,
    },
];

/// Where `m` goes in a sync; `upgrade`: the app synced before (Helm's `*-upgrade` hooks
/// run, its `*-install` ones do not).
///
/// # Errors
/// An ordering annotation berth cannot read (a wave that is not a whole number, an unknown
/// hook or delete policy).
pub fn place(m: &Manifest, upgrade: bool) -> Result<Place, PhaseError> {
    let error = |key: &'static str, message: String| PhaseError {
        origin: m.origin.to_string(),
        kind: m.kind().to_string(),
        name: display_name(m),
        key,
        message,
    };
    let wave = |key: &'static str| -> Result<Option<i32>, PhaseError> {
        m.annotation(key)
            .map(|v| {
                v.trim()
                    .parse::<i32>()
                    .map_err(|_| error(key, format!("{v:?} is not a whole number")))
            })
            .transpose()
    };
    let Some((d, value)) = DIALECTS
        .iter()
        .find_map(|d| Some((d, m.annotation(d.hook)?)))
    else {
        return Ok(Place::Wave(wave(WAVE)?.or(wave(ARGO_WAVE)?).unwrap_or(0)));
    };
    let mut phases = Vec::new();
    for w in list(value) {
        match (d.word)(w, upgrade) {
            Word::Phase(p) if !phases.contains(&p) => phases.push(p),
            Word::Phase(_) | Word::NotNow => {}
            Word::Skip => return Ok(Place::Skip(format!("{}: {w}", d.hook))),
            Word::Unknown => return Err(error(d.hook, format!("{w:?} is not {}", d.phases))),
        }
    }
    if phases.is_empty() {
        let event = if upgrade {
            "an upgrade"
        } else {
            "the first sync"
        };
        return Ok(Place::Skip(format!(
            "{}: {value}: not run by {event}",
            d.hook
        )));
    }
    let mut delete = DeletePolicy::default();
    match m.annotation(d.delete) {
        None => delete.before = true, // what all three do by default
        Some(value) => {
            for w in list(value) {
                let [before, succeeded, failed] = d.deletes;
                match w {
                    _ if w == before => delete.before = true,
                    _ if w == succeeded => delete.succeeded = true,
                    _ if w == failed => delete.failed = true,
                    _ => {
                        let known = format!("{before}, {succeeded} or {failed}");
                        return Err(error(d.delete, format!("{w:?} is not {known}")));
                    }
                }
            }
        }
    }
    Ok(Place::Hook(Hook {
        phases,
        wave: wave(WAVE)?.or(wave(d.order)?).unwrap_or(0),
        delete,
    }))
}

/// The wave of an object of the app (0 when it names none, or cannot be read: the render
/// refused those already).
pub fn wave_of(m: &Manifest) -> i32 {
    match place(m, true) {
        Ok(Place::Wave(w)) => w,
        _ => 0,
    }
}

/// The name an object is shown by: its name, else its `generateName` followed by `*`.
pub fn display_name(m: &Manifest) -> String {
    match m.generate_name().filter(|_| m.name().is_empty()) {
        Some(generated) => format!("{generated}*"),
        None => m.name().to_string(),
    }
}

/// The comma-separated items of an annotation.
fn list(value: &str) -> impl Iterator<Item = &str> {
    value.split(',').map(str::trim).filter(|p| !p.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::Origin;

    fn with(annotations: &[(&str, &str)]) -> Manifest {
        let annotations: serde_json::Map<String, serde_json::Value> = annotations
            .iter()
            .map(|(k, v)| (k.to_string(), serde_json::Value::from(*v)))
            .collect();
        Manifest {
            decrypted: Vec::new(),
            object: serde_json::json!({"apiVersion": "batch/v1", "kind": "Job",
                "metadata": {"generateName": "migrate-", "annotations": annotations}})
            .as_object()
            .cloned()
            .unwrap_or_default(),
            origin: Origin {
                document: 1,
                line: 3,
                ..Origin::file("jobs.yaml")
            },
        }
    }

    fn hook(phases: &[HookPhase], wave: i32, before: bool, succeeded: bool, failed: bool) -> Place {
        Place::Hook(Hook {
            phases: phases.to_vec(),
            wave,
            delete: DeletePolicy {
                before,
                succeeded,
                failed,
            },
        })
    }

    #[test]
    fn objects_go_in_their_wave() {
        assert_eq!(place(&with(&[]), false).unwrap(), Place::Wave(0));
        assert_eq!(
            place(&with(&[(WAVE, "-1")]), false).unwrap(),
            Place::Wave(-1)
        );
        assert_eq!(
            place(&with(&[(ARGO_WAVE, "2")]), false).unwrap(),
            Place::Wave(2)
        );
        assert_eq!(
            place(&with(&[(WAVE, "1"), (ARGO_WAVE, "2")]), false).unwrap(),
            Place::Wave(1),
            "berth's own annotation wins"
        );
        let e = place(&with(&[(WAVE, "first")]), false)
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "jobs.yaml:3 (document 1): Job migrate-*: annotation berth.dev/wave: \"first\" is not a whole number"
        );
    }

    #[test]
    fn berths_hooks() {
        use HookPhase::*;
        assert_eq!(
            place(&with(&[(HOOK, "pre"), (WAVE, "-2")]), true).unwrap(),
            hook(&[Pre], -2, true, false, false)
        );
        assert_eq!(
            place(
                &with(&[(HOOK, "post, fail"), (HOOK_DELETE, "succeeded")]),
                true
            )
            .unwrap(),
            hook(&[Post, Fail], 0, false, true, false)
        );
        let e = place(&with(&[(HOOK, "after")]), true)
            .unwrap_err()
            .to_string();
        assert!(
            e.ends_with("annotation berth.dev/hook: \"after\" is not pre, post or fail"),
            "{e}"
        );
    }

    #[test]
    fn argo_cds_hooks() {
        use HookPhase::*;
        assert_eq!(
            place(
                &with(&[
                    (ARGO_HOOK, "PreSync"),
                    (ARGO_DELETE, "HookSucceeded,BeforeHookCreation"),
                    (ARGO_WAVE, "-1")
                ]),
                true
            )
            .unwrap(),
            hook(&[Pre], -1, true, true, false)
        );
        assert_eq!(
            place(
                &with(&[(ARGO_HOOK, "SyncFail"), (ARGO_DELETE, "HookFailed")]),
                false
            )
            .unwrap(),
            hook(&[Fail], 0, false, false, true)
        );
        assert_eq!(
            place(&with(&[(ARGO_HOOK, "Sync")]), false).unwrap(),
            hook(&[Sync], 0, true, false, false)
        );
        assert!(matches!(
            place(&with(&[(ARGO_HOOK, "Skip")]), false).unwrap(),
            Place::Skip(_)
        ));
        assert!(matches!(
            place(&with(&[(ARGO_HOOK, "PostDelete")]), false).unwrap(),
            Place::Skip(_)
        ));
        assert!(place(
            &with(&[(ARGO_DELETE, "Never"), (ARGO_HOOK, "PostSync")]),
            false
        )
        .is_err());
    }

    #[test]
    fn helms_hooks_run_on_install_or_upgrade_and_tests_never() {
        use HookPhase::*;
        let both = with(&[(HELM_HOOK, "pre-install,pre-upgrade"), (HELM_WEIGHT, "5")]);
        assert_eq!(
            place(&both, false).unwrap(),
            hook(&[Pre], 5, true, false, false)
        );
        assert_eq!(
            place(&both, true).unwrap(),
            hook(&[Pre], 5, true, false, false)
        );
        let install = with(&[(HELM_HOOK, "post-install"), (HELM_DELETE, "hook-succeeded")]);
        assert_eq!(
            place(&install, false).unwrap(),
            hook(&[Post], 0, false, true, false)
        );
        assert_eq!(
            place(&install, true).unwrap(),
            Place::Skip("helm.sh/hook: post-install: not run by an upgrade".into())
        );
        assert!(matches!(
            place(&with(&[(HELM_HOOK, "test")]), false).unwrap(),
            Place::Skip(_)
        ));
        assert!(place(&with(&[(HELM_HOOK, "pre-instal")]), false).is_err());
    }
}
