//! What the jobs page shows: its filters (state, handler, node, a search by name),
//! the page of them asked for, and the links that keep both.

use std::fmt::Write as _;

use scheduler_core::{Cursor, ListQuery};
use serde::Deserialize;

use crate::link;
use crate::problem::Problem;
use crate::query::Address;

/// A state a job can be filtered by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum State {
    /// Its latest run did not succeed.
    Failing,
    /// A pause is in force (anywhere).
    Paused,
    /// Not paused, and the tick after the one it last took was due more than
    /// [`LATE_GRACE`](super::view::LATE_GRACE) ago.
    Late,
    /// A run holds its lease now.
    Running,
}

impl State {
    pub(crate) const ALL: [State; 4] = [State::Failing, State::Paused, State::Late, State::Running];

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            State::Failing => "failing",
            State::Paused => "paused",
            State::Late => "late",
            State::Running => "running",
        }
    }
}

/// The jobs page's address, as written.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct JobsQuery {
    /// Only names containing this (ASCII-case-insensitive).
    #[serde(default)]
    pub(crate) q: String,
    #[serde(default)]
    state: String,
    #[serde(default)]
    pub(crate) handler: String,
    #[serde(default)]
    pub(crate) node: String,
    /// The page after this name.
    #[serde(default)]
    after: Option<String>,
    /// The page before this name.
    #[serde(default)]
    before: Option<String>,
    /// `last`: the last page.
    #[serde(default)]
    page: String,
    /// Where the page starts in the whole, 1-based, as the links carry it.
    #[serde(default)]
    at: Option<u64>,
    /// What older links say for `after`.
    #[serde(default)]
    schedules_after: Option<String>,
}

impl Address for JobsQuery {
    const USAGE: &'static str = "jobs[?q=TEXT][&state=failing|paused|late|running][&handler=NAME]\
         [&node=NODE][&after=NAME|&before=NAME|&page=last][&refresh=5|15|60]";
}

/// The filters and the page, checked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Filters {
    pub(crate) search: String,
    pub(crate) state: Option<State>,
    pub(crate) handler: Option<String>,
    pub(crate) node: Option<String>,
    pub(crate) cursor: Cursor,
    /// Where the page starts in the whole, when known (1-based).
    pub(crate) at: Option<u64>,
}

impl JobsQuery {
    /// The filters it asks for, or a `400` in words.
    pub(crate) fn filters(self) -> Result<Filters, Problem> {
        let state = match self.state.trim() {
            "" | "any" => None,
            s => Some(
                State::ALL
                    .into_iter()
                    .find(|state| state.as_str() == s)
                    .ok_or_else(|| {
                        Problem::bad_request(format!(
                            "state {s:?} is not one the jobs page filters by: failing, paused, \
                             late or running (or leave it out for every job)"
                        ))
                    })?,
            ),
        };
        let after = self.after.or(self.schedules_after);
        let cursor = match (after, self.before, self.page.as_str()) {
            (None, None, "" | "first") => Cursor::First,
            (Some(a), None, "") => Cursor::After(a),
            (None, Some(b), "") => Cursor::Before(b),
            (None, None, "last") => Cursor::Last,
            _ => {
                return Err(Problem::bad_request(format!(
                    "the address asks for more than one page (after, before, page=last), or a \
                     page other than first or last; this page's address is {}",
                    Self::USAGE
                )));
            }
        };
        let some = |s: String| Some(s.trim().to_owned()).filter(|s| !s.is_empty());
        Ok(Filters {
            search: self.q.trim().to_owned(),
            state,
            handler: some(self.handler),
            node: some(self.node),
            at: self.at.filter(|_| !matches!(cursor, Cursor::First)),
            cursor,
        })
    }
}

impl Filters {
    /// Whether any filter is set.
    pub(crate) fn any(&self) -> bool {
        !self.search.is_empty()
            || self.state.is_some()
            || self.handler.is_some()
            || self.node.is_some()
    }

    /// The store's query for a page of `limit` rows with these filters.
    pub(crate) fn list_query(&self, limit: u32) -> ListQuery {
        let mut q = ListQuery::new(limit).search(self.search.clone());
        q.handler = self.handler.clone();
        q.node = self.node.clone();
        q.held = (self.state == Some(State::Running)).then_some(true);
        q.cursor = self.cursor.clone();
        q
    }

    /// The jobs page with these filters at `cursor` (starting at `at` in the whole,
    /// when known), the refresh kept.
    pub(crate) fn link(&self, cursor: &Cursor, at: Option<u64>) -> String {
        let mut href = format!("{}?", link::JOBS);
        let mut pair = |k: &str, v: &str| {
            let _ = write!(href, "{k}={}&", link::encode(v));
        };
        if !self.search.is_empty() {
            pair("q", &self.search);
        }
        if let Some(state) = self.state {
            pair("state", state.as_str());
        }
        if let Some(handler) = &self.handler {
            pair("handler", handler);
        }
        if let Some(node) = &self.node {
            pair("node", node);
        }
        match cursor {
            Cursor::First => {}
            Cursor::After(name) => pair("after", name),
            Cursor::Before(name) => pair("before", name),
            Cursor::Last => pair("page", "last"),
        }
        if let (Some(at), false) = (at, matches!(cursor, Cursor::First)) {
            pair("at", &at.to_string());
        }
        let href = href.trim_end_matches(['&', '?']);
        link::kept(href)
    }

    /// Whether `name` matches the search.
    pub(crate) fn matches_name(&self, name: &str) -> bool {
        ListQuery::new(1)
            .search(self.search.clone())
            .matches_name(name)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn filters(query: &str) -> Result<Filters, Problem> {
        let uri: axum::http::Uri = format!("/jobs?{query}").parse().unwrap();
        let axum::extract::Query(q) =
            axum::extract::Query::<JobsQuery>::try_from_uri(&uri).unwrap();
        q.filters()
    }

    #[test]
    fn filters_are_read_and_written_back() {
        let f = filters("q=rep&state=late&handler=h&node=n1&after=b").unwrap();
        assert_eq!(f.state, Some(State::Late));
        assert_eq!(f.cursor, Cursor::After("b".into()));
        assert_eq!(
            f.link(&Cursor::Before("x y".into()), Some(51)),
            "./jobs?q=rep&state=late&handler=h&node=n1&before=x%20y&at=51"
        );
        assert_eq!(
            f.link(&Cursor::First, Some(1)),
            "./jobs?q=rep&state=late&handler=h&node=n1"
        );
        assert_eq!(
            Filters::default().link(&Cursor::Last, None),
            "./jobs?page=last"
        );
        assert_eq!(Filters::default().link(&Cursor::First, None), "./jobs");
        assert_eq!(filters("state=&q=").unwrap(), Filters::default());
        assert_eq!(
            filters("schedules_after=c").unwrap().cursor,
            Cursor::After("c".into())
        );
    }

    #[test]
    fn unknown_states_and_two_pages_are_refused() {
        assert!(
            filters("state=stuck")
                .unwrap_err()
                .message()
                .contains("failing, paused")
        );
        assert!(filters("after=a&before=b").is_err());
        assert!(filters("page=7").is_err());
    }
}
