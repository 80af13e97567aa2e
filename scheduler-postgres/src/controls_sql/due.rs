//! The statements of the dynamic schedules' bounds
//! ([`Controls::due_schedules`](scheduler_core::Controls::due_schedules),
//! [`Controls::advance_schedules`](scheduler_core::Controls::advance_schedules)):
//! `next_tick` on `<table>_schedules` and its partial index `_schedules_due` on
//! `(next_tick, name) WHERE enabled AND NOT removed` (migration 7).

use scheduler_migrations::TableName;

use super::SCHEDULE;

/// The bounds' statements, with the table name spliced in once.
#[derive(Debug, Clone)]
pub(crate) struct DueSql {
    /// `$1` handlers, `$2` until, `$3` limit: the first rows due, by
    /// `(next_tick, name)`, each with its `next_tick`.
    pub(crate) due: String,
    /// `$1` handlers, `$2` until, `$3` the cursor's `next_tick`, `$4` its name, `$5`
    /// limit: the rows due after the cursor.
    pub(crate) due_after: String,
    /// `$1` names, `$2` versions, `$3` bounds (arrays, one element an advance): each
    /// row at its version moved forward to the latest bound given for it.
    pub(crate) advance: String,
}

impl DueSql {
    pub(crate) fn new(table: &TableName) -> Self {
        let schedules = table.with_suffix("_schedules");
        // Both reads are a walk of the partial index `_schedules_due` in its order,
        // from the cursor on (a row comparison is an index condition), stopped at
        // `until` and at the limit: the index's own condition is written out, and
        // the cursor is a second text rather than `$3 IS NULL OR …`, which the index
        // cannot serve. The handler is a filter on the rows walked.
        let due = format!(
            "SELECT {SCHEDULE}, next_tick FROM {schedules} \
             WHERE enabled AND NOT removed AND handler = ANY ($1::text[]) \
               AND next_tick <= $2::timestamptz \
             ORDER BY next_tick, name LIMIT $3"
        );
        let due_after = format!(
            "SELECT {SCHEDULE}, next_tick FROM {schedules} \
             WHERE enabled AND NOT removed AND handler = ANY ($1::text[]) \
               AND next_tick <= $2::timestamptz \
               AND (next_tick, name) > ($3::timestamptz, $4::text) \
             ORDER BY next_tick, name LIMIT $5"
        );
        // One UPDATE, its rows locked in name order, as the lease statements lock
        // theirs (`crate::sql`): the advances of one row merged first (the latest
        // bound of each name and version, so a row appears once and its outcome
        // does not depend on which duplicate PostgreSQL meets first), then sorted by
        // name in the database's collation; the join conditions are ones a hash or
        // merge join cannot use (`= ANY (ARRAY[…])`, `IS NOT DISTINCT FROM`), so the
        // plan, generic or not, is a nested loop that probes the primary key once per
        // name in that order. Instances advancing the same rows at once wait on each
        // other in one order, never in a cycle. A row changed meanwhile (a put, a
        // removal, another advance) is checked again, version and bound, before it
        // is written. No version bump, no audit row, no announcement.
        let advance = format!(
            "UPDATE {schedules} s SET next_tick = v.next \
             FROM ( \
               SELECT u.name, u.version, max(u.next) AS next \
               FROM unnest($1::text[], $2::bigint[], $3::timestamptz[]) AS u(name, version, next) \
               GROUP BY u.name, u.version \
               ORDER BY u.name \
             ) AS v \
             WHERE s.name = ANY (ARRAY[v.name]) AND s.version IS NOT DISTINCT FROM v.version \
               AND s.next_tick < v.next"
        );
        Self {
            due,
            due_after,
            advance,
        }
    }
}
