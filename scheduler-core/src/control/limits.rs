//! The limits every store keeps on what a control writes, whatever asked (the API,
//! the CLI, the dashboard): checked once here, and by every store
//! ([`ControlTables`](super::ControlTables)) before it writes anything.
//!
//! - a reason (`why`) and an actor (`by`) of at most [`MAX_TEXT_BYTES`], and an actor
//!   that is not empty ([`check_by_why`], [`ControlRequest::check`]);
//! - an `every` schedule no more often than the store's minimum period (default
//!   [`DEFAULT_MIN_SCHEDULE_PERIOD`]) and without a time zone
//!   ([`ScheduleRow::check_with_min_period`]);
//! - a trigger of a paused job only when asked for as such ([`trigger_action`]).

use std::time::Duration;

use super::{ControlAction, ControlRequest, Pause, ScheduleRow};
use crate::error::{Error, Result};
use crate::schedule::Schedule;

/// The most bytes of a control's reason (`why`) or actor (`by`) a store keeps: 1 KiB.
/// Every viewer of the history reads them, for as long as it is kept.
pub const MAX_TEXT_BYTES: usize = 1024;

/// The shortest `every` period a store accepts in a dynamic schedule unless the app
/// lowers it (`SqliteOptions::min_schedule_period`,
/// `PostgresOptions::min_schedule_period`, [`MemoryStore::set_min_schedule_period`]):
/// 1 s. A shorter one is most often a typo (`every 1ms` for `every 1m`) that would run
/// the job a thousand times a second.
///
/// [`MemoryStore::set_min_schedule_period`]: crate::MemoryStore::set_min_schedule_period
pub const DEFAULT_MIN_SCHEDULE_PERIOD: Duration = Duration::from_secs(1);

/// `n` with its thousands separated: `1,900,000`.
fn thousands(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn too_long(what: &str, text: &str) -> Result<()> {
    if text.len() <= MAX_TEXT_BYTES {
        return Ok(());
    }
    Err(Error::InvalidInput {
        reason: format!(
            "{what} is {} bytes; at most {} are kept: shorten it (nothing was written)",
            thousands(text.len()),
            thousands(MAX_TEXT_BYTES)
        ),
    })
}

/// Checks a control's actor and reason: `by` not empty, both at most
/// [`MAX_TEXT_BYTES`].
///
/// # Errors
/// [`Error::InvalidInput`], saying which and by how much.
pub fn check_by_why(by: &str, why: &str) -> Result<()> {
    if by.trim().is_empty() {
        return Err(Error::InvalidInput {
            reason: "the actor (who asks, `by`) is empty: say who asks, as the record keeps \
                     it (nothing was written)"
                .to_owned(),
        });
    }
    too_long("the actor (`by`)", by)?;
    too_long("the reason (`why`)", why)
}

impl ControlRequest {
    /// Checks the request as every store does before writing it: the job (and the
    /// node) by the rules of names, the actor not empty, the actor and the reason at
    /// most [`MAX_TEXT_BYTES`] each.
    ///
    /// # Errors
    /// [`Error::InvalidName`] for the job or the node, [`Error::InvalidInput`] for
    /// the actor or the reason.
    pub fn check(&self) -> Result<()> {
        crate::lease::validate_name(&self.job)?;
        if let Some(node) = &self.node {
            crate::lease::validate_name(node)?;
        }
        check_by_why(&self.by, &self.why)
    }
}

impl ScheduleRow {
    /// [`check`](Self::check) with `min_period` for the shortest `every` period
    /// accepted, as a store checks a row before it writes it (with its own minimum,
    /// [`DEFAULT_MIN_SCHEDULE_PERIOD`] unless the app lowered it).
    ///
    /// Beyond what [`parse`](Self::parse) finds wrong, refuses a time zone with an
    /// `every` schedule (its ticks are instants, whatever the zone) and a period
    /// shorter than `min_period`. Rows already stored are read as they are: these
    /// limits apply when a row is put.
    ///
    /// # Errors
    /// What [`parse`](Self::parse) finds wrong, or [`Error::InvalidInput`].
    pub fn check_with_min_period(&self, min_period: Duration) -> Result<Schedule> {
        let schedule = self.parse()?.schedule;
        let Some(every) = self.schedule.trim().strip_prefix("every ") else {
            return Ok(schedule);
        };
        let every = every.trim();
        if let Some(zone) = &self.zone {
            return Err(Error::InvalidInput {
                reason: format!(
                    "schedule {:?}: a time zone ({zone}) applies to cron expressions only: an \
                     `every` schedule ticks at instants, whatever the zone; leave the zone out, \
                     or write a cron expression",
                    self.name
                ),
            });
        }
        let period =
            crate::schedule::parse_duration(every).map_err(|cause| Error::InvalidSchedule {
                job: self.name.clone(),
                cause,
            })?;
        if period < min_period {
            return Err(Error::InvalidInput {
                reason: format!(
                    "schedule {:?}: every {every} is more often than this store accepts (at \
                     least every {min_period:?}): a typo of a longer period? The app may lower \
                     the minimum (the store's min_schedule_period option; the CLI's \
                     --min-period)",
                    self.name
                ),
            });
        }
        Ok(schedule)
    }
}

/// What a trigger asked by `req` records, given `paused`, the pauses in force (of
/// every job, or of `req.job` only), read where the store writes the trigger:
/// [`ControlAction::Trigger`] when the job is not paused (everywhere, or on
/// `req.node`), [`ControlAction::TriggerWhilePaused`] when it is and the request says
/// so ([`ControlRequest::while_paused`]).
///
/// # Errors
/// [`Error::TriggerWhilePaused`] when it is paused and the request does not say so.
pub fn trigger_action(req: &ControlRequest, paused: &[Pause]) -> Result<ControlAction> {
    let applies = |p: &&Pause| {
        p.job == req.job && (p.node.is_none() || (req.node.is_some() && p.node == req.node))
    };
    // The pause everywhere first: it is the one a resume of the job ends.
    let Some(pause) = paused
        .iter()
        .filter(applies)
        .min_by_key(|p| p.node.is_some())
    else {
        return Ok(ControlAction::Trigger);
    };
    if req.while_paused {
        return Ok(ControlAction::TriggerWhilePaused);
    }
    Err(Error::TriggerWhilePaused {
        job: req.job.clone(),
        node: pause.node.clone(),
        by: pause.by.clone(),
        why: pause.why.clone(),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn sizes_are_said_with_their_thousands() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1024), "1,024");
        assert_eq!(thousands(1_900_000), "1,900,000");
    }

    #[test]
    fn a_request_keeps_the_text_limits() {
        let long = "x".repeat(1_900_000);
        let err = ControlRequest::new("sweep", "alice")
            .why(long.as_str())
            .check()
            .unwrap_err();
        assert!(matches!(err, Error::InvalidInput { .. }), "{err}");
        assert_eq!(
            err.to_string(),
            "the reason (`why`) is 1,900,000 bytes; at most 1,024 are kept: shorten it \
             (nothing was written)"
        );
        let by = "b".repeat(MAX_TEXT_BYTES + 1);
        let err = ControlRequest::new("sweep", by).check().unwrap_err();
        assert!(
            err.to_string().contains("actor (`by`) is 1,025 bytes"),
            "{err}"
        );
        let err = ControlRequest::new("sweep", " ").check().unwrap_err();
        assert!(matches!(err, Error::InvalidInput { .. }), "{err}");
        let err = ControlRequest::new("", "alice").check().unwrap_err();
        assert!(matches!(err, Error::InvalidName { .. }), "{err}");
        let at_most = "x".repeat(MAX_TEXT_BYTES);
        assert!(
            ControlRequest::new("sweep", at_most.as_str())
                .why(at_most.as_str())
                .check()
                .is_ok()
        );
    }

    #[test]
    fn every_schedules_keep_the_minimum_and_no_zone() {
        let one_ms = ScheduleRow::new("r", "h", "every 1ms");
        let err = one_ms.check().unwrap_err();
        assert!(matches!(err, Error::InvalidInput { .. }), "{err}");
        assert!(err.to_string().contains("at least every 1s"), "{err}");
        assert!(
            one_ms
                .check_with_min_period(Duration::from_millis(1))
                .is_ok()
        );
        assert!(ScheduleRow::new("r", "h", "every 1s").check().is_ok());
        let mut zoned = ScheduleRow::new("r", "h", "every 1h");
        zoned.zone = Some("Europe/Berlin".into());
        let err = zoned.check().unwrap_err();
        assert!(
            err.to_string().contains("time zone (Europe/Berlin)"),
            "{err}"
        );
        zoned.schedule = "0 0 3 * * *".into();
        assert!(zoned.check().is_ok());
    }

    fn pause(node: Option<&str>) -> Pause {
        Pause {
            job: "sweep".into(),
            node: node.map(str::to_owned),
            since: chrono::DateTime::UNIX_EPOCH,
            by: "alice".into(),
            why: "maintenance".into(),
        }
    }

    #[test]
    fn a_trigger_of_a_paused_job_is_said_as_such() {
        let req = ControlRequest::new("sweep", "bob");
        assert_eq!(trigger_action(&req, &[]).unwrap(), ControlAction::Trigger);
        let err = trigger_action(&req, &[pause(None)]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "\"sweep\" is paused (by alice: maintenance); triggering it runs it while paused: \
             say so explicitly (ControlRequest::while_paused, the CLI's --while-paused) or \
             resume it first"
        );
        // A pause on another node, or of another job, does not apply.
        let on_a = [pause(Some("node-a"))];
        assert_eq!(trigger_action(&req, &on_a).unwrap(), ControlAction::Trigger);
        let on_b = req.clone().node("node-b");
        assert_eq!(
            trigger_action(&on_b, &on_a).unwrap(),
            ControlAction::Trigger
        );
        let on_a_req = req.clone().node("node-a");
        let err = trigger_action(&on_a_req, &on_a).unwrap_err();
        assert!(
            err.to_string().contains("paused on node-a (by alice"),
            "{err}"
        );
        assert_eq!(
            trigger_action(&on_a_req.while_paused(true), &on_a).unwrap(),
            ControlAction::TriggerWhilePaused
        );
        assert_eq!(
            trigger_action(&req.while_paused(true), &[]).unwrap(),
            ControlAction::Trigger
        );
    }
}
