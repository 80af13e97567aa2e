//! `instances`: the instances of the cluster, as each one's heartbeat left its row
//! ([`Controls::instances`]), and whether a live one runs a job (what `trigger`
//! warns about).

use chrono::{DateTime, Utc};
use scheduler_core::{Controls, InstanceRow};
use serde::ser::{Serialize, SerializeStruct, Serializer};

use crate::columns::{Columns, cell, duration, instant};
use crate::error::Result;

/// What `instances` shows. Serialized as the `--json` output: `{"now", "instances":
/// [{"node", "version", "state" (`live`, `stopped`, `expired`), "started_at",
/// "seen_at", "expires_at", "handlers", "jobs"}]}`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Instances {
    /// The store's clock when they were read: what `state` is judged at.
    pub now: DateTime<Utc>,
    /// Every instance that ever beat, by node.
    pub instances: Vec<InstanceRow>,
}

/// An instance's state at `now`: `live`, `stopped` (it said so at shutdown) or
/// `expired` (no beat for three intervals).
fn state(row: &InstanceRow, now: DateTime<Utc>) -> &'static str {
    if row.stopped {
        "stopped"
    } else if row.is_live(now) {
        "live"
    } else {
        "expired"
    }
}

/// Reads every instance, and the store's clock.
///
/// # Errors
/// [`Error::Control`](crate::Error::Control) if the store fails.
pub async fn instances(store: &dyn scheduler_core::Store) -> Result<Instances> {
    let controls = store.controls().ok_or(crate::error::Error::NoControls)?;
    let instances = controls.instances().await?;
    let now = store.now().await?;
    Ok(Instances { now, instances })
}

/// Whether a live instance (or one of a version before heartbeats) runs `job`: it
/// registered the job ([`Controls::jobs`]), or the job is a dynamic schedule whose
/// handler such an instance registered ([`Controls::handlers`]).
///
/// # Errors
/// [`Error::Control`](crate::Error::Control) if the store fails.
pub async fn runs_live(controls: &dyn Controls, job: &str) -> Result<bool> {
    if controls.jobs().await?.iter().any(|j| j == job) {
        return Ok(true);
    }
    let Some(row) = controls.schedule(job).await? else {
        return Ok(false);
    };
    Ok(controls.handlers().await?.contains(&row.handler))
}

impl Instances {
    /// Aligned columns: node, version, state, started, last seen, handlers, jobs.
    pub fn human(&self) -> String {
        if self.instances.is_empty() {
            return "no instance has recorded a heartbeat\n".to_owned();
        }
        let mut t = Columns::new(&[
            "NODE",
            "VERSION",
            "STATE",
            "STARTED",
            "LAST SEEN",
            "HANDLERS",
            "JOBS",
        ]);
        for row in &self.instances {
            let ago = (self.now - row.seen_at).num_milliseconds().max(0);
            t.push(vec![
                row.node.clone(),
                cell(&row.version, 24),
                state(row, self.now).to_owned(),
                instant(row.started_at),
                format!("{} ago", duration(ago)),
                cell(&row.handlers.join(","), 40),
                cell(&row.jobs.join(","), 60),
            ]);
        }
        t.render()
    }

    /// The `--json` output.
    ///
    /// # Errors
    /// [`Error::Json`](crate::Error::Json) if it cannot be written (never, in practice).
    pub fn json(&self) -> Result<String> {
        Ok(serde_json::to_string_pretty(self)? + "\n")
    }
}

impl Serialize for Instances {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        struct Row<'a>(&'a InstanceRow, DateTime<Utc>);
        impl Serialize for Row<'_> {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                let (r, now) = (self.0, self.1);
                let mut s = serializer.serialize_struct("Instance", 8)?;
                s.serialize_field("node", &r.node)?;
                s.serialize_field("version", &r.version)?;
                s.serialize_field("state", state(r, now))?;
                s.serialize_field("started_at", &r.started_at)?;
                s.serialize_field("seen_at", &r.seen_at)?;
                s.serialize_field("expires_at", &r.expires_at)?;
                s.serialize_field("handlers", &r.handlers)?;
                s.serialize_field("jobs", &r.jobs)?;
                s.end()
            }
        }
        let rows: Vec<Row<'_>> = self.instances.iter().map(|r| Row(r, self.now)).collect();
        let mut s = serializer.serialize_struct("Instances", 2)?;
        s.serialize_field("now", &self.now)?;
        s.serialize_field("instances", &rows)?;
        s.end()
    }
}
