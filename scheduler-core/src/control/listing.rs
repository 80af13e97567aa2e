//! Lists that scale: a page of the leases or of the dynamic schedules by name
//! ([`ListQuery`] → [`Listing`]), filtered, searched and counted, and the run history
//! filtered ([`RunQuery`]).
//!
//! A page starts at a [`Cursor`]: the first rows, the rows after a name, the rows
//! before a name, or the last rows. The stores read a page from the index on the
//! name (keyset paging: `name > cursor ORDER BY name LIMIT n + 1`, backwards for
//! `Before` and `Last`) and count the rows matching the filters with the same
//! conditions, so a page costs the same on the first page as on the thousandth.
//! The functions here are what the [`Controls`](super::Controls) defaults, and the
//! memory store, compute from every row.

use chrono::{DateTime, Utc};

use super::{LeaseRow, Page, RunRow, ScheduleRow};
use crate::outcome::Outcome;

/// The most rows one page holds ([`ListQuery::limit`] is clamped to it).
pub const MAX_LIMIT: u32 = 1000;

/// Where a page of a list starts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Cursor {
    /// The first rows.
    #[default]
    First,
    /// The first rows whose name sorts after this one.
    After(String),
    /// The last rows whose name sorts before this one (returned ascending).
    Before(String),
    /// The last rows.
    Last,
}

/// Which rows of a list (leases or schedules, by name), and which page of them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListQuery {
    /// Only names containing this text, ASCII-case-insensitive; `""`: every name.
    /// `%` and `_` in it are literal (not `LIKE` wildcards).
    pub search: String,
    /// Schedules: only those bound to this handler (ignored for leases).
    pub handler: Option<String>,
    /// Leases: only those whose holder's node is this ([`LeaseRow::node`]; ignored
    /// for schedules).
    pub node: Option<String>,
    /// Leases: `Some(true)` only those held now (unreleased and unexpired by the
    /// store's clock), `Some(false)` only the others (ignored for schedules).
    pub held: Option<bool>,
    /// Where the page starts.
    pub cursor: Cursor,
    /// At most this many rows, clamped to `1..=`[`MAX_LIMIT`] ([`ListQuery::page_size`]).
    pub limit: u32,
}

impl ListQuery {
    /// The first page of every row, `limit` rows long.
    pub fn new(limit: u32) -> Self {
        Self {
            search: String::new(),
            handler: None,
            node: None,
            held: None,
            cursor: Cursor::First,
            limit,
        }
    }

    /// Only names containing `text` (ASCII-case-insensitive, wildcards literal).
    pub fn search(mut self, text: impl Into<String>) -> Self {
        self.search = text.into();
        self
    }

    /// Only schedules bound to `handler`.
    pub fn handler(mut self, handler: impl Into<String>) -> Self {
        self.handler = Some(handler.into());
        self
    }

    /// Only leases whose holder's node is `node`.
    pub fn node(mut self, node: impl Into<String>) -> Self {
        self.node = Some(node.into());
        self
    }

    /// Only leases held now (`true`) or only the others (`false`).
    pub fn held(mut self, held: bool) -> Self {
        self.held = Some(held);
        self
    }

    /// The page after `name`.
    pub fn after(mut self, name: impl Into<String>) -> Self {
        self.cursor = Cursor::After(name.into());
        self
    }

    /// The page before `name`.
    pub fn before(mut self, name: impl Into<String>) -> Self {
        self.cursor = Cursor::Before(name.into());
        self
    }

    /// The last page.
    pub fn last(mut self) -> Self {
        self.cursor = Cursor::Last;
        self
    }

    /// The page's size: [`limit`](Self::limit) clamped to `1..=`[`MAX_LIMIT`].
    pub fn page_size(&self) -> u32 {
        self.limit.clamp(1, MAX_LIMIT)
    }

    /// Whether `name` contains [`search`](Self::search), ASCII-case-insensitive.
    pub fn matches_name(&self, name: &str) -> bool {
        let (name, text) = (name.as_bytes(), self.search.as_bytes());
        text.is_empty()
            || name
                .windows(text.len())
                .any(|window| window.eq_ignore_ascii_case(text))
    }

    /// Whether lease `row` matches the filters, held or not as of `now`.
    pub fn matches_lease(&self, row: &LeaseRow, now: DateTime<Utc>) -> bool {
        self.matches_name(&row.name)
            && self
                .node
                .as_deref()
                .is_none_or(|node| row.node() == Some(node))
            && self.held.is_none_or(|held| row.held_at(now) == held)
    }

    /// Whether schedule `row` matches the filters (a removed one never does).
    pub fn matches_schedule(&self, row: &ScheduleRow) -> bool {
        !row.removed
            && self.matches_name(&row.name)
            && self
                .handler
                .as_deref()
                .is_none_or(|handler| row.handler == handler)
    }
}

/// A page of a list, and where it stands in the whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listing<T> {
    /// The page, ascending by name, at most the query's page size. `First`: the
    /// first rows; `After(n)`: the first names after `n`; `Before(n)`: the last
    /// names before `n`; `Last`: the last rows.
    pub rows: Vec<T>,
    /// How many rows match the filters, whatever the page.
    pub total: u64,
    /// Whether a row matching the filters sorts before the page's first row (for
    /// an empty page after `n`: before or at `n`).
    pub more_before: bool,
    /// Whether a row matching the filters sorts after the page's last row (for an
    /// empty page before `n`: at or after `n`).
    pub more_after: bool,
}

impl<T> Listing<T> {
    /// The page `query` asks for out of `matching`: every row matching its
    /// filters, ascending by `name`.
    pub fn of_matching(matching: Vec<T>, query: &ListQuery, name: impl Fn(&T) -> &str) -> Self {
        let total = matching.len() as u64;
        let size = usize::try_from(query.page_size()).unwrap_or(usize::MAX);
        // The page is `matching[start..end]`.
        let (start, end) = match &query.cursor {
            Cursor::First => (0, size.min(matching.len())),
            Cursor::After(after) => {
                let start = matching.partition_point(|row| name(row) <= after.as_str());
                (start, (start + size).min(matching.len()))
            }
            Cursor::Before(before) => {
                let end = matching.partition_point(|row| name(row) < before.as_str());
                (end.saturating_sub(size), end)
            }
            Cursor::Last => (matching.len().saturating_sub(size), matching.len()),
        };
        let more_after = end < matching.len();
        let rows: Vec<T> = matching.into_iter().take(end).skip(start).collect();
        Self {
            rows,
            total,
            more_before: start > 0,
            more_after,
        }
    }
}

/// Which runs of the run history: newest first, those with an id below
/// `page.before`, at most `page.limit`, matching every filter given.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunQuery {
    /// Only the runs of this job.
    pub job: Option<String>,
    /// Only the runs on this node.
    pub node: Option<String>,
    /// Only the runs that failed ([`RunQuery::FAILED`]: failed, cancelled, timed
    /// out, lease lost — [`Outcome::is_failure`]); not those that succeeded, were
    /// retried, cancelled by a newer tick or skipped.
    pub failed: bool,
    /// Which page: newest first, ids below `page.before`.
    pub page: Page,
}

impl RunQuery {
    /// The outcomes [`failed`](Self::failed) keeps: those of
    /// [`Outcome::is_failure`].
    pub const FAILED: &'static [Outcome] = &[
        Outcome::Failed,
        Outcome::Cancelled,
        Outcome::TimedOut,
        Outcome::LeaseLost,
    ];

    /// Only the runs of `job`.
    pub fn job(mut self, job: impl Into<String>) -> Self {
        self.job = Some(job.into());
        self
    }

    /// Only the runs on `node`.
    pub fn node(mut self, node: impl Into<String>) -> Self {
        self.node = Some(node.into());
        self
    }

    /// Only the runs that failed.
    pub fn failed(mut self) -> Self {
        self.failed = true;
        self
    }

    /// The page: ids below `page.before`, at most `page.limit`.
    pub fn page(mut self, page: Page) -> Self {
        self.page = page;
        self
    }

    /// Whether `run` matches the filters (not the page).
    pub fn matches(&self, run: &RunRow) -> bool {
        self.job.as_deref().is_none_or(|job| run.job == job)
            && self.node.as_deref().is_none_or(|node| run.node == node)
            && (!self.failed || run.outcome.is_failure())
    }
}

/// The page `query` asks for out of every lease, `now` telling which are held: what
/// the defaults of [`Controls::leases_listing`](super::Controls::leases_listing)
/// and of the memory store compute.
pub fn leases_of(rows: Vec<LeaseRow>, query: &ListQuery, now: DateTime<Utc>) -> Listing<LeaseRow> {
    let mut matching: Vec<LeaseRow> = rows
        .into_iter()
        .filter(|row| query.matches_lease(row, now))
        .collect();
    matching.sort_by(|a, b| a.name.cmp(&b.name));
    Listing::of_matching(matching, query, |row| row.name.as_str())
}

/// The page `query` asks for out of every schedule (removed ones left out): what
/// the default of [`Controls::schedules_listing`](super::Controls::schedules_listing)
/// computes.
pub fn schedules_of(rows: Vec<ScheduleRow>, query: &ListQuery) -> Listing<ScheduleRow> {
    let mut matching: Vec<ScheduleRow> = rows
        .into_iter()
        .filter(|row| query.matches_schedule(row))
        .collect();
    matching.sort_by(|a, b| a.name.cmp(&b.name));
    Listing::of_matching(matching, query, |row| row.name.as_str())
}

/// The runs `query` asks for, gathered from pages of the whole history (of its
/// job) read in turn: what the default of
/// [`Controls::runs_where`](super::Controls::runs_where) does.
#[derive(Debug)]
pub(crate) struct RunPages<'a> {
    query: &'a RunQuery,
    /// The next page to read; `None` once the history or the page is done.
    pub(crate) next: Option<Page>,
    pub(crate) found: Vec<RunRow>,
}

impl<'a> RunPages<'a> {
    pub(crate) fn new(query: &'a RunQuery) -> Self {
        Self {
            query,
            next: (query.page.limit > 0).then_some(query.page),
            found: Vec::new(),
        }
    }

    /// Takes the matching runs of `rows`, the page just read.
    pub(crate) fn read(&mut self, rows: Vec<RunRow>) {
        let Some(mut page) = self.next.take() else {
            return;
        };
        let short = rows.len() < usize::try_from(page.limit).unwrap_or(usize::MAX);
        page.before = rows.last().map(|run| run.id);
        self.found
            .extend(rows.into_iter().filter(|run| self.query.matches(run)));
        let limit = usize::try_from(self.query.page.limit).unwrap_or(usize::MAX);
        self.found.truncate(limit);
        if !short && self.found.len() < limit {
            self.next = Some(page);
        }
    }
}

impl LeaseRow {
    /// The node of its holder (`node:pid:random`): the holder up to its last two
    /// `:` (a node may contain `:`). `None` when it was never held, or its holder
    /// has not that shape.
    pub fn node(&self) -> Option<&str> {
        let holder = self.holder.as_deref()?;
        let mut parts = holder.rsplitn(3, ':');
        match (parts.next(), parts.next(), parts.next()) {
            (Some(_random), Some(_pid), Some(node)) => Some(node),
            _ => None,
        }
    }

    /// Whether it is held at `now`: not released, and not expired.
    pub fn held_at(&self, now: DateTime<Utc>) -> bool {
        self.released_at.is_none() && self.expires_at > now
    }
}

/// The jobs one [`Controls::recent_runs`](crate::Controls::recent_runs) reads: at
/// most [`MAX_LIMIT`], or [`Error::InvalidInput`](crate::Error::InvalidInput).
pub fn check_recent(jobs: &[String]) -> crate::Result<()> {
    if jobs.len() > MAX_LIMIT as usize {
        return Err(crate::Error::InvalidInput {
            reason: format!(
                "the recent runs of {} jobs were asked for in one read; at most {MAX_LIMIT} \
                 are read at once: ask a page at a time",
                jobs.len()
            ),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(name: &str, holder: Option<&str>) -> LeaseRow {
        LeaseRow {
            name: name.to_owned(),
            holder: holder.map(str::to_owned),
            tick: DateTime::UNIX_EPOCH,
            token: 1,
            expires_at: DateTime::UNIX_EPOCH,
            released_at: None,
        }
    }

    #[test]
    fn a_holders_node_is_all_but_its_last_two_parts() {
        for (holder, node) in [
            (Some("web-1:4242:00ff00ff00ff00ff"), Some("web-1")),
            (Some("eu:west:1:00ff"), Some("eu:west")),
            (Some("::x"), Some("")),
            (Some("odd"), None),
            (Some("a:b"), None),
            (None, None),
        ] {
            assert_eq!(lease("l", holder).node(), node, "{holder:?}");
        }
    }

    #[test]
    fn failed_is_every_failure() {
        let failures: Vec<Outcome> = Outcome::ALL
            .iter()
            .copied()
            .filter(|o| o.is_failure())
            .collect();
        assert_eq!(RunQuery::FAILED, failures.as_slice());
    }

    #[test]
    fn search_is_ascii_case_insensitive_and_literal() {
        let q = ListQuery::new(10).search("Ab%");
        assert!(q.matches_name("xaB%y"));
        assert!(!q.matches_name("xaBcy"));
        assert!(ListQuery::new(1).matches_name("anything"));
        assert!(!ListQuery::new(1).search("É").matches_name("é"));
    }

    #[test]
    fn pages_in_both_directions() {
        let names: Vec<String> = (0..7).map(|i| format!("n{i}")).collect();
        let page = |q: ListQuery| {
            let l = Listing::of_matching(names.clone(), &q, String::as_str);
            (l.rows.join(","), l.total, l.more_before, l.more_after)
        };
        assert_eq!(page(ListQuery::new(3)), ("n0,n1,n2".into(), 7, false, true));
        assert_eq!(
            page(ListQuery::new(3).after("n2")),
            ("n3,n4,n5".into(), 7, true, true)
        );
        assert_eq!(
            page(ListQuery::new(3).after("n5")),
            ("n6".into(), 7, true, false)
        );
        assert_eq!(
            page(ListQuery::new(3).after("n6")),
            ("".into(), 7, true, false)
        );
        assert_eq!(
            page(ListQuery::new(3).before("n4")),
            ("n1,n2,n3".into(), 7, true, true)
        );
        assert_eq!(
            page(ListQuery::new(3).before("n1")),
            ("n0".into(), 7, false, true)
        );
        assert_eq!(
            page(ListQuery::new(3).last()),
            ("n4,n5,n6".into(), 7, true, false)
        );
        assert_eq!(page(ListQuery::new(0)).0, "n0", "clamped to 1");
        assert_eq!(ListQuery::new(5000).page_size(), MAX_LIMIT);
    }
}
