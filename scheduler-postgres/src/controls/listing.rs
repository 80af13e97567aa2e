//! Lists that scale ([`ListQuery`], [`RunQuery`]): one statement per page, built
//! for the filters given, that reads the page from the primary key on the name
//! (keyset: `name > $n` ascending, `name < $n` descending, `LIMIT n + 1`), counts
//! the rows matching with the same conditions and looks for one on the cursor's
//! other side, in one snapshot; the run history read by id with its indexes on
//! `(job, id)` and on the failed runs.

use scheduler_core::control::stored::{lease_row_from, run_from, schedule_from};
use scheduler_core::{Cursor, LeaseRow, ListQuery, Listing, RunQuery, RunRow, ScheduleRow};
use scheduler_migrations::{HistoryTable, failed_run};
use sea_orm::{QueryResult, Value};

use super::rows::{Stored, all};
use crate::controls_sql::SCHEDULE;
use crate::error::{Error, Result, sqlstate};
use crate::row::get;
use crate::store::PostgresStore;

/// The columns a lease is read with.
const LEASE: &str = "name, holder, tick, token, expires_at, released_at";

/// The columns a run is read with.
const RUN: &str = "id, job, tick, node, token, started, finished, outcome, error, attempt";

/// A statement's values, bound as `$1`, `$2`, … in the order given.
#[derive(Default)]
struct Values(Vec<Value>);

impl Values {
    /// Binds `value`; returns its placeholder.
    fn bind(&mut self, value: impl Into<Value>) -> String {
        self.0.push(value.into());
        format!("${}", self.0.len())
    }
}

/// `text` for `LIKE … ESCAPE '\'`, its wildcards made literal.
fn escape_like(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '\\' | '%' | '_') {
            escaped.push('\\');
        }
        escaped.push(c);
    }
    escaped
}

/// `%text%` for `LIKE … ESCAPE '\'` on a name folded to ASCII lower case
/// ([`FOLDED_NAME`]): `text` folded likewise, its wildcards made literal.
fn contains_pattern(text: &str) -> String {
    format!("%{}%", escape_like(&text.to_ascii_lowercase()))
}

/// A name folded to ASCII lower case, and only ASCII: `lower` under the `C`
/// collation, whatever the database's (`ILIKE`, or `lower` under another
/// collation, would fold other letters too; `translate` was ten times slower).
const FOLDED_NAME: &str = "lower(name COLLATE \"C\")";

/// The statement of one page of `table` (read with `columns`) whose rows meet
/// `filters`: one row per row of the page plus one (`total`: how many meet the
/// filters; `other`: whether one lies on the cursor's other side), ascending by
/// name; a single row of NULL columns when the page is empty.
fn page_sql(
    table: &str,
    columns: &str,
    conditions: &[String],
    query: &ListQuery,
    values: &mut Values,
) -> String {
    let filters = if conditions.is_empty() {
        "true".to_owned()
    } else {
        conditions.join(" AND ")
    };
    let (page_range, direction, other) = match &query.cursor {
        Cursor::First => (String::new(), "", None),
        Cursor::After(name) => {
            let cursor = values.bind(name.clone());
            (
                format!("AND name > {cursor}"),
                "",
                Some(format!("name <= {cursor}")),
            )
        }
        Cursor::Before(name) => {
            let cursor = values.bind(name.clone());
            (
                format!("AND name < {cursor}"),
                "DESC",
                Some(format!("name >= {cursor}")),
            )
        }
        Cursor::Last => (String::new(), "DESC", None),
    };
    let other_expr = match other {
        Some(other_side) => {
            format!("EXISTS (SELECT FROM {table} WHERE {filters} AND {other_side})")
        }
        None => "false".to_owned(),
    };
    let limit_param = values.bind(i64::from(query.page_size()) + 1);
    format!(
        "SELECT c.total, c.other, p.* FROM \
           (SELECT (SELECT count(*) FROM {table} WHERE {filters}) AS total, \
                   {other_expr} AS other) AS c \
         LEFT JOIN (SELECT {columns} FROM {table} WHERE {filters} {page_range} \
                    ORDER BY name {direction} LIMIT {limit_param}) AS p ON true \
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
            get::<bool>(row, "other", operation)?,
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

/// The search's condition on the name, bound into `values`.
fn search(query: &ListQuery, values: &mut Values) -> Option<String> {
    (!query.search.is_empty()).then(|| {
        let pattern = values.bind(contains_pattern(&query.search));
        format!("{FOLDED_NAME} LIKE {pattern} ESCAPE '\\'")
    })
}

/// `rows`, or none when the history table does not exist (the store keeps no run
/// history: `RunHistory::new` was never called for this lease table).
fn unless_no_history(rows: Result<Vec<QueryResult>>) -> Result<Vec<QueryResult>> {
    match rows {
        Err(Error::Statement { cause, .. }) if sqlstate(&cause).as_deref() == Some("42P01") => {
            Ok(Vec::new())
        }
        rows => rows,
    }
}

impl PostgresStore {
    /// [`Controls::leases_listing`](scheduler_core::Controls::leases_listing).
    pub(super) async fn lease_listing(&self, query: &ListQuery) -> Result<Listing<LeaseRow>> {
        const OP: &str = "read a page of the leases";
        let mut values = Values::default();
        let mut filters: Vec<String> = search(query, &mut values).into_iter().collect();
        if let Some(node) = &query.node {
            // `node:pid:random`: the node, then exactly two more parts (`LIKE` is
            // case-sensitive here, and cheaper per row than a regular expression).
            let node = escape_like(node);
            let with_two = values.bind(format!("{node}:%:%"));
            let with_three = values.bind(format!("{node}:%:%:%"));
            filters.push(format!(
                "holder LIKE {with_two} ESCAPE '\\' AND holder NOT LIKE {with_three} ESCAPE '\\'"
            ));
        }
        if let Some(held) = query.held {
            let negation = if held { "" } else { "NOT " };
            filters.push(format!(
                "{negation}(released_at IS NULL AND expires_at > now())"
            ));
        }
        let table = self.table().quoted();
        let sql = page_sql(&table, LEASE, &filters, query, &mut values);
        let found = self.query(OP, &sql, values.0).await?;
        listing_from(&found, query, OP, |row| lease_row_from(row))
    }

    /// [`Controls::schedules_listing`](scheduler_core::Controls::schedules_listing).
    pub(super) async fn schedule_listing(&self, query: &ListQuery) -> Result<Listing<ScheduleRow>> {
        const OP: &str = "read a page of the dynamic schedules";
        let mut values = Values::default();
        let mut filters = vec!["NOT removed".to_owned()];
        filters.extend(search(query, &mut values));
        if let Some(handler) = &query.handler {
            let handler_param = values.bind(handler.clone());
            filters.push(format!("handler = {handler_param}"));
        }
        let table = self.table().with_suffix("_schedules");
        let sql = page_sql(&table, SCHEDULE, &filters, query, &mut values);
        let found = if query.search.is_empty() {
            self.query(OP, &sql, values.0).await?
        } else {
            // Planned for the pattern: a cached generic plan walks every name in
            // order for a rare part instead of reading the trigram index.
            self.session().query_planned(OP, &sql, values.0).await?
        };
        listing_from(&found, query, OP, |row| schedule_from(row))
    }

    /// [`Controls::runs_where`](scheduler_core::Controls::runs_where): by id,
    /// newest first, from the index that fits (the job's, the failed runs', or the
    /// primary key).
    pub(super) async fn runs_matching(&self, query: &RunQuery) -> Result<Vec<RunRow>> {
        const OP: &str = "read the run history";
        if query.page.limit == 0 {
            return Ok(Vec::new());
        }
        let mut values = Values::default();
        let mut filters = Vec::new();
        if let Some(before) = query.page.before {
            let before_param = values.bind(before);
            filters.push(format!("id < {before_param}"));
        }
        if let Some(job) = &query.job {
            let job_param = values.bind(job.clone());
            filters.push(format!("job = {job_param}"));
        }
        if let Some(node) = &query.node {
            let node_param = values.bind(node.clone());
            filters.push(format!("node = {node_param}"));
        }
        if query.failed {
            filters.push(failed_run());
        }
        let filters = if filters.is_empty() {
            "true".to_owned()
        } else {
            filters.join(" AND ")
        };
        let limit_param = values.bind(i64::from(query.page.limit));
        let runs = HistoryTable::for_leases(self.table()).quoted();
        let sql = format!(
            "SELECT {RUN} FROM {runs} WHERE {filters} ORDER BY id DESC LIMIT {limit_param}"
        );
        let found = unless_no_history(self.query(OP, &sql, values.0).await)?;
        all(&found, OP, run_from)
    }

    /// [`Controls::recent_runs`](scheduler_core::Controls::recent_runs): the jobs
    /// as a `VALUES` list, each job's runs read from the index on `(job, id)` by a
    /// lateral subquery, in one statement.
    pub(super) async fn recent(&self, jobs: &[String], per_job: u32) -> Result<Vec<RunRow>> {
        const OP: &str = "read the recent runs of a page of jobs";
        if jobs.is_empty() || per_job == 0 {
            return Ok(Vec::new());
        }
        let mut values = Values::default();
        let job_rows: Vec<String> = jobs
            .iter()
            .map(|job| format!("({})", values.bind(job.clone())))
            .collect();
        let limit_param = values.bind(i64::from(per_job));
        let runs = HistoryTable::for_leases(self.table()).quoted();
        let sql = format!(
            "SELECT r.* FROM (VALUES {job_rows}) AS j(name) CROSS JOIN LATERAL ( \
               SELECT {RUN} FROM {runs} WHERE job = j.name ORDER BY id DESC LIMIT {limit_param} \
             ) AS r",
            job_rows = job_rows.join(", ")
        );
        let found = unless_no_history(self.query(OP, &sql, values.0).await)?;
        all(&found, OP, run_from)
    }

    /// [`Controls::failing_jobs`](scheduler_core::Controls::failing_jobs): each
    /// job of the history found by a skip scan of the index on `(job, id)`, and its
    /// latest run (the highest id) read from it: two index probes a job.
    pub(super) async fn failing(&self) -> Result<Vec<String>> {
        const OP: &str = "read the failing jobs";
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
               SELECT FROM ( \
                 SELECT r.outcome FROM {runs} AS r WHERE r.job = jobs.job \
                 ORDER BY r.id DESC LIMIT 1 \
               ) AS latest WHERE {failed_run} \
             ) \
             ORDER BY job",
            failed_run = failed_run()
        );
        unless_no_history(self.query(OP, &sql, Vec::new()).await)?
            .iter()
            .map(|row| get(row, "job", OP))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcards_are_literal_and_case_folded() {
        assert_eq!(contains_pattern("A%b_C\\d"), "%a\\%b\\_c\\\\d%");
        assert_eq!(contains_pattern("É"), "%É%");
        assert_eq!(escape_like("eu:west_1"), "eu:west\\_1");
    }
}
