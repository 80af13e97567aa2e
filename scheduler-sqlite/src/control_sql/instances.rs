//! The instances' statements ([`Controls::heartbeat`](scheduler_core::Controls::heartbeat)):
//! one row per node in `<table>_instances` (migration 5), and which nodes'
//! registrations count.

use scheduler_migrations::TableName;

use crate::sql::NOW;

/// The instances' statements, with the table names spliced in once.
#[derive(Debug, Clone)]
pub(crate) struct InstanceSql {
    /// `?1` node, `?2` version, `?3` started_at, `?4` the expiry in microseconds.
    pub(crate) beat: String,
    /// `?1` node.
    pub(crate) stop: String,
    pub(crate) read: String,
    /// Every registration, `node` and `name`, by node and name.
    pub(crate) handlers_by_node: String,
    pub(crate) jobs_by_node: String,
}

/// The condition under which the registration of alias `r` counts, joined to its
/// node's instance row as `i`: the node never beat (an instance of a version before
/// heartbeats), or it is live.
const COUNTS: &str = "(i.node IS NULL OR (i.stopped = 0 AND i.expires_at > {NOW}))";

/// `SELECT DISTINCT r.<column> AS <column>` of `table`'s registrations that count.
pub(crate) fn live(table: &TableName, registrations: &str, column: &str) -> String {
    let instances = table.with_suffix("_instances");
    let counts = COUNTS.replace("{NOW}", NOW);
    format!(
        "SELECT DISTINCT r.{column} AS {column} FROM {registrations} r \
         LEFT JOIN {instances} i ON i.node = r.node WHERE {counts} ORDER BY r.{column}"
    )
}

impl InstanceSql {
    pub(crate) fn new(table: &TableName) -> Self {
        let instances = table.with_suffix("_instances");
        let handlers = table.with_suffix("_handlers");
        let jobs = table.with_suffix("_jobs");
        Self {
            beat: format!(
                "INSERT INTO {instances} (node, version, started_at, seen_at, expires_at, stopped) \
                 VALUES (?1, ?2, ?3, {NOW}, {NOW} + ?4, 0) \
                 ON CONFLICT (node) DO UPDATE SET version = excluded.version, \
                   started_at = excluded.started_at, seen_at = excluded.seen_at, \
                   expires_at = excluded.expires_at, stopped = 0"
            ),
            stop: format!("UPDATE {instances} SET stopped = 1 WHERE node = ?1"),
            read: format!(
                "SELECT node, version, started_at, seen_at, expires_at, stopped \
                 FROM {instances} ORDER BY node"
            ),
            handlers_by_node: format!(
                "SELECT node, handler AS name FROM {handlers} ORDER BY node, handler"
            ),
            jobs_by_node: format!("SELECT node, job AS name FROM {jobs} ORDER BY node, job"),
        }
    }
}
