//! The controls' SQL text (pause, resume, triggers, dynamic schedules, their record),
//! built once per lease table.
//!
//! The tables are migration 3's (`scheduler_migrations::postgres`, `create_controls`),
//! named after the lease table. Values are always bound parameters; only validated,
//! quoted table names are spliced in.
//!
//! Every control is one statement: it bumps the version row first (each later part
//! reads the new version from it, so the version row is the first row the statement
//! locks, in every control: two controls never wait on each other in a cycle), then
//! changes its rows and writes its audit row, all in one transaction. A trigger's
//! claim and finish also bump the version (instances read the triggers still open
//! from [`Controls::poll`](scheduler_core::Controls::poll)), after the trigger row
//! and the lease row they lock.
//!
//! Every bump also announces the new version on the table's [`channel`]
//! (`pg_notify` in the bump's `RETURNING`, delivered when the statement commits), for
//! the instances that `LISTEN` ([`crate::watch`]).

use scheduler_migrations::{HistoryTable, TableName};

mod due;
mod instances;
pub(crate) use due::DueSql;
pub(crate) use instances::InstanceSql;

/// The columns of an audit row, as every control returns its record.
const RECORD: &str = "id, at, job, node, action, actor, why, detail";

/// The channel the control changes of the lease table `table` are announced on:
/// `[schema.]table_controls`, or, when that is longer than PostgreSQL's 63-byte names
/// (which would refuse it), `scheduler_controls_` and a 64-bit hash of it in hex.
/// Made of a validated table name's characters only (lowercase ASCII letters, digits,
/// `_`, `.`), so it can be spliced into SQL as a string literal.
pub(crate) fn channel(table: &TableName) -> String {
    let name = match table.schema() {
        Some(schema) => format!("{schema}.{}_controls", table.table()),
        None => format!("{}_controls", table.table()),
    };
    if name.len() <= 63 {
        return name;
    }
    // FNV-1a: stable across builds and platforms.
    let hash = name.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    format!("scheduler_controls_{hash:016x}")
}

/// The statements of the controls of one lease table.
#[derive(Debug, Clone)]
pub(crate) struct ControlSql {
    /// The channel control changes are announced on ([`channel`]).
    pub(crate) channel: String,
    /// `$1` job, `$2` node (`''`: every node), `$3` by, `$4` why: the audit row.
    pub(crate) pause: String,
    /// As `pause` (`''`: every pause of the job), and `$5` catch up.
    pub(crate) resume: String,
    /// `$1` job, `$2` node (NULL: any), `$3` by, `$4` why, `$5` the action recorded
    /// (`trigger`, `trigger_while_paused`): the trigger. Run in a transaction after
    /// `lock_version` and `job_paused`, which decide the action.
    pub(crate) trigger: String,
    /// Locks the version row (every control's first lock) without changing it, in a
    /// `READ COMMITTED` transaction: each later statement of that transaction sees
    /// every control committed before, and none commits until it ends.
    pub(crate) lock_version: String,
    /// `$1` job: its pauses in force.
    pub(crate) job_paused: String,
    /// `$1` id: the trigger, if any.
    pub(crate) trigger_status: String,
    /// `$1` id, `$2` lease, `$3` holder, `$4` ttl in ms: the lease taken (its tick
    /// left as it was), if any.
    pub(crate) claim: String,
    /// `$1` id, `$2` holder (NULL: pending), `$3` outcome, `$4` error: the id, if ended
    /// (the claimant's lease given back as the claim found it).
    pub(crate) finish: String,
    /// `$1` before (id), `$2` limit.
    pub(crate) history: String,
    /// `$1` job, `$2` before (id), `$3` limit.
    pub(crate) job_history: String,
    /// The control version.
    pub(crate) version: String,
    /// Every pause in force.
    pub(crate) paused: String,
    /// `$1` since: the resumes recorded after that version.
    pub(crate) resumed: String,
    /// The triggers not done, oldest first.
    pub(crate) open_triggers: String,
    /// `$1` since: the schedules changed after that version, removed ones included.
    pub(crate) changed_schedules: String,
    /// `$1` names, `$2` since, `$3` upto: the rows named changed after `since`, no
    /// later than `upto`, by name.
    pub(crate) changed_among: String,
    /// `$1` name: the schedule, unless removed (the primary key).
    pub(crate) schedule: String,
    /// `$1` after (a name; `''`: from the first), `$2` limit: a page of the schedules
    /// not removed, by name (the primary key, read from `$1` on).
    pub(crate) schedules_page: String,
    /// `$1` name … `$8` enabled, `$9` by, `$10` why, `$11` the row's bound
    /// (`next_tick`): the audit row (its detail the schedule's text).
    pub(crate) put_schedule: String,
    /// `$1` name, `$2` by, `$3` why: the audit row, if there was a schedule.
    pub(crate) remove_schedule: String,
    /// Bumps the version (announcing it); returns it. A batch put's first statement,
    /// in its transaction (`crate::controls::batch`).
    pub(crate) bump: String,
    /// `$1` names, `$2` handlers, `$3` schedules, `$4` zones (`''`: none), `$5`
    /// scopes, `$6` policies, `$7` arguments (text, cast to `jsonb`), `$8` enabled,
    /// `$9` bounds (`next_tick`) (arrays, one element a row), `$10` the version,
    /// `$11` by: a chunk of a batch put.
    pub(crate) put_schedules: String,
    /// `$1` job, `$2` by, `$3` why, `$4` detail: a batch put's audit row.
    pub(crate) audit_schedules: String,
    /// `$1` node, `$2` handler names (distinct, sorted).
    pub(crate) register_handlers: String,
    /// Every handler registered by a node that counts ([`instances::live`]).
    pub(crate) handlers: String,
    /// `$1` node, `$2` job names (distinct, sorted).
    pub(crate) register_jobs: String,
    /// Every job registered by a node that counts.
    pub(crate) jobs: String,
    /// Every lease, by name.
    pub(crate) leases: String,
    /// `$1` before (id), `$2` limit: runs of the run history.
    pub(crate) runs: String,
    /// `$1` job, `$2` before (id), `$3` limit.
    pub(crate) job_runs: String,
    /// The instances' heartbeats.
    pub(crate) instances: InstanceSql,
    /// The dynamic schedules' bounds: the due read and the advance.
    pub(crate) due: DueSql,
}

/// The columns of a trigger row.
const TRIGGER: &str = "id, job, node, requested_at, actor, why, state, holder, started_at, finished_at, outcome, error";

/// The columns of a schedule row (`args` as text).
pub(crate) const SCHEDULE: &str = "name, handler, schedule, zone, scope, policy, args::text AS args, enabled, \
                        removed, version, updated_at";

impl ControlSql {
    /// The statements for the lease table `table`.
    pub(crate) fn new(table: &TableName) -> Self {
        let t = table.quoted();
        let controls = table.with_suffix("_controls");
        let audit = table.with_suffix("_audit");
        let triggers = table.with_suffix("_triggers");
        let schedules = table.with_suffix("_schedules");
        let handlers = table.with_suffix("_handlers");
        let jobs = table.with_suffix("_jobs");
        let version = table.with_suffix("_version");
        let channel = channel(table);
        // In every bump's `RETURNING`: evaluated for the version row, announced at
        // commit (an unchanged version announces nothing).
        let notify = format!("pg_notify('{channel}', version::text)");
        let runs = HistoryTable::for_leases(table).quoted();
        // Pausing a paused job keeps the first pause's time, actor and reason (the
        // audit row records the request all the same).
        let pause = format!(
            "WITH v AS ( \
               UPDATE {version} SET version = version + 1 WHERE id = 1 RETURNING version, {notify} \
             ), c AS ( \
               INSERT INTO {controls} AS c \
                 (job, node, paused, since, actor, why, resumed_at, catch_up, version) \
               SELECT $1, $2, true, now(), $3, $4, NULL, NULL, v.version FROM v \
               ON CONFLICT (job, node) DO UPDATE \
                 SET paused = true, since = excluded.since, actor = excluded.actor, \
                     why = excluded.why, resumed_at = NULL, catch_up = NULL, \
                     version = excluded.version \
                 WHERE NOT c.paused \
               RETURNING c.job \
             ), a AS ( \
               INSERT INTO {audit} (at, job, node, action, actor, why, detail) \
               SELECT now(), $1, NULLIF($2, ''), 'pause', $3, $4, \
                      '' \
               FROM v \
               RETURNING {RECORD} \
             ) \
             SELECT {RECORD} FROM a"
        );
        // Without a node (`''`) every pause of the job ends, each node's included;
        // with one, only that node's.
        let resume = format!(
            "WITH v AS ( \
               UPDATE {version} SET version = version + 1 WHERE id = 1 RETURNING version, {notify} \
             ), c AS ( \
               UPDATE {controls} c \
                 SET paused = false, resumed_at = now(), catch_up = $5, version = v.version \
               FROM v WHERE c.job = $1 AND ($2 = '' OR c.node = $2) AND c.paused \
               RETURNING c.job \
             ), a AS ( \
               INSERT INTO {audit} (at, job, node, action, actor, why, detail) \
               SELECT now(), $1, NULLIF($2, ''), \
                      CASE WHEN $5::boolean THEN 'resume' ELSE 'resume_no_catch_up' END, $3, $4, \
                      '' \
               FROM v \
               RETURNING {RECORD} \
             ) \
             SELECT {RECORD} FROM a"
        );
        let trigger = format!(
            "WITH v AS ( \
               UPDATE {version} SET version = version + 1 WHERE id = 1 RETURNING version, {notify} \
             ), tr AS ( \
               INSERT INTO {triggers} (job, node, requested_at, actor, why, state) \
               SELECT $1, $2::text, now(), $3, $4, 'pending' FROM v \
               RETURNING {TRIGGER} \
             ), a AS ( \
               INSERT INTO {audit} (at, job, node, action, actor, why, detail) \
               SELECT now(), tr.job, tr.node, $5::text, tr.actor, tr.why, tr.id::text FROM tr \
             ) \
             SELECT {TRIGGER} FROM tr"
        );
        let lock_version = format!("SELECT version FROM {version} WHERE id = 1 FOR UPDATE");
        let job_paused = format!(
            "SELECT job, node, since, actor, why FROM {controls} WHERE job = $1 AND paused \
             ORDER BY node"
        );
        let trigger_status = format!("SELECT {TRIGGER} FROM {triggers} WHERE id = $1");
        // The claim, in one statement:
        // - `tr` locks the trigger row (`FOR UPDATE`: a claimer that waited for
        //   another's claim reads the row that one committed) when it is pending, or
        //   running under this very lease while its claimant's acquisition is over
        //   (expired unreleased, or the row taken by another holder since): a claim
        //   under another lease name is never taken over, so two claimers of one
        //   trigger always compete for one lease row;
        // - `found` locks that lease row when it is free (expired or released,
        //   whatever its tick). A row free in the statement's snapshot is locked and
        //   read again as committed (`FOR UPDATE` under READ COMMITTED): of claimers
        //   that all found the trigger claimable only the first gets the lease, and
        //   the completion it keeps is the row's as it took it, not as the snapshot
        //   saw it (a release that committed meanwhile counts). A lease held in the
        //   snapshot is not asked for at all (no row lock, no WAL for a losing claim);
        // - `taken` takes it for the new holder with the next token, its tick left
        //   as it is, dropping a request to stop from a tick no later than the
        //   trigger's instant (the trigger's own, to the run before it); `added`
        //   inserts the row when there is none, with a tick earlier than any real one
        //   (a row inserted meanwhile: no claim). Each returns the
        //   completion to put back at the finish: the row's `released_at`, or, when
        //   the row is still the vanished claimant's acquisition, the one that claim
        //   kept;
        // - `claimed` marks the trigger running under the new holder, only if the
        //   lease was taken; the version is bumped after.
        let claim = format!(
            "WITH tr AS ( \
               SELECT tg.id, tg.requested_at, tg.holder, tg.prev_released_at FROM {triggers} tg \
               WHERE tg.id = $1 AND (tg.state = 'pending' OR ( \
                 tg.state = 'running' AND tg.lease = $2 AND NOT EXISTS ( \
                   SELECT 1 FROM {t} c WHERE c.name = tg.lease AND c.holder = tg.holder \
                     AND (c.expires_at > now() OR c.released_at IS NOT NULL) \
                 ))) \
               FOR UPDATE OF tg \
             ), found AS MATERIALIZED ( \
               SELECT f.name, f.holder, f.released_at FROM {t} f \
               WHERE f.name = $2 AND f.expires_at <= now() AND EXISTS (SELECT 1 FROM tr) \
               FOR UPDATE OF f \
             ), taken AS ( \
               UPDATE {t} l \
                 SET holder = $3, token = l.token + 1, taken_at = now(), \
                     expires_at = now() + $4::bigint * interval '1 millisecond', \
                     released_at = NULL, \
                     cancel_tick = CASE WHEN l.cancel_tick > tr.requested_at \
                                        THEN l.cancel_tick END \
               FROM found, tr \
               WHERE l.name = found.name AND l.expires_at <= now() \
               RETURNING l.name, l.holder, l.tick, l.token, l.expires_at, \
                 CASE WHEN found.holder = tr.holder THEN tr.prev_released_at \
                      ELSE found.released_at END AS prev_released_at \
             ), added AS ( \
               INSERT INTO {t} (name, holder, tick, token, taken_at, expires_at, released_at) \
               SELECT $2, $3, timestamptz '1970-01-01 00:00:00+00', 1, now(), \
                      now() + $4::bigint * interval '1 millisecond', NULL \
               FROM tr \
               WHERE NOT EXISTS (SELECT 1 FROM {t} h WHERE h.name = $2) \
               ON CONFLICT (name) DO NOTHING \
               RETURNING name, holder, tick, token, expires_at, \
                 NULL::timestamptz AS prev_released_at \
             ), lease AS ( \
               SELECT * FROM taken UNION ALL SELECT * FROM added \
             ), claimed AS ( \
               UPDATE {triggers} tg \
                 SET state = 'running', holder = lease.holder, lease = lease.name, \
                     started_at = now(), prev_released_at = lease.prev_released_at \
               FROM lease WHERE tg.id = $1 \
               RETURNING tg.id \
             ), v AS ( \
               UPDATE {version} SET version = version + 1 \
               WHERE id = 1 AND EXISTS (SELECT 1 FROM claimed) \
               RETURNING {notify} \
             ) \
             SELECT lease.name, lease.holder, lease.tick, lease.token, lease.expires_at \
             FROM lease JOIN claimed ON true"
        );
        // The finish, in one statement: `f` ends the trigger (pending, asked without
        // a holder; or running under the holder asking), then `back` gives its lease
        // back when that holder still holds it: expired now, and released as the claim
        // found it (`prev_released_at`), so a tick that ran stays done and one that
        // did not may still be taken. The trigger row is locked before the lease row,
        // as in the claim.
        let finish = format!(
            "WITH f AS ( \
               UPDATE {triggers} \
                 SET state = 'done', outcome = $3, error = $4, finished_at = now() \
               WHERE id = $1 AND ((state = 'pending' AND $2::text IS NULL) \
                                  OR (state = 'running' AND holder = $2::text)) \
               RETURNING id, lease, prev_released_at \
             ), back AS ( \
               UPDATE {t} l \
                 SET released_at = f.prev_released_at, \
                     expires_at = LEAST(l.expires_at, now()) \
               FROM f WHERE l.name = f.lease AND l.holder = $2::text \
               RETURNING l.name \
             ), v AS ( \
               UPDATE {version} SET version = version + 1 \
               WHERE id = 1 AND EXISTS (SELECT 1 FROM f) \
               RETURNING {notify} \
             ) \
             SELECT id FROM f"
        );
        let history =
            format!("SELECT {RECORD} FROM {audit} WHERE id < $1 ORDER BY id DESC LIMIT $2");
        let job_history = format!(
            "SELECT {RECORD} FROM {audit} WHERE job = $1 AND id < $2 ORDER BY id DESC LIMIT $3"
        );
        let version_read = format!("SELECT version FROM {version} WHERE id = 1");
        let paused = format!(
            "SELECT job, node, since, actor, why FROM {controls} WHERE paused ORDER BY job, node"
        );
        let resumed = format!(
            "SELECT job, node, since, resumed_at, catch_up, version FROM {controls} \
             WHERE NOT paused AND resumed_at IS NOT NULL AND version > $1 \
             ORDER BY version, job, node"
        );
        let open_triggers =
            format!("SELECT {TRIGGER} FROM {triggers} WHERE state <> 'done' ORDER BY id");
        let changed_schedules =
            format!("SELECT {SCHEDULE} FROM {schedules} WHERE version > $1 ORDER BY name");
        // By the primary key, one probe per name.
        let changed_among = format!(
            "SELECT {SCHEDULE} FROM {schedules} \
             WHERE name = ANY($1::text[]) AND version > $2 AND version <= $3 ORDER BY name"
        );
        let one_schedule =
            format!("SELECT {SCHEDULE} FROM {schedules} WHERE name = $1 AND NOT removed");
        let schedules_page = format!(
            "SELECT {SCHEDULE} FROM {schedules} WHERE name > $1 AND NOT removed \
             ORDER BY name LIMIT $2"
        );
        let put_schedule = format!(
            "WITH v AS ( \
               UPDATE {version} SET version = version + 1 WHERE id = 1 RETURNING version, {notify} \
             ), s AS ( \
               INSERT INTO {schedules} AS s (name, handler, schedule, zone, scope, policy, args, \
                                            enabled, removed, version, updated_at, actor, \
                                            next_tick) \
               SELECT $1, $2, $3, $4::text, $5, $6, $7::jsonb, $8, false, v.version, now(), $9, \
                      $11::timestamptz \
               FROM v \
               ON CONFLICT (name) DO UPDATE \
                 SET handler = excluded.handler, schedule = excluded.schedule, \
                     zone = excluded.zone, scope = excluded.scope, policy = excluded.policy, \
                     args = excluded.args, enabled = excluded.enabled, removed = false, \
                     version = excluded.version, updated_at = excluded.updated_at, \
                     actor = excluded.actor, next_tick = excluded.next_tick \
               RETURNING s.name \
             ), a AS ( \
               INSERT INTO {audit} (at, job, node, action, actor, why, detail) \
               SELECT now(), s.name, NULL, 'schedule_put', $9, $10, $3 FROM s \
               RETURNING {RECORD} \
             ) \
             SELECT {RECORD} FROM a"
        );
        // The version row first, as in every control; a schedule removed meanwhile
        // is not removed twice (the UPDATE reads the newest row).
        let remove_schedule = format!(
            "WITH v AS ( \
               UPDATE {version} SET version = version + 1 \
               WHERE id = 1 AND EXISTS (SELECT 1 FROM {schedules} WHERE name = $1 AND NOT removed) \
               RETURNING version, {notify} \
             ), s AS ( \
               UPDATE {schedules} s \
                 SET removed = true, enabled = false, version = v.version, updated_at = now(), \
                     actor = $2 \
               FROM v WHERE s.name = $1 AND NOT s.removed \
               RETURNING s.name \
             ), a AS ( \
               INSERT INTO {audit} (at, job, node, action, actor, why, detail) \
               SELECT now(), s.name, NULL, 'schedule_remove', $2, $3, '' FROM s \
               RETURNING {RECORD} \
             ) \
             SELECT {RECORD} FROM a"
        );
        // Rows in handler order, so two registrations never wait on each other in a
        // cycle.
        let bump = format!(
            "UPDATE {version} SET version = version + 1 WHERE id = 1 RETURNING version, {notify}"
        );
        // A chunk's rows in name order, the order an advance locks rows in
        // (`DueSql::advance`): a chunk and an advance never wait on each other in a
        // cycle (a batch of several chunks still may, across them).
        let put_schedules = format!(
            "INSERT INTO {schedules} AS s (name, handler, schedule, zone, scope, policy, args, \
                                          enabled, removed, version, updated_at, actor, \
                                          next_tick) \
             SELECT n, h, sc, NULLIF(z, ''), sp, p, a::jsonb, e, false, $10, now(), $11, nt \
             FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], \
                         $7::text[], $8::boolean[], $9::timestamptz[]) \
               AS u(n, h, sc, z, sp, p, a, e, nt) \
             ORDER BY n \
             ON CONFLICT (name) DO UPDATE \
               SET handler = excluded.handler, schedule = excluded.schedule, \
                   zone = excluded.zone, scope = excluded.scope, policy = excluded.policy, \
                   args = excluded.args, enabled = excluded.enabled, removed = false, \
                   version = excluded.version, updated_at = excluded.updated_at, \
                   actor = excluded.actor, next_tick = excluded.next_tick"
        );
        let audit_schedules = format!(
            "INSERT INTO {audit} (at, job, node, action, actor, why, detail) \
             VALUES (now(), $1, NULL, 'schedule_put', $2, $3, $4) RETURNING {RECORD}"
        );
        let register_handlers = format!(
            "INSERT INTO {handlers} (handler, node, seen_at) \
             SELECT h.handler, $1, now() FROM unnest($2::text[]) AS h(handler) \
             ORDER BY h.handler \
             ON CONFLICT (handler, node) DO UPDATE SET seen_at = excluded.seen_at"
        );
        // The registrations of live nodes, and of nodes that never beat.
        let handlers_read = instances::live(table, &handlers, "handler");
        // As the handlers: in job order.
        let register_jobs = format!(
            "INSERT INTO {jobs} (job, node, seen_at) \
             SELECT j.job, $1, now() FROM unnest($2::text[]) AS j(job) \
             ORDER BY j.job \
             ON CONFLICT (job, node) DO UPDATE SET seen_at = excluded.seen_at"
        );
        let jobs_read = instances::live(table, &jobs, "job");
        let leases = format!(
            "SELECT name, holder, tick, token, expires_at, released_at FROM {t} ORDER BY name"
        );
        let run_columns = "id, job, tick, node, token, started, finished, outcome, error, attempt";
        let runs_all =
            format!("SELECT {run_columns} FROM {runs} WHERE id < $1 ORDER BY id DESC LIMIT $2");
        let job_runs = format!(
            "SELECT {run_columns} FROM {runs} WHERE job = $1 AND id < $2 ORDER BY id DESC LIMIT $3"
        );
        Self {
            channel,
            pause,
            resume,
            trigger,
            lock_version,
            job_paused,
            trigger_status,
            claim,
            finish,
            history,
            job_history,
            version: version_read,
            paused,
            resumed,
            open_triggers,
            changed_schedules,
            changed_among,
            schedule: one_schedule,
            schedules_page,
            put_schedule,
            remove_schedule,
            bump,
            put_schedules,
            audit_schedules,
            register_handlers,
            handlers: handlers_read,
            register_jobs,
            jobs: jobs_read,
            leases,
            runs: runs_all,
            job_runs,
            instances: InstanceSql::new(table),
            due: DueSql::new(table),
        }
    }
}
