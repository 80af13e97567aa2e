//! What happened to a tick: one vocabulary for the counters ([`Stats`]), the
//! metrics, the run history ([`RunRecord`]), triggers ([`TriggerState::Done`]), the
//! dashboard and the command line.
//!
//! An [`Outcome`] is stored and exported as its [word](Outcome::as_str)
//! (`succeeded`, `failed`, `timed_out`, …) and parsed back with [`FromStr`]. Callers
//! decide by its group, not by its word: [`ran`](Outcome::ran),
//! [`is_success`](Outcome::is_success), [`is_failure`](Outcome::is_failure).
//!
//! A store may hold a word this version does not know: one written by a newer
//! version of the scheduler during a rolling upgrade. Parsing it fails
//! ([`ParseOutcomeError`], naming the word); a store reading its rows maps it with
//! [`Outcome::from_stored`] to [`Outcome::Unknown`] instead of failing the read, so
//! an older dashboard or command line keeps showing the history around it.
//!
//! [`Stats`]: crate::Stats
//! [`RunRecord`]: crate::RunRecord
//! [`TriggerState::Done`]: crate::TriggerState::Done

use std::fmt;
use std::str::FromStr;

/// What happened to one tick attempt of a job: how its run ended, or why it did not
/// run.
///
/// Counted by [`Stats`](crate::Stats) and the metric
/// [`scheduler.tick.outcomes`](crate::metric_names::TICK_OUTCOMES) (attribute
/// `outcome`), recorded in the run history ([`RunRecord`](crate::RunRecord)) and on
/// a finished trigger ([`TriggerState::Done`](crate::TriggerState::Done)). The run
/// history and triggers hold only outcomes of runs (`succeeded`, `failed`,
/// `cancelled`, `retried`, `timed_out`, `cancelled_by_newer`) and, for a trigger,
/// `skipped`; the counters hold the rest too.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Outcome {
    /// The run returned `Ok`. The tick ran. (The counters called it `ran` before they
    /// shared this type with the run history: [`Outcome::Ran`] still names it.)
    Succeeded,
    /// The run returned an error or panicked. The tick ran. The counters also count
    /// a [cancelled](Outcome::Cancelled) run here.
    Failed,
    /// The run was cancelled: shutdown past its grace period, or a lost lease of a
    /// job that needs fencing. The tick ran, cut short, and may be retried. Only the
    /// run history and triggers record it; the counters count it
    /// [`Failed`](Outcome::Failed).
    Cancelled,
    /// The run failed (or timed out) and the tick is tried again under the same
    /// lease (the job's retry policy). The tick ran; its last attempt says how it
    /// ended.
    Retried,
    /// The run took longer than its timeout and was cancelled. The tick ran.
    TimedOut,
    /// A newer tick cancelled the run (overlap policy
    /// [`Overlap::CancelRunning`](crate::Overlap::CancelRunning)). The tick ran, cut
    /// short, and counts as done.
    CancelledByNewer,
    /// The lease was lost while the run was under way (counted in addition to how
    /// the run then ended). The tick ran, and may have run twice.
    LeaseLost,
    /// A tick of a backfill ran to success
    /// ([`Scheduler::backfill`](crate::Scheduler::backfill)). The tick ran.
    Backfilled,
    /// Another instance held the lease (it ran the tick, or still runs the previous
    /// one). The tick did not run here.
    HeldElsewhere,
    /// This instance still ran the previous tick: the new one was skipped (overlap
    /// policy). The tick did not run.
    SkippedOverlap,
    /// A trigger the job's overlap policy refused, a run being under way
    /// ([`Controls::finish_trigger`](crate::Controls::finish_trigger)). The
    /// triggered run did not run.
    Skipped,
    /// The tick could not be attempted within its catch-up window (database down,
    /// process paused) and was superseded. The tick did not run.
    Missed,
    /// The tick could not start and a later one was run in its place (catch-up
    /// policy [`CatchUp::Latest`](crate::CatchUp::Latest)). The tick did not run.
    Coalesced,
    /// The job was paused by an operator
    /// ([`Controls::pause`](crate::Controls::pause)): the tick did not run, and is
    /// not missed.
    Paused,
    /// A word the store holds that this version does not know, written by a newer
    /// version ([`Outcome::from_stored`]). Never produced by the runtime, never
    /// written. Whether the tick ran is not known: neither a success nor a failure.
    Unknown,
}

impl Outcome {
    /// Every outcome this version knows, in declaration order.
    pub const ALL: &'static [Outcome] = &[
        Outcome::Succeeded,
        Outcome::Failed,
        Outcome::Cancelled,
        Outcome::Retried,
        Outcome::TimedOut,
        Outcome::CancelledByNewer,
        Outcome::LeaseLost,
        Outcome::Backfilled,
        Outcome::HeldElsewhere,
        Outcome::SkippedOverlap,
        Outcome::Skipped,
        Outcome::Missed,
        Outcome::Coalesced,
        Outcome::Paused,
        Outcome::Unknown,
    ];

    /// The name the counters used for [`Outcome::Succeeded`] before it was one
    /// outcome with the run history's.
    #[deprecated(note = "one outcome for a run that returned `Ok`: use `Outcome::Succeeded`")]
    #[allow(non_upper_case_globals)]
    pub const Ran: Outcome = Outcome::Succeeded;

    /// The outcome's word, as stored, logged and exported (`succeeded`, `failed`,
    /// `held_elsewhere`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Succeeded => "succeeded",
            Outcome::Failed => "failed",
            Outcome::Cancelled => "cancelled",
            Outcome::Retried => "retried",
            Outcome::TimedOut => "timed_out",
            Outcome::CancelledByNewer => "cancelled_by_newer",
            Outcome::LeaseLost => "lease_lost",
            Outcome::Backfilled => "backfilled",
            Outcome::HeldElsewhere => "held_elsewhere",
            Outcome::SkippedOverlap => "skipped_overlap",
            Outcome::Skipped => "skipped",
            Outcome::Missed => "missed",
            Outcome::Coalesced => "coalesced",
            Outcome::Paused => "paused",
            Outcome::Unknown => "unknown",
        }
    }

    /// Whether the job's code ran for the tick, on this instance (even if cut short):
    /// `false` for a tick held elsewhere, skipped, missed, coalesced or paused, and
    /// for [`Unknown`](Outcome::Unknown).
    pub fn ran(self) -> bool {
        match self {
            Outcome::Succeeded
            | Outcome::Failed
            | Outcome::Cancelled
            | Outcome::Retried
            | Outcome::TimedOut
            | Outcome::CancelledByNewer
            | Outcome::LeaseLost
            | Outcome::Backfilled => true,
            Outcome::HeldElsewhere
            | Outcome::SkippedOverlap
            | Outcome::Skipped
            | Outcome::Missed
            | Outcome::Coalesced
            | Outcome::Paused
            | Outcome::Unknown => false,
        }
    }

    /// Whether the run did its work: [`Succeeded`](Outcome::Succeeded),
    /// [`Backfilled`](Outcome::Backfilled).
    pub fn is_success(self) -> bool {
        matches!(self, Outcome::Succeeded | Outcome::Backfilled)
    }

    /// Whether the run ended badly and the tick's work may not be done:
    /// [`Failed`](Outcome::Failed), [`Cancelled`](Outcome::Cancelled),
    /// [`TimedOut`](Outcome::TimedOut), [`LeaseLost`](Outcome::LeaseLost). An
    /// attempt [retried](Outcome::Retried), a run
    /// [cancelled by a newer tick](Outcome::CancelledByNewer), a tick that did not
    /// run and an [unknown](Outcome::Unknown) word are neither a success nor a
    /// failure.
    pub fn is_failure(self) -> bool {
        matches!(
            self,
            Outcome::Failed | Outcome::Cancelled | Outcome::TimedOut | Outcome::LeaseLost
        )
    }

    /// The outcome a store read back: `word` parsed, or [`Outcome::Unknown`] when
    /// this version does not know it (a newer version wrote it), logged as a
    /// warning naming the word. A store never fails a read over an outcome.
    pub fn from_stored(word: &str) -> Outcome {
        word.parse().unwrap_or_else(|err: ParseOutcomeError| {
            tracing::warn!(outcome = err.word(), "{err}; shown as `unknown`");
            Outcome::Unknown
        })
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Parses an outcome's [word](Outcome::as_str). `ran`, the counters' former word for
/// [`Succeeded`](Outcome::Succeeded), is read as `succeeded`.
impl FromStr for Outcome {
    type Err = ParseOutcomeError;

    fn from_str(word: &str) -> Result<Self, Self::Err> {
        if word == "ran" {
            return Ok(Outcome::Succeeded);
        }
        Outcome::ALL
            .iter()
            .copied()
            .find(|o| o.as_str() == word)
            .ok_or_else(|| ParseOutcomeError {
                word: word.to_owned(),
            })
    }
}

/// How a run ended, as the run history records it: the one [`Outcome`] since the
/// counters and the run history share it.
#[deprecated(note = "one outcome type for the counters and the run history: use `Outcome`")]
pub type RunOutcome = Outcome;

/// A word that names no [`Outcome`] this version knows.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown outcome {word:?}: expected one of succeeded, failed, cancelled, retried, timed_out, \
     cancelled_by_newer, lease_lost, backfilled, held_elsewhere, skipped_overlap, skipped, \
     missed, coalesced, paused (a newer version of the scheduler may have written it)"
)]
pub struct ParseOutcomeError {
    word: String,
}

impl ParseOutcomeError {
    /// The word that was not understood.
    pub fn word(&self) -> &str {
        &self.word
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::collections::HashSet;

    use super::*;

    #[test]
    fn every_outcome_reads_back_from_its_word() {
        for &outcome in Outcome::ALL {
            assert_eq!(outcome.as_str().parse::<Outcome>(), Ok(outcome));
            assert_eq!(outcome.to_string(), outcome.as_str());
            assert_eq!(Outcome::from_stored(outcome.as_str()), outcome);
        }
        let words: HashSet<_> = Outcome::ALL.iter().map(|o| o.as_str()).collect();
        assert_eq!(words.len(), Outcome::ALL.len(), "two outcomes share a word");
    }

    #[test]
    fn all_lists_every_outcome_at_its_index() {
        for (i, &outcome) in Outcome::ALL.iter().enumerate() {
            assert_eq!(outcome as usize, i, "{outcome}");
        }
    }

    /// What the stores held before there was one outcome type: the run history's
    /// and the triggers' words read back as they were written.
    #[test]
    fn the_words_stores_hold_are_unchanged() {
        let stored = [
            ("succeeded", Outcome::Succeeded),
            ("failed", Outcome::Failed),
            ("cancelled", Outcome::Cancelled),
            ("retried", Outcome::Retried),
            ("timed_out", Outcome::TimedOut),
            ("cancelled_by_newer", Outcome::CancelledByNewer),
            ("skipped", Outcome::Skipped),
        ];
        for (word, outcome) in stored {
            assert_eq!(outcome.as_str(), word);
            assert_eq!(word.parse(), Ok(outcome));
        }
    }

    #[test]
    #[allow(deprecated)]
    fn ran_is_succeeded() {
        assert_eq!(Outcome::Ran, Outcome::Succeeded);
        assert_eq!("ran".parse(), Ok(Outcome::Succeeded));
        assert!(matches!(Outcome::Succeeded, Outcome::Ran));
        assert_eq!(Outcome::Ran.as_str(), "succeeded");
    }

    /// Outside code written against the run history's former type still compiles.
    #[test]
    #[allow(deprecated)]
    fn run_outcome_is_outcome() {
        let outcome: crate::RunOutcome = crate::RunOutcome::TimedOut;
        assert!(matches!(outcome, crate::RunOutcome::TimedOut));
        assert_eq!(outcome, Outcome::TimedOut);
    }

    #[test]
    fn an_unknown_word_is_an_error_naming_it_and_reads_as_unknown() {
        for word in ["exploded", "", "Succeeded", " succeeded"] {
            let err = word.parse::<Outcome>().unwrap_err();
            assert_eq!(err.word(), word);
            assert!(
                err.to_string()
                    .starts_with(&format!("unknown outcome {word:?}: expected one of")),
                "{err}"
            );
            assert_eq!(Outcome::from_stored(word), Outcome::Unknown);
        }
    }

    #[test]
    fn the_error_lists_every_word_a_store_may_hold() {
        let err = "?".parse::<Outcome>().unwrap_err().to_string();
        for &outcome in Outcome::ALL {
            if outcome != Outcome::Unknown {
                assert!(err.contains(outcome.as_str()), "{outcome} missing: {err}");
            }
        }
    }

    #[test]
    fn groups() {
        let success: Vec<_> = Outcome::ALL.iter().filter(|o| o.is_success()).collect();
        assert_eq!(success, [&Outcome::Succeeded, &Outcome::Backfilled]);
        for &outcome in Outcome::ALL {
            assert!(!(outcome.is_success() && outcome.is_failure()), "{outcome}");
            // Whatever succeeded or failed ran.
            if outcome.is_success() || outcome.is_failure() {
                assert!(outcome.ran(), "{outcome}");
            }
        }
        for outcome in [Outcome::Skipped, Outcome::Paused, Outcome::Unknown] {
            assert!(!outcome.ran() && !outcome.is_success() && !outcome.is_failure());
        }
        assert!(Outcome::Retried.ran() && !Outcome::Retried.is_failure());
        assert!(Outcome::Cancelled.is_failure());
    }
}
