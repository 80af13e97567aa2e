//! `pause` and `resume`: a job's ticks refused by every instance's take, then let
//! through again; and [`Applied`], what every control the store recorded prints.

use scheduler_core::{ControlAction, ControlRecord, ControlRequest, Controls};

use crate::columns::instant;
use crate::error::Result;
use crate::json::Json;

/// Who asks for a control, and why: `--by WHO --why TEXT`, kept in its record.
#[derive(Debug, Clone, Default, PartialEq, Eq, clap::Args)]
pub struct Who {
    /// Who asks, as the record keeps it (default `cli:$USER@HOSTNAME`).
    #[arg(long, value_name = "WHO")]
    pub by: Option<String>,
    /// Why, as the record keeps it.
    #[arg(
        long,
        value_name = "TEXT",
        default_value = "",
        hide_default_value = true
    )]
    pub why: String,
}

impl Who {
    /// `--by`, or else [`default_actor`].
    pub fn actor(&self) -> String {
        self.by.clone().unwrap_or_else(default_actor)
    }
}

/// Who runs this command, as far as the environment says: `cli:USER@HOST`, `cli:USER`
/// or `cli@HOST`, from `USER` (or `LOGNAME`) and the host's name; `cli` when neither
/// is known.
pub fn default_actor() -> String {
    let user = ["USER", "LOGNAME"]
        .into_iter()
        .filter_map(|name| std::env::var(name).ok())
        .find(|user| !user.trim().is_empty());
    let host = gethostname::gethostname()
        .into_string()
        .ok()
        .filter(|host| !host.trim().is_empty());
    match (user, host) {
        (Some(user), Some(host)) => format!("cli:{user}@{host}"),
        (Some(user), None) => format!("cli:{user}"),
        (None, Some(host)) => format!("cli@{host}"),
        (None, None) => "cli".to_owned(),
    }
}

/// `pause JOB [--node N] [--by WHO] [--why TEXT]`.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct PauseArgs {
    /// The job: one registered in code, or a dynamic schedule's name.
    pub job: String,
    /// Only on this node (a node-scoped job's run there); default every node.
    #[arg(long, value_name = "NODE")]
    pub node: Option<String>,
    /// Act on a job no instance knows (a job about to be deployed); without it, an
    /// unknown name is refused.
    #[arg(long)]
    pub force: bool,
    /// Who asks, and why.
    #[command(flatten)]
    pub who: Who,
}

impl PauseArgs {
    /// The request these arguments make.
    pub fn request(&self) -> ControlRequest {
        request(&self.job, self.node.as_deref(), &self.who)
    }
}

/// `resume JOB [--node N] [--no-catch-up] [--by WHO] [--why TEXT]`.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct ResumeArgs {
    /// The job.
    pub job: String,
    /// Only on this node; default every node.
    #[arg(long, value_name = "NODE")]
    pub node: Option<String>,
    /// Drop the ticks paused over instead of catching them up as the job's catch-up
    /// policy says.
    #[arg(long)]
    pub no_catch_up: bool,
    /// Act on a job no instance knows; without it, an unknown name is refused.
    #[arg(long)]
    pub force: bool,
    /// Who asks, and why.
    #[command(flatten)]
    pub who: Who,
}

impl ResumeArgs {
    /// The request these arguments make.
    pub fn request(&self) -> ControlRequest {
        request(&self.job, self.node.as_deref(), &self.who)
    }
}

pub(crate) fn request(job: &str, node: Option<&str>, who: &Who) -> ControlRequest {
    let request = ControlRequest::new(job, who.actor()).why(who.why.clone());
    match node {
        Some(node) => request.node(node),
        None => request,
    }
}

/// A control the store applied and recorded: what `pause`, `resume`, `schedules put`
/// and `schedules rm` print. Serialized as the `--json` output: `id`, `at`, `job`,
/// `node`, `action` (`pause`, `resume`, `resume_no_catch_up`, `trigger`,
/// `trigger_while_paused`, `schedule_put`,
/// `schedule_remove`, …), `by`, `why`, `detail`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Applied {
    /// The record.
    pub record: ControlRecord,
}

/// Pauses `request.job` (on `request.node`, or everywhere): from now on every
/// instance's take of its ticks is refused, and the ticks counted `paused`.
///
/// # Errors
/// [`Error::Control`](crate::Error::Control) if the store fails or refuses.
pub async fn pause(controls: &dyn Controls, request: &ControlRequest) -> Result<Applied> {
    Ok(Applied {
        record: controls.pause(request).await?,
    })
}

/// Ends the pause of `request.job` (on `request.node`, or everywhere); with
/// `catch_up`, the ticks paused over are caught up as the job's catch-up policy says.
///
/// # Errors
/// [`Error::Control`](crate::Error::Control) if the store fails or refuses.
pub async fn resume(
    controls: &dyn Controls,
    request: &ControlRequest,
    catch_up: bool,
) -> Result<Applied> {
    Ok(Applied {
        record: controls.resume(request, catch_up).await?,
    })
}

/// ` on node N` or ` on every node`.
pub(crate) fn place(node: Option<&str>) -> String {
    match node {
        Some(node) => format!(" on node {node}"),
        None => " on every node".to_owned(),
    }
}

/// `control 12 by cli:alice@web-1 at …: "why"`, the tail of a record's line.
pub(crate) fn signed(record: &ControlRecord) -> String {
    let why = match record.why.as_str() {
        "" => String::new(),
        why => format!(": {why:?}"),
    };
    format!(
        "control {} by {} at {}{why}",
        record.id,
        record.by,
        instant(record.at)
    )
}

impl Applied {
    /// The human output: one line saying what was done, by whom, and why.
    pub fn human(&self) -> String {
        let r = &self.record;
        let (job, place) = (&r.job, place(r.node.as_deref()));
        let what = match r.action {
            ControlAction::Pause => format!(
                "paused {job}{place}: its ticks are refused (counted paused) until it is resumed"
            ),
            ControlAction::Resume => format!(
                "resumed {job}{place}: the ticks paused over are caught up as its catch-up \
                 policy says"
            ),
            ControlAction::ResumeWithoutCatchUp => {
                format!("resumed {job}{place}: the ticks paused over are dropped")
            }
            ControlAction::Trigger => format!("triggered {job}{place}: trigger {}", r.detail),
            ControlAction::TriggerWhilePaused => format!(
                "triggered {job}{place} while it is paused: trigger {}",
                r.detail
            ),
            ControlAction::SchedulePut => format!(
                "stored dynamic schedule {job}; every instance picks it up within a poll interval"
            ),
            ControlAction::ScheduleRemove => format!("removed dynamic schedule {job}"),
            // A later version's action.
            other => format!("{other} {job}{place}"),
        };
        format!("{what} ({})\n", signed(r))
    }

    /// The `--json` output.
    ///
    /// # Errors
    /// [`Error::Json`](crate::Error::Json), which these types never cause.
    pub fn json(&self) -> Result<String> {
        Ok(serde_json::to_string_pretty(&Json(&self.record))? + "\n")
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use chrono::DateTime;

    use super::*;

    fn record(action: ControlAction, node: Option<&str>, why: &str) -> ControlRecord {
        ControlRecord {
            id: 12,
            at: DateTime::from_timestamp(1_790_000_000, 0).unwrap(),
            job: "sweep".into(),
            node: node.map(str::to_owned),
            action,
            by: "cli:alice@web-1".into(),
            why: why.into(),
            detail: String::new(),
        }
    }

    #[test]
    fn a_control_says_what_it_did_who_and_why() {
        let paused = Applied {
            record: record(ControlAction::Pause, None, "disk full"),
        };
        assert_eq!(
            paused.human(),
            "paused sweep on every node: its ticks are refused (counted paused) until it is \
             resumed (control 12 by cli:alice@web-1 at 2026-09-21T14:13:20Z: \"disk full\")\n"
        );
        let resumed = Applied {
            record: record(ControlAction::ResumeWithoutCatchUp, Some("node-a"), ""),
        };
        assert_eq!(
            resumed.human(),
            "resumed sweep on node node-a: the ticks paused over are dropped (control 12 by \
             cli:alice@web-1 at 2026-09-21T14:13:20Z)\n"
        );
        let json: serde_json::Value = serde_json::from_str(&resumed.json().unwrap()).unwrap();
        assert_eq!(json["action"], "resume_no_catch_up");
        assert_eq!(json["node"], "node-a");
        assert_eq!(json["by"], "cli:alice@web-1");
    }

    #[test]
    fn the_actor_is_the_flag_or_who_runs_the_command() {
        let who = Who {
            by: Some("ops-bot".into()),
            why: String::new(),
        };
        assert_eq!(who.actor(), "ops-bot");
        assert!(Who::default().actor().starts_with("cli"));
    }
}
