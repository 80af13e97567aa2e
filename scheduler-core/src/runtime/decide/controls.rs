//! Operators' controls as decisions: what a resume catches up and how, whether a
//! claimed trigger may still be another instance's, and what a trigger the job's
//! lease refused waits for (the job's overlap policy).

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};

use crate::control::{Resume, ScheduleRow, TriggerState};
use crate::job::Scope;
use crate::policy::{CatchUp, Overlap};

/// How long a pending trigger of a job whose overlap policy skips must keep finding
/// the job's lease held before it is recorded skipped. A run that just ended holds
/// its lease until its release goes out (within the release linger, 100 ms, on
/// whichever instance ran it): a trigger made in that moment found nothing running.
pub(crate) const SKIP_CONFIRM: Duration = Duration::from_secs(1);

/// What this instance knows of a resumed job.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ResumedJob {
    /// The job's catch-up policy (as registered: not a slot's).
    pub(crate) catch_up: CatchUp,
    pub(crate) scope: Scope,
    /// How many lease slots the job has (concurrent ticks).
    pub(crate) slots: u32,
    /// When the scheduler started (store clock).
    pub(crate) started: Option<DateTime<Utc>>,
    /// Under [`CatchUp::All`], since when start-up caught ticks up: slot 0's
    /// [`catch_up_from`](super::JobTicks::catch_up_from).
    pub(crate) all_caught_up_from: Option<DateTime<Utc>>,
    /// When a dynamic schedule's row running here last changed (`None`: a job
    /// registered in code).
    pub(crate) changed: Option<DateTime<Utc>>,
}

/// What a resume means on this instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ResumeAction {
    /// Nothing to catch up here.
    Nothing,
    /// Each entry's ticks paused over are caught up as its catch-up policy says
    /// ([`JobTicks::on_resumed`](super::JobTicks::on_resumed)).
    PerEntry,
    /// Every tick paused over, the most recent `keep`, runs like a backfill, each
    /// under a lease of its own ([`CatchUp::All`]): a later tick that ran meanwhile
    /// does not shut them out.
    Backfill { keep: u32 },
}

/// What `resume`, read by this instance (`node`) in a poll, means for `job`.
/// `first`: the poll read every control from scratch (every resume ever made);
/// `initial`: it is the first poll applied since start-up. A first read after that
/// (the store's version went back) catches nothing up; the initial one catches up
/// only what start-up left to it (a resume after start-up's catch-up began).
/// A dynamic schedule's row changed after the resume catches nothing up: its new
/// entries start with no tick from before their change ([`RowAction::Start`]), and
/// the old ones met the resume (an instance that read it first ran the catch-up as
/// the old row said; running it again as the new row says would run ticks twice).
pub(crate) fn on_resume(
    resume: &Resume,
    job: ResumedJob,
    node: &str,
    first: bool,
    initial: bool,
) -> ResumeAction {
    if !resume.catch_up
        || resume.node.as_deref().is_some_and(|n| n != node)
        || job
            .changed
            .is_some_and(|changed| changed > resume.resumed_at)
    {
        return ResumeAction::Nothing;
    }
    let caught_up_from = match job.catch_up {
        CatchUp::All { .. } => job.all_caught_up_from,
        _ => job.started,
    };
    if first && (!initial || caught_up_from.is_none_or(|at| resume.resumed_at < at)) {
        return ResumeAction::Nothing;
    }
    match job.catch_up {
        // A pause on one node kept only this node from taking a cluster job: the
        // rest of the cluster ran its ticks meanwhile, and a backfill's leases of
        // their own would run them again.
        CatchUp::All { .. } if resume.node.is_some() && job.scope == Scope::Cluster => {
            ResumeAction::Nothing
        }
        // Each slot's share of the ticks: start-up keeps `max` of each.
        CatchUp::All { max } => ResumeAction::Backfill {
            keep: max.saturating_mul(job.slots),
        },
        _ => ResumeAction::PerEntry,
    }
}

/// Whether a trigger in `state` was claimed by an instance whose lease (`ttl`)
/// cannot have expired by `now`: it is that instance's.
pub(crate) fn claimed_elsewhere(state: &TriggerState, now: DateTime<Utc>, ttl: Duration) -> bool {
    let TriggerState::Running { started_at, .. } = state else {
        return false;
    };
    started_at
        .checked_add_signed(TimeDelta::from_std(ttl).unwrap_or(TimeDelta::MAX))
        .is_none_or(|expires| now < expires)
}

/// What a trigger waits for when the job's lease refused its claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TriggerRefused {
    /// Asked again at the next poll (or, under [`Overlap::Skip`], at the latest
    /// `after` from now, when it would be skipped).
    Wait { after: Option<Duration> },
    /// Recorded skipped: the job ran all along ([`Overlap::Skip`]).
    Skip,
    /// The run holding the lease is asked to stop, for the trigger's instant (a
    /// scheduled run here is cancelled; it completes its tick however it ends), and
    /// the trigger is claimed once the lease is free ([`Overlap::CancelRunning`]).
    CancelRunning,
}

/// What a trigger whose claim the job's lease refused does, for a job whose
/// overlap policy is `overlap`: `pending`, it was never claimed (a claimed trigger
/// waits for its claimant); `any_node`, it names no node of a node-scoped job (one
/// node's busy lease does not decide it); `refused_for`, how long it has been
/// refused.
pub(crate) fn on_trigger_refused(
    overlap: Overlap,
    pending: bool,
    any_node: bool,
    refused_for: Duration,
) -> TriggerRefused {
    if !pending || any_node {
        return TriggerRefused::Wait { after: None };
    }
    match overlap {
        Overlap::Skip if refused_for < SKIP_CONFIRM => TriggerRefused::Wait {
            after: Some(SKIP_CONFIRM - refused_for),
        },
        Overlap::Skip => TriggerRefused::Skip,
        Overlap::CancelRunning => TriggerRefused::CancelRunning,
        // Buffered (or run beside, once a slot frees): asked again at the next poll.
        _ => TriggerRefused::Wait { after: None },
    }
}

/// What a dynamic schedule's row, as read, does to what runs here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RowAction {
    /// The version running here: nothing changes.
    Keep,
    /// What runs of it (if anything) stops; nothing starts (removed or disabled).
    Drop,
    /// What runs of it (if anything) stops, and the row's new entries start, with
    /// no tick from before the row's change caught up.
    Start,
}

/// What `row` does, when version `running` of it runs here (`None`: none).
pub(crate) fn on_schedule_row(running: Option<i64>, row: &ScheduleRow) -> RowAction {
    if row.removed || !row.enabled {
        RowAction::Drop
    } else if running == Some(row.version) {
        RowAction::Keep
    } else {
        RowAction::Start
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn at(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(s, 0).unwrap()
    }

    fn resume(node: Option<&str>, resumed_at: i64) -> Resume {
        Resume {
            job: "j".into(),
            node: node.map(Into::into),
            paused_since: at(100),
            resumed_at: at(resumed_at),
            catch_up: true,
            version: 1,
        }
    }

    fn job(catch_up: CatchUp, scope: Scope) -> ResumedJob {
        ResumedJob {
            catch_up,
            scope,
            slots: 2,
            started: Some(at(150)),
            all_caught_up_from: Some(at(150)),
            changed: None,
        }
    }

    #[test]
    fn a_resume_catches_up_as_the_policy_says_on_the_nodes_it_names() {
        let all = job(CatchUp::All { max: 3 }, Scope::Cluster);
        let r = resume(None, 200);
        assert_eq!(
            on_resume(&r, all, "a", false, false),
            ResumeAction::Backfill { keep: 6 }
        );
        let latest = job(CatchUp::Latest, Scope::Cluster);
        assert_eq!(
            on_resume(&r, latest, "a", false, false),
            ResumeAction::PerEntry
        );
        // Another node's resume, or one without catch-up: nothing here.
        assert_eq!(
            on_resume(&resume(Some("b"), 200), latest, "a", false, false),
            ResumeAction::Nothing
        );
        let mut plain = r.clone();
        plain.catch_up = false;
        assert_eq!(
            on_resume(&plain, all, "a", false, false),
            ResumeAction::Nothing
        );
        // A node's pause of a cluster job: the cluster ran the ticks meanwhile.
        assert_eq!(
            on_resume(&resume(Some("a"), 200), all, "a", false, false),
            ResumeAction::Nothing
        );
        let node = job(CatchUp::All { max: 3 }, Scope::Node);
        assert_eq!(
            on_resume(&resume(Some("a"), 200), node, "a", false, false),
            ResumeAction::Backfill { keep: 6 }
        );
    }

    #[test]
    fn the_first_read_catches_up_only_what_start_up_left_to_it() {
        let all = job(CatchUp::All { max: 3 }, Scope::Cluster);
        assert_eq!(
            on_resume(&resume(None, 140), all, "a", true, true),
            ResumeAction::Nothing
        );
        assert_eq!(
            on_resume(&resume(None, 160), all, "a", true, true),
            ResumeAction::Backfill { keep: 6 }
        );
        // Read from scratch again later (the store's version went back): nothing.
        assert_eq!(
            on_resume(&resume(None, 160), all, "a", true, false),
            ResumeAction::Nothing
        );
    }

    #[test]
    fn a_row_changed_after_the_resume_catches_nothing_up() {
        for catch_up in [CatchUp::All { max: 3 }, CatchUp::Latest] {
            let mut row = job(catch_up, Scope::Cluster);
            row.changed = Some(at(201));
            assert_eq!(
                on_resume(&resume(None, 200), row, "a", false, false),
                ResumeAction::Nothing
            );
            row.changed = Some(at(200));
            assert_ne!(
                on_resume(&resume(None, 200), row, "a", false, false),
                ResumeAction::Nothing
            );
        }
    }

    #[test]
    fn a_claimed_trigger_is_its_claimants_until_its_lease_could_expire() {
        let running = TriggerState::Running {
            holder: crate::lease::Holder::generate_on("n:1"),
            started_at: at(100),
        };
        let ttl = Duration::from_secs(10);
        assert!(claimed_elsewhere(&running, at(109), ttl));
        assert!(!claimed_elsewhere(&running, at(110), ttl));
        assert!(!claimed_elsewhere(&TriggerState::Pending, at(100), ttl));
    }

    #[test]
    fn a_row_starts_again_when_its_version_changes_and_stops_when_removed() {
        let mut row = ScheduleRow::new("s", "h", "every 1s");
        row.version = 3;
        assert_eq!(on_schedule_row(None, &row), RowAction::Start);
        assert_eq!(on_schedule_row(Some(3), &row), RowAction::Keep);
        assert_eq!(on_schedule_row(Some(2), &row), RowAction::Start);
        row.enabled = false;
        assert_eq!(on_schedule_row(Some(3), &row), RowAction::Drop);
        row.enabled = true;
        row.removed = true;
        assert_eq!(on_schedule_row(None, &row), RowAction::Drop);
    }

    #[test]
    fn a_refused_trigger_waits_as_the_overlap_policy_says() {
        let s = Duration::from_millis;
        assert_eq!(
            on_trigger_refused(Overlap::Skip, true, false, s(400)),
            TriggerRefused::Wait {
                after: Some(s(600))
            }
        );
        assert_eq!(
            on_trigger_refused(Overlap::Skip, true, false, s(1000)),
            TriggerRefused::Skip
        );
        assert_eq!(
            on_trigger_refused(Overlap::CancelRunning, true, false, s(0)),
            TriggerRefused::CancelRunning
        );
        assert_eq!(
            on_trigger_refused(Overlap::BufferOne, true, false, s(5000)),
            TriggerRefused::Wait { after: None }
        );
        // Claimed, or free to run on another node: it waits.
        for (pending, any_node) in [(false, false), (true, true)] {
            assert_eq!(
                on_trigger_refused(Overlap::Skip, pending, any_node, s(5000)),
                TriggerRefused::Wait { after: None }
            );
        }
    }
}
