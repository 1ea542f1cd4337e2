//! What a set could not make, and why: an app refused, the combination at fault.
use super::super::AppConfig;
use super::SetError;

/// An app a set makes that does not run, and why: a name another app has, or a namespace
/// no set may reach. It is neither synced nor removed: its objects stay as they are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// The app's name.
    pub app: String,
    /// Its set.
    pub set: String,
    /// Its folder, when the set has folders.
    pub folder: Option<String>,
    /// Its ref, when the set has refs.
    pub git_ref: Option<String>,
    /// Its cluster.
    pub cluster: String,
    /// Why it does not run.
    pub why: String,
}

impl Refused {
    /// `app` refused for `why`.
    pub fn of(app: &AppConfig, why: String) -> Refused {
        Refused {
            app: app.name.clone(),
            set: app.set.clone().unwrap_or_default(),
            folder: app.folder.clone(),
            git_ref: app.preview.clone(),
            cluster: app.cluster.clone().unwrap_or_default(),
            why,
        }
    }

    /// The preview a set could not make (its name unknown: `-`), and why; any other
    /// error is handed back, for it holds back the whole set.
    pub fn unmade(error: SetError) -> Result<Refused, SetError> {
        match error {
            SetError::App {
                set,
                at,
                cluster,
                message,
            } if at.git_ref.is_some() => Ok(Refused {
                app: "-".into(),
                set,
                folder: at.folder,
                git_ref: at.git_ref,
                cluster,
                why: message,
            }),
            other => Err(other),
        }
    }
}

/// Which of a set's combinations an app is, but for its cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Combination {
    /// The folder, when the set has folders.
    pub folder: Option<String>,
    /// The ref, when the set has refs.
    pub git_ref: Option<String>,
    /// The list item, when the set has a list.
    pub item: Option<usize>,
}

impl std::fmt::Display for Combination {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(folder) = &self.folder {
            write!(f, ", folder {folder}")?;
        }
        if let Some(git_ref) = &self.git_ref {
            write!(f, ", ref {git_ref}")?;
        }
        if let Some(item) = self.item {
            write!(f, ", list item {item}")?;
        }
        Ok(())
    }
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "app {} (app set {}", self.app, self.set)?;
        if let Some(folder) = &self.folder {
            write!(f, ", folder {folder}")?;
        }
        if let Some(git_ref) = &self.git_ref {
            write!(f, ", ref {git_ref}")?;
        }
        write!(f, ", cluster {}): {}", self.cluster, self.why)
    }
}
