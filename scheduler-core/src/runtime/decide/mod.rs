//! The decision core: every decision the runtime makes about ticks, runs and
//! leases, with no tokio, no clock and no I/O. The driver (`engine/`, and the
//! backfill's loop) sleeps, calls the store, spawns runs and feeds each answer and
//! each instant (the store's time, as it estimates it) back here; what to do comes
//! back as values: a tick to take and the holder to ask as, [`Command`]s (release a
//! holder, ask an older run to stop, cancel a run), a retry's wait, a run's
//! [`RunEnd`] (its outcome and what becomes of its lease), and [`TickEvent`]s to log
//! and count.
//!
//! - `cadence` — when a job's ticks fall, their windows, how soon to ask again.
//! - `ticks` — one job's ticks as a state machine ([`JobTicks`]): due ticks under the
//!   catch-up and overlap policies, answers to takes, pauses, resumes, triggers,
//!   retries.
//! - `runs` — how a run's attempt ends: retried, or ended with an outcome, and what
//!   becomes of its lease ([`run_end`]).
//! - `backfill` — a backfill's plan ([`BackfillPlan`]): which ticks of the range to
//!   ask for next, what each answer means, when the range is done.
//! - `controls` — operators' controls: what a resume catches up and how
//!   ([`on_resume`]), what a trigger the job's lease refused waits for
//!   ([`on_trigger_refused`]), what a dynamic schedule's row does
//!   ([`on_schedule_row`]).
//! - `events` — [`TickEvent`] and [`Command`].

mod backfill;
mod cadence;
mod controls;
mod events;
mod runs;
mod ticks;

pub use backfill::BackfillReport;
pub(crate) use backfill::{Answer, BackfillPlan};
pub(crate) use cadence::{Cadence, Polling};
pub(crate) use controls::{
    ResumeAction, ResumedJob, RowAction, TriggerRefused, claimed_elsewhere, on_resume,
    on_schedule_row, on_trigger_refused,
};
pub(crate) use events::{Command, TickEvent, Won};
pub(crate) use runs::{Ended, Handover, RunEnd, Running, retry_wait, run_end};
pub(crate) use ticks::{AttemptEnd, JobTicks};
