//! `schedules list | put | rm`: dynamic schedules, jobs defined by rows and bound to
//! handlers the app registered by name; every instance picks a change up within a
//! poll interval.

use scheduler_core::control::policy_from_spec;
use scheduler_core::{ControlRecord, Controls, ScheduleRow, Scope};
use serde::Serialize;

use crate::EXIT_MISSING;
use crate::columns::{Columns, cell, instant};
use crate::control::{Applied, Who, signed};
use crate::error::{Error, Result};
use crate::json::{self, Json};
use crate::next::{cron, every, zone};

/// What `schedules` does.
#[derive(Debug, Clone, PartialEq, Eq, clap::Subcommand)]
pub enum SchedulesCommand {
    /// Every dynamic schedule: handler, schedule, zone, scope, policy, arguments.
    List,
    /// Add a dynamic schedule, or replace the one of that name.
    ///
    /// The handler must be registered by a running instance
    /// (SchedulerBuilder::handler); the schedule, zone, policy and arguments are
    /// checked before anything is stored. Exit status: 0; 2 for a schedule that
    /// does not check; 5 when the store refuses it (an unknown handler).
    Put(PutArgs),
    /// Remove a dynamic schedule: every instance stops running it within a poll
    /// interval. Exit status: 0; 4 when there is no schedule of that name.
    #[command(visible_alias = "remove")]
    Rm(RmArgs),
    /// Put many dynamic schedules in one batch, all or none: a file of
    /// `schedules list --json`'s output (or a JSON array of its rows), `-` for
    /// standard input. Every row is checked before anything is stored; one version
    /// bump and one audit record for the batch. Exit status: 0; 2 for a file or a
    /// row that does not check (named by its position); 5 when the store refuses a
    /// row (an unknown handler).
    Import(crate::import::ImportArgs),
}

/// `schedules put NAME --handler H (--cron EXPR [--zone Z] | --every PERIOD)
/// [--scope cluster|node] [--policy SPEC] [--args JSON] [--disabled]
/// [--min-period PERIOD]`.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct PutArgs {
    /// The job's name (it must not clash with a job registered in code).
    pub name: String,
    /// The handler the app registered by this name.
    #[arg(long, value_name = "NAME")]
    pub handler: String,
    /// The schedule.
    #[command(flatten)]
    pub schedule: WrittenSchedule,
    /// The IANA time zone the cron expression is read in (default UTC).
    #[arg(long, visible_alias = "tz", value_name = "ZONE", value_parser = zone, conflicts_with = "every")]
    pub zone: Option<String>,
    /// Once per tick in the cluster, or once per tick per node.
    #[arg(long, value_name = "SCOPE", default_value = "cluster", value_parser = scope)]
    pub scope: Scope,
    /// The policy in the job attribute's key syntax: 'overlap = "skip", retry = 2, timeout = "5m"'
    /// (keys catch_up, catch_up_max, overlap, max_concurrent, retry, retry_backoff,
    /// timeout); default the job defaults.
    #[arg(
        long,
        value_name = "SPEC",
        default_value = "",
        hide_default_value = true,
        value_parser = policy
    )]
    pub policy: String,
    /// The arguments handed to the handler, as JSON.
    #[arg(long, value_name = "JSON", default_value = "{}", value_parser = json_text)]
    pub args: String,
    /// Store it disabled: kept, but it takes no ticks.
    #[arg(long)]
    pub disabled: bool,
    /// The shortest --every period accepted ("100ms"): lowers the store's default of
    /// 1 s for this command's put (a shorter period is most often a typo, `1ms` for
    /// `1m`).
    #[arg(long, value_name = "PERIOD", default_value = "1s", value_parser = crate::import::min_period)]
    pub min_period: std::time::Duration,
    /// Who asks, and why.
    #[command(flatten)]
    pub who: Who,
}

/// `--cron EXPR` or `--every PERIOD`, exactly one.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
#[group(required = true, multiple = false)]
pub struct WrittenSchedule {
    /// A cron expression, crontab's way: "min hour day month weekday" (seconds first
    /// and a year last may be added).
    #[arg(long, value_name = "EXPR", value_parser = cron)]
    pub cron: Option<String>,
    /// A period ("30s", "15m", "1h30m"): ticks at its multiples since the Unix epoch.
    #[arg(long, value_name = "PERIOD", value_parser = every_text)]
    pub every: Option<String>,
}

/// `schedules rm NAME`.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct RmArgs {
    /// The dynamic schedule's name.
    pub name: String,
    /// Who asks, and why.
    #[command(flatten)]
    pub who: Who,
}

fn scope(text: &str) -> std::result::Result<Scope, String> {
    match text {
        "cluster" => Ok(Scope::Cluster),
        "node" => Ok(Scope::Node),
        other => Err(format!("{other:?} is no scope: cluster or node")),
    }
}

fn policy(spec: &str) -> std::result::Result<String, String> {
    policy_from_spec(spec)?;
    Ok(spec.to_owned())
}

fn json_text(text: &str) -> std::result::Result<String, String> {
    serde_json::from_str::<serde_json::Value>(text).map_err(|e| format!("not JSON: {e}"))?;
    Ok(text.to_owned())
}

/// A period as written (`30s`), once it checks.
fn every_text(text: &str) -> std::result::Result<String, scheduler_core::ScheduleError> {
    every(text)?;
    Ok(text.to_owned())
}

impl PutArgs {
    /// The row these arguments describe, checked
    /// ([`ScheduleRow::check_with_min_period`], with `--min-period`).
    ///
    /// # Errors
    /// [`Error::BadSchedule`] if it does not check.
    pub fn row(&self) -> Result<ScheduleRow> {
        let schedule = match (&self.schedule.cron, &self.schedule.every) {
            (Some(expr), _) => expr.clone(),
            (None, Some(period)) => format!("every {period}"),
            // clap's group requires one.
            (None, None) => String::new(),
        };
        let mut row = ScheduleRow::new(&self.name, &self.handler, schedule);
        row.zone = self.zone.clone();
        row.scope = self.scope;
        row.policy = self.policy.clone();
        row.args = self.args.clone();
        row.enabled = !self.disabled;
        row.check_with_min_period(self.min_period)
            .map_err(Error::BadSchedule)?;
        Ok(row)
    }
}

/// What `schedules list` shows. Serialized as the `--json` output: `{"schedules":
/// [{"name", "handler", "schedule", "zone", "scope", "policy", "args" (JSON),
/// "enabled", "version", "updated_at"}]}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Schedules {
    /// Every dynamic schedule, by name.
    #[serde(serialize_with = "json::rows")]
    pub schedules: Vec<ScheduleRow>,
}

/// Reads every dynamic schedule.
///
/// # Errors
/// [`Error::Control`] if the store fails.
pub async fn schedules(controls: &dyn Controls) -> Result<Schedules> {
    let schedules = controls
        .schedules()
        .await?
        .into_iter()
        .filter(|row| !row.removed)
        .collect();
    Ok(Schedules { schedules })
}

/// Adds or replaces the dynamic schedule `row.name`, after checking it here
/// ([`ScheduleRow::parse`]) and in the store (the limits of an `every` schedule, as
/// the store's minimum period says; its handler registered, its arguments JSON).
///
/// # Errors
/// [`Error::BadSchedule`] if the row does not check, [`Error::Control`] if the store
/// fails or refuses it ([`Error::exit_code`]: 5 for an unknown handler).
pub async fn put_schedule(
    controls: &dyn Controls,
    row: &ScheduleRow,
    by: &str,
    why: &str,
) -> Result<Applied> {
    row.parse().map_err(Error::BadSchedule)?;
    Ok(Applied {
        record: controls.put_schedule(row, by, why).await?,
    })
}

/// What `schedules rm` did. Serialized as the `--json` output: `name`, `removed`
/// (`false`: there was none), and `control`, the record (`null` when none).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Removed {
    /// The schedule's name.
    pub name: String,
    /// The record of its removal, or `None`: there was no schedule of that name.
    pub record: Option<ControlRecord>,
}

/// Removes the dynamic schedule `name`.
///
/// # Errors
/// [`Error::Control`] if the store fails.
pub async fn remove_schedule(
    controls: &dyn Controls,
    name: &str,
    by: &str,
    why: &str,
) -> Result<Removed> {
    Ok(Removed {
        name: name.to_owned(),
        record: controls.remove_schedule(name, by, why).await?,
    })
}

impl Removed {
    /// The process's exit code: 0, or [`EXIT_MISSING`] when there was no schedule of
    /// that name.
    pub fn exit_code(&self) -> u8 {
        match self.record {
            Some(_) => 0,
            None => EXIT_MISSING,
        }
    }

    /// The human output: one line.
    pub fn human(&self) -> String {
        match &self.record {
            Some(record) => format!(
                "removed dynamic schedule {}; every instance stops running it within a poll \
                 interval ({})\n",
                self.name,
                signed(record)
            ),
            None => format!(
                "no dynamic schedule named {} (`schedules list` shows them)\n",
                self.name
            ),
        }
    }

    /// The `--json` output.
    ///
    /// # Errors
    /// [`Error::Json`], which these types never cause.
    pub fn json(&self) -> Result<String> {
        #[derive(Serialize)]
        struct Shape<'a> {
            name: &'a str,
            removed: bool,
            control: Option<Json<'a, ControlRecord>>,
        }
        let shape = Shape {
            name: &self.name,
            removed: self.record.is_some(),
            control: self.record.as_ref().map(Json),
        };
        Ok(serde_json::to_string_pretty(&shape)? + "\n")
    }
}

impl Schedules {
    /// The human output: one aligned row per schedule.
    pub fn human(&self) -> String {
        if self.schedules.is_empty() {
            return "no dynamic schedules\n".to_owned();
        }
        let mut t = Columns::new(&[
            "NAME", "HANDLER", "SCHEDULE", "ZONE", "SCOPE", "POLICY", "ENABLED", "UPDATED", "ARGS",
        ]);
        for r in &self.schedules {
            t.push(vec![
                r.name.clone(),
                r.handler.clone(),
                r.schedule.clone(),
                r.zone.clone().unwrap_or_else(|| "UTC".to_owned()),
                r.scope.to_string(),
                match r.policy.trim() {
                    "" => "default".to_owned(),
                    policy => cell(policy, 40),
                },
                if r.enabled { "yes" } else { "no" }.to_owned(),
                r.updated_at.map(instant).unwrap_or_else(|| "-".to_owned()),
                cell(&r.args, 60),
            ]);
        }
        t.render()
    }

    /// The `--json` output.
    ///
    /// # Errors
    /// [`Error::Json`], which these types never cause.
    pub fn json(&self) -> Result<String> {
        Ok(serde_json::to_string_pretty(self)? + "\n")
    }
}
