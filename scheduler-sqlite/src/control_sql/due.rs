//! The statements of the dynamic schedules' bounds
//! ([`Controls::due_schedules`](scheduler_core::Controls::due_schedules),
//! [`Controls::advance_schedules`](scheduler_core::Controls::advance_schedules)):
//! `next_tick` on `<table>_schedules` (migration 7), integer microseconds.

use scheduler_migrations::TableName;

use super::SCHEDULE;

/// The bounds' statements, with the table name spliced in once.
#[derive(Debug, Clone)]
pub(crate) struct DueSql {
    /// `?1` the handlers as a JSON array of strings, `?2` until, `?3` limit: the
    /// first page of the rows due by `?2`, by `(next_tick, name)`.
    pub(crate) first: String,
    /// `?1` handlers, `?2` until, `?3` and `?4` the cursor's `next_tick` and name,
    /// `?5` limit: the page after the cursor.
    pub(crate) after: String,
    /// `?1` the advances as `[[name, version, next_tick],…]`: each row at its version
    /// moved to the latest of its advances when that is later than its bound.
    pub(crate) advance: String,
}

impl DueSql {
    pub(crate) fn new(table: &TableName) -> Self {
        let schedules = table.with_suffix("_schedules");
        // `enabled = 1 AND removed = 0` is the `_due` index's own condition, spelled
        // out as SQLite needs it to use the partial index; its order is the read's, so
        // a page stops after `limit` rows of the index. The handlers filter the rows
        // the index walks (`+handler`: never through the `_handler` index, which
        // would sort every row of the handlers first).
        let due = |cursor: &str, limit: &str| {
            format!(
                "SELECT {SCHEDULE}, next_tick FROM {schedules} \
                 WHERE enabled = 1 AND removed = 0 AND next_tick <= ?2{cursor} \
                   AND +handler IN (SELECT value FROM json_each(?1)) \
                 ORDER BY next_tick, name LIMIT {limit}"
            )
        };
        Self {
            first: due("", "?3"),
            after: due(" AND (next_tick, name) > (?3, ?4)", "?5"),
            // One update per row (grouped by name and version; a row matches at most
            // its own version's group), whatever the order of the advances.
            advance: format!(
                "UPDATE {schedules} AS s SET next_tick = a.next_tick \
                 FROM (SELECT value ->> 0 AS name, value ->> 1 AS version, \
                              max(value ->> 2) AS next_tick \
                       FROM json_each(?1) GROUP BY 1, 2) AS a \
                 WHERE s.name = a.name AND s.version = a.version AND s.next_tick < a.next_tick"
            ),
        }
    }
}
