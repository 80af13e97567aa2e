//! Lists that scale ([`ListQuery`], [`RunQuery`]): one statement per page, built
//! for the filters given, that reads the page from the primary key on the name
//! (keyset: `name > ?` ascending, `name < ?` descending, `LIMIT n + 1`), counts the
//! rows matching with the same conditions and looks for one on the cursor's other
//! side; the run history read by id with its indexes on `(job, id)` and on the
//! failed runs.

use scheduler_core::control::stored::{lease_row_from, run_from, schedule_from};
use scheduler_core::{Cursor, LeaseRow, ListQuery, Listing, RunQuery, RunRow, ScheduleRow};
use scheduler_migrations::{HistoryTable, failed_run};
use sea_orm::{QueryResult, Value};

use super::rows::{Stored, all, flag, rows};
use crate::control_sql::{RUN, SCHEDULE};
use crate::error::Result;
use crate::row::get;
use crate::sql::NOW;
use crate::store::SqliteStore;

/// The columns a lease is read with.
const LEASE: &str = "name, holder, tick, token, expires_at, released_at";

/// A statement's values, bound as `?1`, `?2`, … in the order given.
#[derive(Default)]
struct Values(Vec<Value>);

impl Values {
    /// Binds `value`; returns its placeholder.
    fn bind(&mut self, value: impl Into<Value>) -> String {
        self.0.push(value.into());
        format!("?{}", self.0.len())
    }
}

/// `%text%` for `LIKE … ESCAPE '\'`, the wildcards of `text` made literal.
pub(crate) fn contains_pattern(text: &str) -> String {
    let mut pattern = String::with_capacity(text.len() + 2);
    pattern.push('%');
    for c in text.chars() {
        if matches!(c, '\\' | '%' | '_') {
            pattern.push('\\');
        }
        pattern.push(c);
    }
    pattern.push('%');
    pattern
}

/// The statement of one page of `table` (read with `columns`) whose rows meet
/// `filters`: one row per row of the page plus one (`total`: how many meet the
/// filters; `other`: whether one lies on the cursor's other side), ascending by
/// name; a single row of NULL columns when the page is empty.
fn page_sql(
    table: &str,
    columns: &str,
    filters: &[String],
    query: &ListQuery,
    values: &mut Values,
) -> String {
    let f = if filters.is_empty() {
        "1".to_owned()
    } else {
        filters.join(" AND ")
    };
    let (page, order, other) = match &query.cursor {
        Cursor::First => (String::new(), "", None),
        Cursor::After(name) => {
            let n = values.bind(name.clone());
            (format!("AND name > {n}"), "", Some(format!("name <= {n}")))
        }
        Cursor::Before(name) => {
            let n = values.bind(name.clone());
            (
                format!("AND name < {n}"),
                "DESC",
                Some(format!("name >= {n}")),
            )
        }
        Cursor::Last => (String::new(), "DESC", None),
    };
    let other = match other {
        Some(side) => format!("EXISTS (SELECT 1 FROM {table} WHERE {f} AND {side})"),
        None => "0".to_owned(),
    };
    let limit = values.bind(i64::from(query.page_size()) + 1);
    format!(
        "SELECT c.total, c.other, p.* FROM \
           (SELECT (SELECT count(*) FROM {table} WHERE {f}) AS total, {other} AS other) AS c \
         LEFT JOIN (SELECT {columns} FROM {table} WHERE {f} {page} \
                    ORDER BY name {order} LIMIT {limit}) AS p ON 1 \
         ORDER BY p.name"
    )
}

/// The listing out of a page statement's rows, each decoded by `decode`.
fn listing_from<T>(
    found: &[QueryResult],
    query: &ListQuery,
    operation: &'static str,
    decode: fn(&Stored<'_>) -> Result<T>,
) -> Result<Listing<T>> {
    let (total, other) = match found.first() {
        Some(row) => (
            get::<i64>(row, "total", operation)?,
            flag(row, "other", operation)?,
        ),
        None => (0, false),
    };
    let mut rows = Vec::with_capacity(found.len());
    for row in found {
        // The one row of an empty page has no name.
        if get::<Option<String>>(row, "name", operation)?.is_some() {
            rows.push(decode(&Stored { row, operation })?);
        }
    }
    let size = usize::try_from(query.page_size()).unwrap_or(usize::MAX);
    let extra = rows.len() > size;
    let (more_before, more_after) = match query.cursor {
        Cursor::First | Cursor::After(_) => {
            rows.truncate(size);
            (other, extra)
        }
        Cursor::Before(_) | Cursor::Last => {
            if extra {
                rows.remove(0);
            }
            (extra, other)
        }
    };
    Ok(Listing {
        rows,
        total: u64::try_from(total).unwrap_or_default(),
        more_before,
        more_after,
    })
}

impl SqliteStore {
    /// [`Controls::leases_listing`](scheduler_core::Controls::leases_listing).
    pub(super) async fn lease_listing(&self, query: &ListQuery) -> Result<Listing<LeaseRow>> {
        const OP: &str = "read a page of the leases";
        let mut values = Values::default();
        let mut filters = Vec::new();
        if !query.search.is_empty() {
            let s = values.bind(contains_pattern(&query.search));
            filters.push(format!("name LIKE {s} ESCAPE '\\'"));
        }
        if let Some(node) = &query.node {
            // `node:pid:random`: the node, then exactly two more parts.
            let n = values.bind(node.clone());
            filters.push(format!(
                "substr(holder, 1, length({n})) = {n} \
                 AND substr(holder, length({n}) + 1) GLOB ':*:*' \
                 AND substr(holder, length({n}) + 1) NOT GLOB ':*:*:*'"
            ));
        }
        if let Some(held) = query.held {
            let not = if held { "" } else { "NOT " };
            filters.push(format!("{not}(released_at IS NULL AND expires_at > {NOW})"));
        }
        let sql = page_sql(&self.table().quoted(), LEASE, &filters, query, &mut values);
        let found = rows(self, &self.db, OP, &sql, values.0).await?;
        listing_from(&found, query, OP, |row| lease_row_from(row))
    }

    /// [`Controls::schedules_listing`](scheduler_core::Controls::schedules_listing).
    pub(super) async fn schedule_listing(&self, query: &ListQuery) -> Result<Listing<ScheduleRow>> {
        const OP: &str = "read a page of the dynamic schedules";
        let mut values = Values::default();
        let mut filters = vec!["NOT removed".to_owned()];
        if !query.search.is_empty() {
            let s = values.bind(contains_pattern(&query.search));
            filters.push(format!("name LIKE {s} ESCAPE '\\'"));
        }
        if let Some(handler) = &query.handler {
            let h = values.bind(handler.clone());
            filters.push(format!("handler = {h}"));
        }
        let table = self.table().with_suffix("_schedules");
        let sql = page_sql(&table, SCHEDULE, &filters, query, &mut values);
        let found = rows(self, &self.db, OP, &sql, values.0).await?;
        listing_from(&found, query, OP, |row| schedule_from(row))
    }

    /// [`Controls::runs_where`](scheduler_core::Controls::runs_where): by id,
    /// newest first, from the index that fits (the job's, the failed runs', or the
    /// primary key).
    pub(super) async fn runs_matching(&self, query: &RunQuery) -> Result<Vec<RunRow>> {
        const OP: &str = "read the run history";
        if query.page.limit == 0 || !self.history_exists().await? {
            return Ok(Vec::new());
        }
        let mut values = Values::default();
        let mut filters = Vec::new();
        if let Some(before) = query.page.before {
            filters.push(format!("id < {}", values.bind(before)));
        }
        if let Some(job) = &query.job {
            filters.push(format!("job = {}", values.bind(job.clone())));
        }
        if let Some(node) = &query.node {
            filters.push(format!("node = {}", values.bind(node.clone())));
        }
        if query.failed {
            filters.push(failed_run());
        }
        let f = if filters.is_empty() {
            "1".to_owned()
        } else {
            filters.join(" AND ")
        };
        let limit = values.bind(i64::from(query.page.limit));
        let runs = HistoryTable::for_leases(self.table()).quoted();
        let sql = format!("SELECT {RUN} FROM {runs} WHERE {f} ORDER BY id DESC LIMIT {limit}");
        let found = rows(self, &self.db, OP, &sql, values.0).await?;
        all(&found, OP, run_from)
    }

    /// [`Controls::recent_runs`](scheduler_core::Controls::recent_runs): each job's
    /// runs read from the index on `(job, id)` by a subquery of its own, the
    /// subqueries joined by `UNION ALL`, in one statement.
    pub(super) async fn recent(&self, jobs: &[String], per_job: u32) -> Result<Vec<RunRow>> {
        const OP: &str = "read the recent runs of a page of jobs";
        if jobs.is_empty() || per_job == 0 || !self.history_exists().await? {
            return Ok(Vec::new());
        }
        let mut values = Values::default();
        let limit = values.bind(i64::from(per_job));
        let runs = HistoryTable::for_leases(self.table()).quoted();
        let parts: Vec<String> = jobs
            .iter()
            .map(|job| {
                let job = values.bind(job.clone());
                format!(
                    "SELECT * FROM (SELECT {RUN} FROM {runs} WHERE job = {job} \
                     ORDER BY id DESC LIMIT {limit})"
                )
            })
            .collect();
        let sql = parts.join(" UNION ALL ");
        let found = rows(self, &self.db, OP, &sql, values.0).await?;
        all(&found, OP, run_from)
    }

    /// [`Controls::failing_jobs`](scheduler_core::Controls::failing_jobs): each
    /// job of the history found by a skip scan of the index on `(job, id)`, and its
    /// latest run (the highest id) read from it: two index probes a job.
    pub(super) async fn failing(&self) -> Result<Vec<String>> {
        const OP: &str = "read the failing jobs";
        if !self.history_exists().await? {
            return Ok(Vec::new());
        }
        let runs = HistoryTable::for_leases(self.table()).quoted();
        let sql = format!(
            "WITH RECURSIVE jobs(job) AS ( \
               SELECT min(job) FROM {runs} \
               UNION ALL \
               SELECT (SELECT min(r.job) FROM {runs} AS r WHERE r.job > jobs.job) \
               FROM jobs WHERE jobs.job IS NOT NULL \
             ) \
             SELECT job FROM jobs \
             WHERE job IS NOT NULL AND EXISTS ( \
               SELECT 1 FROM ( \
                 SELECT r.outcome FROM {runs} AS r WHERE r.job = jobs.job \
                 ORDER BY r.id DESC LIMIT 1 \
               ) AS latest WHERE {failed} \
             ) \
             ORDER BY job",
            failed = failed_run()
        );
        rows(self, &self.db, OP, &sql, Vec::new())
            .await?
            .iter()
            .map(|row| get(row, "job", OP))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcards_are_literal() {
        assert_eq!(contains_pattern("a%b_c\\d"), "%a\\%b\\_c\\\\d%");
        assert_eq!(contains_pattern(""), "%%");
    }

    #[test]
    fn the_failed_words_are_cores() {
        let core: Vec<&str> = scheduler_core::RunQuery::FAILED
            .iter()
            .map(|o| o.as_str())
            .collect();
        assert_eq!(scheduler_migrations::FAILED_OUTCOMES, core.as_slice());
    }
}
