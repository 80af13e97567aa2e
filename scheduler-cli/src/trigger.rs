//! `trigger` and `trigger-status`: one extra run of a job, exactly once in the
//! cluster, and where it stands.
//!
//! The CLI only asks: an instance running the job claims the trigger within its
//! poll interval and runs it under the job's lease (so its overlap policy holds).
//! `--wait` follows the trigger until it is done.

use std::time::Duration;

use chrono::{DateTime, Utc};
use scheduler_core::{ControlRequest, Controls, Outcome, Trigger, TriggerId, TriggerState};
use tokio::time::Instant;

use crate::columns::{duration, instant};
use crate::control::{Who, place, request};
use crate::error::{Error, Result};
use crate::json::Json;

/// The exit code of `--wait` when the triggered run ended other than well (`failed`,
/// `timed_out`, `cancelled`, …, or an outcome this version does not know).
pub const EXIT_RUN_FAILED: u8 = 6;
/// The exit code of `--wait` when the triggered run was skipped: the job's overlap
/// policy refused it, a run being under way.
pub const EXIT_SKIPPED: u8 = 7;
/// The exit code of `--wait` when the trigger was still pending or running at the
/// `--timeout`.
pub const EXIT_NOT_DONE: u8 = 8;

/// `--wait [--timeout 60s]`.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct WaitArgs {
    /// Follow the trigger until its run ends; the exit code says how it ended.
    #[arg(long)]
    pub wait: bool,
    /// How long to wait ("90s", "5m").
    #[arg(
        long,
        value_name = "PERIOD",
        default_value = "60s",
        requires = "wait",
        value_parser = period
    )]
    pub timeout: Duration,
}

fn period(text: &str) -> std::result::Result<Duration, String> {
    scheduler_core::parse_duration(text).map_err(|e| e.to_string())
}

impl WaitArgs {
    /// How long to wait, if at all.
    pub fn timeout(&self) -> Option<Duration> {
        self.wait.then_some(self.timeout)
    }
}

/// `trigger JOB [--node N] [--by WHO] [--why TEXT] [--wait [--timeout 60s]]`.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct TriggerArgs {
    /// The job.
    pub job: String,
    /// The node to run it on (a node-scoped job); default any instance.
    #[arg(long, value_name = "NODE")]
    pub node: Option<String>,
    /// Ask for a run of a job no instance knows; without it, an unknown name is
    /// refused.
    #[arg(long)]
    pub force: bool,
    /// Run it even if it is paused (everywhere, or on --node): recorded as
    /// `trigger_while_paused`. Without it a trigger of a paused job is refused.
    #[arg(long)]
    pub while_paused: bool,
    /// Who asks, and why.
    #[command(flatten)]
    pub who: Who,
    /// Whether to wait for the run.
    #[command(flatten)]
    pub wait: WaitArgs,
}

impl TriggerArgs {
    /// The request these arguments make.
    pub fn request(&self) -> ControlRequest {
        request(&self.job, self.node.as_deref(), &self.who).while_paused(self.while_paused)
    }
}

/// `trigger-status ID [--wait [--timeout 60s]]`.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct TriggerStatusArgs {
    /// The trigger's id, as `trigger` printed it.
    pub id: i64,
    /// Whether to wait for the run.
    #[command(flatten)]
    pub wait: WaitArgs,
}

/// A trigger as the command last saw it. Serialized as the `--json` output: `id`,
/// `job`, `node`, `requested_at`, `by`, `why`, `state` (`pending`, `running`,
/// `done`), `holder` and `started_at` (running), `outcome`, `error` and
/// `finished_at` (done), each `null` when it does not apply.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Triggered {
    /// The trigger.
    pub trigger: Trigger,
    /// How long the command waited for the run to end, if it was asked to wait.
    pub waited: Option<Duration>,
}

/// Asks for one extra run of `request.job`; returns at once, the trigger pending.
///
/// # Errors
/// [`Error::Control`] if the store fails or refuses.
pub async fn trigger(controls: &dyn Controls, request: &ControlRequest) -> Result<Triggered> {
    Ok(Triggered {
        trigger: controls.trigger(request).await?,
        waited: None,
    })
}

/// Trigger `id` as it stands; with `wait`, once its run has ended, or as it stood
/// after `wait`.
///
/// # Errors
/// [`Error::NoSuchTrigger`] if the store does not know `id`, [`Error::Control`] if
/// the store fails.
pub async fn trigger_status(
    controls: &dyn Controls,
    id: TriggerId,
    wait: Option<Duration>,
) -> Result<Triggered> {
    let deadline = wait.map(|wait| Instant::now() + wait);
    // A run usually ends within a poll interval or two: ask often at first, then
    // every second.
    let mut pause = Duration::from_millis(100);
    loop {
        let trigger = controls
            .trigger_status(id)
            .await?
            .ok_or(Error::NoSuchTrigger { id })?;
        let done = matches!(trigger.state, TriggerState::Done { .. });
        match deadline {
            Some(deadline) if !done && Instant::now() < deadline => {
                tokio::time::sleep(pause.min(deadline - Instant::now())).await;
                pause = (pause * 2).min(Duration::from_secs(1));
            }
            _ => {
                return Ok(Triggered {
                    trigger,
                    waited: wait,
                });
            }
        }
    }
}

impl Triggered {
    /// The process's exit code: 0, unless the command waited and the run ended other
    /// than well ([`EXIT_RUN_FAILED`]), was skipped ([`EXIT_SKIPPED`]) or had not
    /// ended ([`EXIT_NOT_DONE`]). Without waiting, a run that ended is judged the
    /// same way; one not ended yet is 0.
    pub fn exit_code(&self) -> u8 {
        match &self.trigger.state {
            TriggerState::Done { outcome, .. } if outcome.is_success() => 0,
            TriggerState::Done {
                outcome: Outcome::Skipped,
                ..
            } => EXIT_SKIPPED,
            TriggerState::Done { .. } => EXIT_RUN_FAILED,
            _ if self.waited.is_some() => EXIT_NOT_DONE,
            _ => 0,
        }
    }

    /// The human output: where the trigger stands, in one line (two when it was
    /// just asked for: how to follow it).
    pub fn human(&self) -> String {
        let t = &self.trigger;
        // No node: whichever instance claims it, once.
        let node = match &t.node {
            Some(_) => place(t.node.as_deref()),
            None => String::new(),
        };
        let head = format!("trigger {} of {}{node}", t.id, t.job);
        let asked = format!("asked by {} at {}", t.by, instant(t.requested_at));
        let since = |at: DateTime<Utc>| duration((at - t.requested_at).num_milliseconds());
        match &t.state {
            TriggerState::Pending => match self.waited {
                None => format!(
                    "{head}: pending ({asked}); an instance running {job} claims it within its \
                     poll interval\nfollow it with: scheduler-cli trigger-status {id} --wait\n",
                    job = t.job,
                    id = t.id
                ),
                Some(waited) => format!(
                    "{head}: still pending after {}: no instance running {} has claimed it \
                     ({asked})\n",
                    duration(millis(waited)),
                    t.job
                ),
            },
            TriggerState::Running { holder, started_at } => {
                let still = match self.waited {
                    Some(waited) => format!("still running after {}", duration(millis(waited))),
                    None => "running".to_owned(),
                };
                format!(
                    "{head}: {still}, held by {holder} since {} ({asked})\n",
                    instant(*started_at)
                )
            }
            TriggerState::Done {
                outcome,
                error,
                finished_at,
            } => {
                let error = error
                    .as_deref()
                    .map(|e| format!(": {e}"))
                    .unwrap_or_default();
                let note = match outcome {
                    Outcome::Skipped => " (its overlap policy refused it: a run was under way)",
                    Outcome::Unknown => {
                        " (a newer version recorded an outcome this one does not know)"
                    }
                    _ => "",
                };
                format!(
                    "{head}: {outcome}{note} at {}, {} after it was asked for ({asked}){error}\n",
                    instant(*finished_at),
                    since(*finished_at)
                )
            }
            other => format!("{head}: {other:?} ({asked})\n"),
        }
    }

    /// The `--json` output.
    ///
    /// # Errors
    /// [`Error::Json`], which these types never cause.
    pub fn json(&self) -> Result<String> {
        Ok(serde_json::to_string_pretty(&Json(&self.trigger))? + "\n")
    }
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use chrono::TimeDelta;

    use super::*;

    fn triggered(state: TriggerState, waited: Option<Duration>) -> Triggered {
        Triggered {
            trigger: Trigger {
                id: TriggerId(42),
                job: "sweep".into(),
                node: None,
                requested_at: DateTime::from_timestamp(1_790_000_000, 0).unwrap(),
                by: "ops".into(),
                why: String::new(),
                state,
            },
            waited,
        }
    }

    fn done(outcome: Outcome, error: Option<&str>) -> TriggerState {
        TriggerState::Done {
            outcome,
            error: error.map(str::to_owned),
            finished_at: DateTime::from_timestamp(1_790_000_000, 0).unwrap()
                + TimeDelta::milliseconds(1500),
        }
    }

    #[test]
    fn the_exit_code_says_how_the_run_ended() {
        let wait = Some(Duration::from_secs(60));
        assert_eq!(triggered(TriggerState::Pending, None).exit_code(), 0);
        assert_eq!(
            triggered(TriggerState::Pending, wait).exit_code(),
            EXIT_NOT_DONE
        );
        assert_eq!(
            triggered(done(Outcome::Succeeded, None), wait).exit_code(),
            0
        );
        assert_eq!(
            triggered(done(Outcome::Succeeded, None), None).exit_code(),
            0
        );
        assert_eq!(
            triggered(done(Outcome::Failed, Some("boom")), wait).exit_code(),
            EXIT_RUN_FAILED
        );
        for ended in [
            Outcome::TimedOut,
            Outcome::Cancelled,
            Outcome::CancelledByNewer,
            // A newer version's word: not known to have ended well.
            Outcome::Unknown,
        ] {
            assert_eq!(
                triggered(done(ended, None), wait).exit_code(),
                EXIT_RUN_FAILED,
                "{ended}"
            );
        }
        assert_eq!(
            triggered(done(Outcome::Skipped, None), wait).exit_code(),
            EXIT_SKIPPED
        );
    }

    #[test]
    fn the_human_output_says_where_it_stands() {
        let pending = triggered(TriggerState::Pending, None).human();
        assert!(
            pending.starts_with("trigger 42 of sweep: pending (asked by ops at "),
            "{pending}"
        );
        assert!(
            pending.ends_with("\nfollow it with: scheduler-cli trigger-status 42 --wait\n"),
            "{pending}"
        );
        let failed = triggered(done(Outcome::Failed, Some("boom")), Some(Duration::ZERO)).human();
        assert_eq!(
            failed,
            "trigger 42 of sweep: failed at 2026-09-21T14:13:21.500Z, 1s after \
             it was asked for (asked by ops at 2026-09-21T14:13:20Z): boom\n"
        );
        let json: serde_json::Value = serde_json::from_str(
            &triggered(done(Outcome::Failed, Some("boom")), None)
                .json()
                .unwrap(),
        )
        .unwrap();
        assert_eq!(json["id"], 42);
        assert_eq!(json["state"], "done");
        assert_eq!(json["outcome"], "failed");
        assert_eq!(json["error"], "boom");
        assert_eq!(json["holder"], serde_json::Value::Null);
        let skipped = triggered(done(Outcome::Skipped, None), None).human();
        assert!(
            skipped.starts_with(
                "trigger 42 of sweep: skipped (its overlap policy refused it: a run was under \
                 way) at "
            ),
            "{skipped}"
        );
        let unknown = triggered(done(Outcome::Unknown, None), None).human();
        assert!(
            unknown.starts_with(
                "trigger 42 of sweep: unknown (a newer version recorded an outcome this one \
                 does not know) at "
            ),
            "{unknown}"
        );
    }
}
