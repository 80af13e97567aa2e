//! The control statements, with the table names spliced in once (the store holds
//! them; the controls run them).
//!
//! The tables are migration 3's (`scheduler_migrations::sqlite`), named after the
//! lease table; every time is integer microseconds on SQLite's clock ([`NOW`]).

use scheduler_migrations::{HistoryTable, TableName};

use crate::sql::NOW;

mod due;
mod instances;
pub(crate) use due::DueSql;
pub(crate) use instances::InstanceSql;

/// The columns a trigger is read with.
const TRIGGER: &str = "id, job, node, requested_at, actor, why, state, holder, started_at, finished_at, outcome, error";

/// The columns a dynamic schedule is read with.
pub(crate) const SCHEDULE: &str =
    "name, handler, schedule, zone, scope, policy, args, enabled, removed, version, updated_at";

/// The columns an audit record is read with.
const AUDIT: &str = "id, at, job, node, action, actor, why, detail";

/// The columns a run of the history is read with.
pub(crate) const RUN: &str =
    "id, job, tick, node, token, started, finished, outcome, error, attempt";

#[derive(Debug)]
pub(crate) struct ControlSql {
    /// Bumps the control version; returns the new one, and the instant every
    /// statement of the control stamps (`now`), so that its rows and its record
    /// agree to the microsecond.
    pub(crate) bump: String,
    pub(crate) version: String,
    pub(crate) audit: String,
    pub(crate) pause: String,
    pub(crate) resume: String,
    pub(crate) trigger: String,
    pub(crate) trigger_status: String,
    pub(crate) claimable: String,
    pub(crate) claim_lease: String,
    pub(crate) claim_mark: String,
    pub(crate) give_back: String,
    pub(crate) finish: String,
    pub(crate) history: String,
    pub(crate) history_of_job: String,
    pub(crate) paused: String,
    /// `?1` job: its pauses in force (what a trigger reads in its transaction).
    pub(crate) job_paused: String,
    pub(crate) resumed: String,
    pub(crate) open_triggers: String,
    pub(crate) changed_schedules: String,
    /// `?1` names (a JSON array), `?2` since, `?3` upto: the rows named changed
    /// after `since`, no later than `upto`, by name (one probe per name).
    pub(crate) changed_among: String,
    /// `?1` name: the schedule, unless removed (the primary key).
    pub(crate) schedule: String,
    /// `?1` after (a name; `''`: from the first), `?2` limit: a page of the schedules
    /// not removed, by name (the primary key, read from `?1` on).
    pub(crate) schedules_page: String,
    /// `?1`…`?8` the row (name, handler, schedule, zone, scope, policy, args,
    /// enabled), `?9` version, `?10` actor, `?11` now, `?12` its bound (`next_tick`).
    pub(crate) put_schedule: String,
    /// `?1` rows as
    /// `[[name, handler, schedule, zone, scope, policy, args, enabled, next_tick],…]`
    /// (`crate::control::batch`), `?2` version, `?3` now, `?4` actor: a chunk of a
    /// batch put.
    pub(crate) put_schedules: String,
    /// `?1` the rows' arguments as a JSON array of strings: the index of the first
    /// that is not JSON, if any.
    pub(crate) first_bad_args: String,
    pub(crate) remove_schedule: String,
    pub(crate) json_valid: String,
    pub(crate) handlers: String,
    pub(crate) forget_handlers: String,
    pub(crate) register_handlers: String,
    pub(crate) jobs: String,
    pub(crate) forget_jobs: String,
    pub(crate) register_jobs: String,
    pub(crate) leases: String,
    pub(crate) history_table: String,
    pub(crate) runs: String,
    pub(crate) runs_of_job: String,
    /// The history table's name, unquoted (what `sqlite_master` holds).
    pub(crate) history_name: String,
    /// The instances' heartbeats.
    pub(crate) instances: InstanceSql,
    /// The dynamic schedules' bounds.
    pub(crate) due: DueSql,
}

impl ControlSql {
    pub(crate) fn new(table: &TableName) -> Self {
        let leases = table.quoted();
        let controls = table.with_suffix("_controls");
        let audit = table.with_suffix("_audit");
        let triggers = table.with_suffix("_triggers");
        let schedules = table.with_suffix("_schedules");
        let handlers = table.with_suffix("_handlers");
        let jobs = table.with_suffix("_jobs");
        let version = table.with_suffix("_version");
        let history = HistoryTable::for_leases(table);
        let runs = history.quoted();
        Self {
            bump: format!(
                "UPDATE {version} SET version = version + 1 WHERE id = 1 RETURNING version, {NOW} AS now"
            ),
            version: format!("SELECT version FROM {version} WHERE id = 1"),
            audit: format!(
                "INSERT INTO {audit} (at, job, node, action, actor, why, detail) \
                 VALUES (?7, ?1, ?2, ?3, ?4, ?5, ?6) RETURNING {AUDIT}"
            ),
            // `?2` is the node, `''` for every node. Pausing a paused job keeps its
            // pause as it was (since, by whom, why).
            pause: format!(
                "INSERT INTO {controls} AS c \
                   (job, node, paused, since, actor, why, resumed_at, catch_up, version) \
                 VALUES (?1, ?2, 1, ?6, ?3, ?4, NULL, NULL, ?5) \
                 ON CONFLICT (job, node) DO UPDATE \
                   SET paused = 1, since = excluded.since, actor = excluded.actor, \
                       why = excluded.why, resumed_at = NULL, catch_up = NULL, \
                       version = excluded.version \
                   WHERE NOT c.paused"
            ),
            // `?2` the node, or `NULL`: every pause of the job, on every node.
            resume: format!(
                "UPDATE {controls} SET paused = 0, resumed_at = ?5, catch_up = ?3, version = ?4 \
                 WHERE job = ?1 AND (?2 IS NULL OR node = ?2) AND paused \
                 RETURNING node"
            ),
            trigger: format!(
                "INSERT INTO {triggers} (job, node, requested_at, actor, why, state) \
                 VALUES (?1, ?2, ?5, ?3, ?4, 'pending') RETURNING {TRIGGER}"
            ),
            trigger_status: format!("SELECT {TRIGGER} FROM {triggers} WHERE id = ?1"),
            // A trigger may be claimed while pending, or while running under this
            // very lease (`?2`) when its claimant no longer holds it: expired
            // unreleased (it vanished mid-run), or since taken by another holder. A
            // claimant that released its lease as completed keeps it (its finish is
            // on its way). A claim under another lease name is never taken over, as
            // on PostgreSQL. Also read: the lease row's completion to put back at the
            // finish (`prev_released_at`): the row's, or, while the row is still the
            // vanished claimant's acquisition, the one its claim kept (the statements
            // after it run in the same write transaction, so the row stays as read).
            claimable: format!(
                "SELECT t.requested_at, \
                        CASE WHEN l.holder = t.holder THEN t.prev_released_at \
                        ELSE l.released_at END AS prev_released_at \
                 FROM {triggers} AS t LEFT JOIN {leases} AS l ON l.name = ?2 \
                 WHERE t.id = ?1 AND (t.state = 'pending' OR (t.state = 'running' AND t.lease = ?2 AND NOT EXISTS ( \
                   SELECT 1 FROM {leases} AS c \
                   WHERE c.name = t.lease AND c.holder = t.holder \
                     AND (c.released_at IS NOT NULL OR c.expires_at > {NOW}))))"
            ),
            // The job's lease when it is free — expired or released, whatever its
            // tick — with a new token; its tick left as it is (a new row's is 0,
            // 1970-01-01, earlier than any real tick). A request to stop from a tick
            // no later than the trigger's instant (`?4`: the trigger's own, to the run
            // before it) is dropped.
            claim_lease: format!(
                "INSERT INTO {leases} AS l (name, holder, tick, token, taken_at, expires_at, released_at) \
                 VALUES (?1, ?2, 0, 1, {NOW}, {NOW} + ?3 * 1000, NULL) \
                 ON CONFLICT (name) DO UPDATE \
                   SET holder = excluded.holder, token = l.token + 1, \
                       taken_at = excluded.taken_at, expires_at = excluded.expires_at, \
                       released_at = NULL, \
                       cancel_tick = CASE WHEN l.cancel_tick > ?4 THEN l.cancel_tick END \
                   WHERE l.expires_at <= {NOW} \
                 RETURNING name, holder, tick, token, expires_at"
            ),
            claim_mark: format!(
                "UPDATE {triggers} SET state = 'running', holder = ?2, lease = ?3, \
                   started_at = {NOW}, finished_at = NULL, outcome = NULL, error = NULL, \
                   prev_released_at = ?4 \
                 WHERE id = ?1"
            ),
            // Before the finish, in its transaction: the lease of trigger `?1`,
            // running under `?2`, if `?2` still holds it, given back as the claim
            // found it (released as completed or not) and expired now.
            give_back: format!(
                "UPDATE {leases} \
                 SET released_at = (SELECT t.prev_released_at FROM {triggers} AS t WHERE t.id = ?1), \
                     expires_at = min(expires_at, {NOW}) \
                 WHERE holder = ?2 AND name = ( \
                   SELECT t.lease FROM {triggers} AS t \
                   WHERE t.id = ?1 AND t.state = 'running' AND t.holder = ?2)"
            ),
            // `?2` the claimant, or `NULL`: only a pending trigger.
            finish: format!(
                "UPDATE {triggers} SET state = 'done', outcome = ?3, error = ?4, finished_at = {NOW} \
                 WHERE id = ?1 AND ((state = 'pending' AND ?2 IS NULL) \
                                    OR (state = 'running' AND holder = ?2)) \
                 RETURNING id"
            ),
            // `?1` the id to page before (`NULL`: the newest), `?2` the limit; of one
            // job, `?1` the job and the others one place on.
            history: format!(
                "SELECT {AUDIT} FROM {audit} WHERE (?1 IS NULL OR id < ?1) ORDER BY id DESC LIMIT ?2"
            ),
            history_of_job: format!(
                "SELECT {AUDIT} FROM {audit} WHERE job = ?1 AND (?2 IS NULL OR id < ?2) \
                 ORDER BY id DESC LIMIT ?3"
            ),
            paused: format!(
                "SELECT job, node, since, actor, why FROM {controls} WHERE paused ORDER BY job, node"
            ),
            job_paused: format!(
                "SELECT job, node, since, actor, why FROM {controls} WHERE job = ?1 AND paused \
                 ORDER BY node"
            ),
            resumed: format!(
                "SELECT job, node, since, resumed_at, catch_up, version FROM {controls} \
                 WHERE NOT paused AND resumed_at IS NOT NULL AND version > ?1 \
                 ORDER BY version, job, node"
            ),
            open_triggers: format!(
                "SELECT {TRIGGER} FROM {triggers} WHERE state <> 'done' ORDER BY id"
            ),
            changed_schedules: format!(
                "SELECT {SCHEDULE} FROM {schedules} WHERE version > ?1 ORDER BY name"
            ),
            changed_among: format!(
                "SELECT {SCHEDULE} FROM {schedules} \
                 WHERE name IN (SELECT value FROM json_each(?1)) AND version > ?2 \
                 AND version <= ?3 ORDER BY name"
            ),
            schedule: format!("SELECT {SCHEDULE} FROM {schedules} WHERE name = ?1 AND NOT removed"),
            schedules_page: format!(
                "SELECT {SCHEDULE} FROM {schedules} WHERE name > ?1 AND NOT removed \
                 ORDER BY name LIMIT ?2"
            ),
            put_schedule: format!(
                "INSERT INTO {schedules} \
                   (name, handler, schedule, zone, scope, policy, args, enabled, removed, version, \
                    updated_at, actor, next_tick) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, 0, ?9, ?11, ?10, ?12) \
                 ON CONFLICT (name) DO UPDATE \
                   SET handler = excluded.handler, schedule = excluded.schedule, \
                       zone = excluded.zone, scope = excluded.scope, policy = excluded.policy, \
                       args = excluded.args, enabled = excluded.enabled, removed = 0, \
                       version = excluded.version, updated_at = excluded.updated_at, \
                       actor = excluded.actor, next_tick = excluded.next_tick \
                 RETURNING {SCHEDULE}"
            ),
            // The row stays as a tombstone, so that polling instances drop it.
            remove_schedule: format!(
                "UPDATE {schedules} SET removed = 1, version = ?2, updated_at = ?4, actor = ?3 \
                 WHERE name = ?1 AND NOT removed RETURNING {SCHEDULE}"
            ),
            put_schedules: format!(
                "INSERT INTO {schedules} \
                   (name, handler, schedule, zone, scope, policy, args, enabled, removed, version, \
                    updated_at, actor, next_tick) \
                 SELECT value ->> 0, value ->> 1, value ->> 2, value ->> 3, value ->> 4, \
                        value ->> 5, value ->> 6, value ->> 7, 0, ?2, ?3, ?4, value ->> 8 \
                 FROM json_each(?1) WHERE true \
                 ON CONFLICT (name) DO UPDATE \
                   SET handler = excluded.handler, schedule = excluded.schedule, \
                       zone = excluded.zone, scope = excluded.scope, policy = excluded.policy, \
                       args = excluded.args, enabled = excluded.enabled, removed = 0, \
                       version = excluded.version, updated_at = excluded.updated_at, \
                       actor = excluded.actor, next_tick = excluded.next_tick"
            ),
            first_bad_args: "SELECT CAST(key AS INTEGER) AS idx FROM json_each(?1) \
                             WHERE NOT json_valid(value) ORDER BY key LIMIT 1"
                .to_owned(),
            json_valid: "SELECT json_valid(?1) AS valid".to_owned(),
            // The registrations of live nodes, and of nodes that never beat.
            handlers: instances::live(table, &handlers, "handler"),
            // `?2` the node's handlers as a JSON array of strings.
            forget_handlers: format!(
                "DELETE FROM {handlers} \
                 WHERE node = ?1 AND handler NOT IN (SELECT value FROM json_each(?2))"
            ),
            register_handlers: format!(
                "INSERT INTO {handlers} (handler, node, seen_at) \
                 SELECT value, ?1, {NOW} FROM json_each(?2) WHERE true \
                 ON CONFLICT (handler, node) DO UPDATE SET seen_at = excluded.seen_at"
            ),
            jobs: instances::live(table, &jobs, "job"),
            // `?2` the node's jobs as a JSON array of strings.
            forget_jobs: format!(
                "DELETE FROM {jobs} WHERE node = ?1 AND job NOT IN (SELECT value FROM json_each(?2))"
            ),
            register_jobs: format!(
                "INSERT INTO {jobs} (job, node, seen_at) \
                 SELECT value, ?1, {NOW} FROM json_each(?2) WHERE true \
                 ON CONFLICT (job, node) DO UPDATE SET seen_at = excluded.seen_at"
            ),
            leases: format!(
                "SELECT name, holder, tick, token, expires_at, released_at FROM {leases} ORDER BY name"
            ),
            history_table:
                "SELECT 1 AS present FROM sqlite_master WHERE type = 'table' AND name = ?1"
                    .to_owned(),
            runs: format!(
                "SELECT {RUN} FROM {runs} WHERE (?1 IS NULL OR id < ?1) ORDER BY id DESC LIMIT ?2"
            ),
            runs_of_job: format!(
                "SELECT {RUN} FROM {runs} WHERE job = ?1 AND (?2 IS NULL OR id < ?2) \
                 ORDER BY id DESC LIMIT ?3"
            ),
            history_name: history.table().to_owned(),
            instances: instances::InstanceSql::new(table),
            due: DueSql::new(table),
        }
    }
}
