//! `/`: the apps, a page at a time, with the filter by name, status and cluster
//! (`index.html`).

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

/// Apps on one page of `/` (and of `/api/apps` and `/api/events`): what one answer holds
/// at most, whatever the number of apps.
pub const PAGE_APPS: usize = 250;

impl Filter {
    /// Whether `app` is kept.
    pub fn keeps(&self, app: &AppState) -> bool {
        app.name.contains(&self.name)
            && (self.outcome.is_empty() || self.selects(status_word(app)))
            && (self.cluster.is_empty() || self.cluster == app.cluster)
    }

    /// Whether the outcome list has `word` selected.
    fn selects(&self, word: &str) -> bool {
        self.outcome == word
    }

    /// The query of page `number` under this filter.
    fn query(&self, number: usize) -> String {
        let mut query = form_urlencoded::Serializer::new(String::new());
        for (key, value) in [
            ("name", &self.name),
            ("outcome", &self.outcome),
            ("cluster", &self.cluster),
        ] {
            if !value.is_empty() {
                query.append_pair(key, value);
            }
        }
        query.append_pair("page", &number.to_string());
        format!("?{}", query.finish())
    }
}

/// One page of the apps a filter keeps.
#[derive(Debug)]
pub struct IndexPage {
    /// The filter.
    pub filter: Filter,
    /// Its number, from 1.
    pub number: usize,
    /// Its apps, by name.
    pub apps: Vec<AppState>,
    /// How many apps the filter keeps.
    pub kept: usize,
    /// How many apps there are.
    pub all: usize,
    /// The apps' clusters.
    pub clusters: Vec<String>,
    /// The apps the sets make that do not run, each with why (the first of them).
    pub refused: Vec<String>,
    /// How many apps are refused.
    pub refused_count: usize,
    /// The app sets that keep their last apps, each with why (`app set NAME: …`).
    pub held_sets: Vec<String>,
    /// The image policies, as their last scan left them.
    pub images: Vec<ImagePolicyRow>,
    /// The newest image write-backs, newest first.
    pub writes: Vec<WriteBackRow>,
}

/// An image policy's row: the newest tag it saw, the tags it skips, the fields paused.
#[derive(Debug)]
pub struct ImagePolicyRow {
    pub policy: String,
    pub latest: String,
    pub failed: String,
    pub paused: usize,
}

/// An image write-back's row.
#[derive(Debug)]
pub struct WriteBackRow {
    pub at: String,
    pub commit: String,
    pub branch: String,
    pub changes: String,
}

impl IndexPage {
    /// How many pages the apps kept fill.
    pub fn pages(&self) -> usize {
        self.kept.div_ceil(PAGE_APPS).max(1)
    }
}

/// One app's row.
struct Row<'a> {
    app: &'a AppState,
    cells: Cells<'a>,
}

/// `/`.
#[derive(Template)]
#[template(path = "index.html")]
struct Index<'a> {
    frame: Frame<'a>,
    filter: &'a Filter,
    rows: Vec<Row<'a>>,
    /// How many apps the filter keeps, and how many there are.
    kept: usize,
    all: usize,
    /// The page's number and how many there are, and the links to the others.
    number: usize,
    pages: usize,
    previous: Option<String>,
    next: Option<String>,
    /// The apps' clusters, when there are several (a column and a filter then).
    clusters: Vec<&'a str>,
    /// The refused apps named, and how many there are.
    refused: &'a [String],
    refused_count: usize,
    /// The app sets that keep their last apps, and why.
    held_sets: &'a [String],
    images: &'a [ImagePolicyRow],
    writes: &'a [WriteBackRow],
}

/// `/`: one page of the apps.
pub fn index(page: &IndexPage, now: Timestamp) -> String {
    let rows: Vec<Row> = (page.apps.iter())
        .map(|app| Row {
            app,
            cells: Cells::new(app, now),
        })
        .collect();
    let mut clusters: Vec<&str> = page.clusters.iter().map(String::as_str).collect();
    if clusters.len() < 2 {
        clusters.clear();
    }
    let pages = page.pages();
    let link = |number: usize| page.filter.query(number);
    rendered(&Index {
        clusters,
        frame: Frame {
            title: "Apps".into(),
            page: "index",
            app: None,
        },
        filter: &page.filter,
        kept: page.kept,
        all: page.all,
        number: page.number,
        pages,
        previous: (page.number > 1).then(|| link(page.number - 1)),
        next: (page.number < pages).then(|| link(page.number + 1)),
        rows,
        refused: &page.refused,
        refused_count: page.refused_count,
        held_sets: &page.held_sets,
        images: &page.images,
        writes: &page.writes,
    })
}
