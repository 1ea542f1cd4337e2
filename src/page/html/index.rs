//! `/`: every app, with the filter by name, status and cluster (`index.html`).

use askama::Template;
use jiff::Timestamp;

use super::{rendered, status_word, Cells, Frame};
use crate::page::board::AppState;

/// The filter of `/`: a name part and a status word.
#[derive(Debug, Default)]
pub struct Filter {
    /// Part of the app's name.
    pub name: String,
    /// One of [`super::STATUS_WORDS`], or empty.
    pub outcome: String,
    /// A cluster's name, or empty.
    pub cluster: String,
}

impl Filter {
    /// Whether `app`'s row is shown.
    fn keeps(&self, app: &AppState) -> bool {
        app.name.contains(&self.name)
            && (self.outcome.is_empty() || self.selects(status_word(app)))
            && (self.cluster.is_empty() || self.cluster == app.cluster)
    }

    /// Whether the outcome list has `word` selected.
    fn selects(&self, word: &str) -> bool {
        self.outcome == word
    }
}

/// One app's row: hidden when the filter leaves it out (the script filters again as
/// the apps change).
struct Row<'a> {
    app: &'a AppState,
    cells: Cells<'a>,
    hidden: bool,
}

/// `/`.
#[derive(Template)]
#[template(path = "index.html")]
struct Index<'a> {
    frame: Frame<'a>,
    filter: &'a Filter,
    rows: Vec<Row<'a>>,
    /// How many rows the filter keeps.
    shown: usize,
    /// The apps' clusters, when there are several (a column and a filter then).
    clusters: Vec<&'a str>,
}

/// `/`: every app.
pub fn index(apps: &[AppState], filter: &Filter, now: Timestamp) -> String {
    let rows: Vec<Row> = apps
        .iter()
        .map(|app| Row {
            app,
            cells: Cells::new(app, now),
            hidden: !filter.keeps(app),
        })
        .collect();
    let mut clusters: Vec<&str> = apps.iter().map(|a| a.cluster.as_str()).collect();
    clusters.sort_unstable();
    clusters.dedup();
    if clusters.len() < 2 {
        clusters.clear();
    }
    rendered(&Index {
        clusters,
        frame: Frame {
            title: "Apps".into(),
            page: "index",
            app: None,
        },
        filter,
        shown: rows.iter().filter(|r| !r.hidden).count(),
        rows,
    })
}
