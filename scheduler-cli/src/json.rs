//! The `--json` shape of `scheduler_postgres::diagnostics`' typed rows and of
//! `scheduler_core::control`'s. These field names are the CLI's stable contract:
//! renaming a field of a row does not change them.

use scheduler_core::{ControlRecord, RunRow, ScheduleRow, Trigger, TriggerState};
use scheduler_postgres::diagnostics::{AdvisoryLock, Forgotten, LastRun, LeaseState, LeaseStatus};
use serde::ser::{Serialize, SerializeStruct, Serializer};

use crate::forget::Forget;

/// A typed row, serialized with the CLI's field names.
pub(crate) struct Json<'a, T>(pub(crate) &'a T);

/// Serializes `rows` as a sequence of [`Json`] rows (`#[serde(serialize_with)]`).
pub(crate) fn rows<T, S>(rows: &[T], serializer: S) -> Result<S::Ok, S::Error>
where
    for<'a> Json<'a, T>: Serialize,
    S: Serializer,
{
    serializer.collect_seq(rows.iter().map(Json))
}

impl Serialize for Json<'_, LeaseStatus> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let l = self.0;
        let mut s = serializer.serialize_struct("LeaseStatus", 10)?;
        s.serialize_field("lease", &l.lease)?;
        s.serialize_field("holder", &l.holder)?;
        s.serialize_field("tick", &l.tick)?;
        s.serialize_field("token", &l.token)?;
        s.serialize_field("taken_at", &l.taken_at)?;
        s.serialize_field("expires_at", &l.expires_at)?;
        s.serialize_field("expires_in_ms", &l.expires_in_ms)?;
        s.serialize_field("state", l.state.as_str())?;
        s.serialize_field("released_at", &l.released_at)?;
        s.serialize_field("last_run", &l.last_run.as_ref().map(Json))?;
        s.end()
    }
}

impl Serialize for Json<'_, LastRun> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let r = self.0;
        let mut s = serializer.serialize_struct("LastRun", 7)?;
        s.serialize_field("node", &r.node)?;
        s.serialize_field("tick", &r.tick)?;
        s.serialize_field("started", &r.started)?;
        s.serialize_field("finished", &r.finished)?;
        s.serialize_field("outcome", r.outcome.as_str())?;
        s.serialize_field("error", &r.error)?;
        s.serialize_field("lease_lost", &r.lease_lost)?;
        s.end()
    }
}

impl Serialize for Json<'_, AdvisoryLock> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let l = self.0;
        let mut s = serializer.serialize_struct("AdvisoryLock", 15)?;
        s.serialize_field("pid", &l.pid)?;
        s.serialize_field("user", &l.user)?;
        s.serialize_field("application_name", &l.application_name)?;
        s.serialize_field("client_addr", &l.client_addr)?;
        s.serialize_field("state", &l.state)?;
        s.serialize_field("state_for_ms", &l.state_for_ms)?;
        s.serialize_field("key", &l.key)?;
        s.serialize_field("key_pair", &l.key_pair)?;
        s.serialize_field("classid", &l.classid)?;
        s.serialize_field("objid", &l.objid)?;
        s.serialize_field("objsubid", &l.objsubid)?;
        s.serialize_field("mode", &l.mode)?;
        s.serialize_field("granted", &l.granted)?;
        s.serialize_field("query", &l.query)?;
        s.serialize_field("pinned", &l.pinned)?;
        s.end()
    }
}

impl Serialize for Forget {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let (outcome, holder, token, state, expires_at) = match &self.forgotten {
            Forgotten::Ended {
                holder,
                token,
                expired_at,
            } => (
                "forgotten",
                Some(holder),
                Some(token),
                Some(LeaseState::Held),
                Some(expired_at),
            ),
            Forgotten::NotHeld {
                holder,
                token,
                state,
                expired_at,
            } => (
                "not_held",
                Some(holder),
                Some(token),
                Some(*state),
                Some(expired_at),
            ),
            Forgotten::Held {
                holder,
                token,
                until,
            } => (
                "held",
                Some(holder),
                Some(token),
                Some(LeaseState::Held),
                Some(until),
            ),
            Forgotten::Missing => ("missing", None, None, None, None),
            _ => ("unknown", None, None, None, None),
        };
        let mut s = serializer.serialize_struct("Forget", 8)?;
        s.serialize_field("table", &self.table)?;
        s.serialize_field("lease", &self.lease)?;
        s.serialize_field("force", &self.force)?;
        s.serialize_field("outcome", outcome)?;
        s.serialize_field("holder", &holder)?;
        s.serialize_field("token", &token)?;
        s.serialize_field("state", &state.map(LeaseState::as_str))?;
        s.serialize_field("expires_at", &expires_at)?;
        s.end()
    }
}

impl Serialize for Json<'_, ControlRecord> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let r = self.0;
        let mut s = serializer.serialize_struct("ControlRecord", 8)?;
        s.serialize_field("id", &r.id)?;
        s.serialize_field("at", &r.at)?;
        s.serialize_field("job", &r.job)?;
        s.serialize_field("node", &r.node)?;
        s.serialize_field("action", r.action.as_str())?;
        s.serialize_field("by", &r.by)?;
        s.serialize_field("why", &r.why)?;
        s.serialize_field("detail", &r.detail)?;
        s.end()
    }
}

impl Serialize for Json<'_, Trigger> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let t = self.0;
        let (state, holder, started_at, outcome, error, finished_at) = match &t.state {
            TriggerState::Pending => ("pending", None, None, None, None, None),
            TriggerState::Running { holder, started_at } => (
                "running",
                Some(holder.as_str()),
                Some(started_at),
                None,
                None,
                None,
            ),
            TriggerState::Done {
                outcome,
                error,
                finished_at,
            } => (
                "done",
                None,
                None,
                Some(outcome.as_str()),
                error.as_deref(),
                Some(finished_at),
            ),
            // A later version's state: say so rather than guess.
            _ => ("unknown", None, None, None, None, None),
        };
        let mut s = serializer.serialize_struct("Trigger", 12)?;
        s.serialize_field("id", &t.id.0)?;
        s.serialize_field("job", &t.job)?;
        s.serialize_field("node", &t.node)?;
        s.serialize_field("requested_at", &t.requested_at)?;
        s.serialize_field("by", &t.by)?;
        s.serialize_field("why", &t.why)?;
        s.serialize_field("state", state)?;
        s.serialize_field("holder", &holder)?;
        s.serialize_field("started_at", &started_at)?;
        s.serialize_field("outcome", &outcome)?;
        s.serialize_field("error", &error)?;
        s.serialize_field("finished_at", &finished_at)?;
        s.end()
    }
}

impl Serialize for Json<'_, ScheduleRow> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let r = self.0;
        // The arguments as JSON, not as a string holding JSON; text the store holds
        // that does not parse (it checks on insert) stays a string.
        let args = serde_json::from_str::<serde_json::Value>(&r.args)
            .unwrap_or_else(|_| serde_json::Value::String(r.args.clone()));
        let mut s = serializer.serialize_struct("ScheduleRow", 10)?;
        s.serialize_field("name", &r.name)?;
        s.serialize_field("handler", &r.handler)?;
        s.serialize_field("schedule", &r.schedule)?;
        s.serialize_field("zone", &r.zone)?;
        s.serialize_field("scope", &r.scope.to_string())?;
        s.serialize_field("policy", &r.policy)?;
        s.serialize_field("args", &args)?;
        s.serialize_field("enabled", &r.enabled)?;
        s.serialize_field("version", &r.version)?;
        s.serialize_field("updated_at", &r.updated_at)?;
        s.end()
    }
}

impl Serialize for Json<'_, RunRow> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let r = self.0;
        let mut s = serializer.serialize_struct("RunRow", 11)?;
        s.serialize_field("id", &r.id)?;
        s.serialize_field("job", &r.job)?;
        s.serialize_field("tick", &r.tick)?;
        s.serialize_field("node", &r.node)?;
        s.serialize_field("token", &r.token)?;
        s.serialize_field("started", &r.started)?;
        s.serialize_field("finished", &r.finished)?;
        s.serialize_field("duration_ms", &(r.finished - r.started).num_milliseconds())?;
        s.serialize_field("outcome", r.outcome.as_str())?;
        s.serialize_field("error", &r.error)?;
        s.serialize_field("attempt", &r.attempt)?;
        s.end()
    }
}
