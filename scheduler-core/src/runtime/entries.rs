//! A job laid out over its entries: one, or one per lease slot of a job running
//! concurrent ticks ([`entries_for`]).

use super::*;

/// The bytes a catch-up's lease adds to the job's: `\@` and a tick in Unix
/// microseconds (at most 19 digits).
const CATCH_UP_SUFFIX: usize = 2 + 19;

/// The entries of `job` with `policy` on node `node`: one, or one per lease slot of
/// a job running concurrent ticks. What [`SchedulerBuilder::build`] does for each
/// job, and the engine for each dynamic schedule it picks up.
pub(crate) fn entries_for(
    job: Arc<dyn Idempotent>,
    policy: Policy,
    node: &str,
    holder_prefix: &Arc<str>,
    now: chrono::DateTime<chrono::Utc>,
    crons: &mut crate::schedule::CronCache,
) -> Result<Vec<Entry>> {
    let name = job.name().to_owned();
    validate_name(&name)?;
    let mut entries = Vec::new();
    let schedule_spec = job.schedule();
    let schedule = schedule_spec
        .compile_with(crons)
        .map_err(|source| Error::InvalidSchedule {
            job: name.clone(),
            cause: source,
        })?;
    let timing = Timing {
        period: None,
        jitter: job.jitter(),
        window: job.catch_up(),
        ..policy.timing()
    };
    // The period matters only to a jitter or a retry's backoff: measuring a cron
    // expression's gaps (a walk of 64 ticks) was most of a dynamic schedule's
    // start-up otherwise.
    let timing = Timing {
        period: if timing.jitter.is_zero() && timing.retry.is_none() {
            None
        } else {
            schedule.shortest_gap(now)
        },
        ..timing
    };
    check_timing(&timing).map_err(|cause| Error::InvalidTiming {
        job: name.clone(),
        cause,
    })?;
    let scope = job.scope();
    let lease = LeaseName::for_job(&name, scope, node)?;
    let name: Arc<str> = name.into();
    // Concurrent runs: one entry per lease slot, each with its share of the
    // ticks, skipping a tick whose slot still runs the one `max` before it.
    let slots = match policy.overlap {
        Overlap::Concurrent { max: 0 } => {
            return Err(Error::InvalidTiming {
                job: name.to_string(),
                cause: scheduler_spec::TimingError::ZeroConcurrency,
            });
        }
        Overlap::Concurrent { max } => max,
        _ => 1,
    };
    // A tick's slot must be a function of the tick alone, the same on every
    // instance whenever it was built: the gap is measured from a fixed
    // instant, not from now (a cron schedule's gaps vary, with DST say).
    // Only a job with several slots needs it (a calendar walk: 100,000 dynamic
    // schedules spent most of their start-up here).
    let gap_ms = if slots > 1 {
        schedule
            .shortest_gap(crate::schedule::SLOT_ANCHOR)
            .and_then(|gap| i64::try_from(gap.as_millis()).ok())
            .unwrap_or(1000)
    } else {
        1000
    };
    let policy_whole = policy;
    for slot in 0..slots {
        let (lease, cadence_schedule, policy) = if slots == 1 {
            (lease.clone(), schedule.clone(), policy)
        } else {
            let lease = if slot == 0 {
                lease.clone()
            } else {
                LeaseName::new(format!("{lease}\\#{slot}"))?
            };
            let policy = policy.overlap(Overlap::Skip);
            (lease, schedule.slot(slots, slot, gap_ms), policy)
        };
        // A resume's catch-up under `CatchUp::All` runs each tick under a lease
        // of its own, `{lease}\@{micros}`: a name with no room for that suffix
        // could never be caught up.
        if matches!(policy_whole.catch_up, crate::policy::CatchUp::All { .. })
            && lease.as_str().len() + CATCH_UP_SUFFIX > LeaseName::MAX_LEN
        {
            return Err(Error::InvalidName {
                name: name.chars().take(60).collect(),
                reason: "under catch_up = all, a job's lease name must leave 21 bytes of the \
                         200 for its catch-ups' leases (`\\@` and the tick in microseconds): \
                         shorten the job's name (or its node's, for a node-scoped job)",
            });
        }
        entries.push(Entry {
            lease,
            slot,
            job_policy: policy_whole,
            name: Arc::clone(&name),
            schedule: schedule.clone(),
            cadence: Cadence {
                schedule: cadence_schedule,
                catch_up: job.catch_up(),
                jitter: job.jitter(),
                holder_prefix: Arc::clone(holder_prefix),
                policy,
                fenced: job.duplicate() == Duplicate::NeedsFencing,
            },
            schedule_text: schedule_spec.to_string(),
            scope,
            duplicate: job.duplicate(),
            job: Arc::clone(&job),
        });
    }
    Ok(entries)
}
