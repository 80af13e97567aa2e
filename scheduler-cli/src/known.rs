//! The jobs the store knows of: what `pause`, `resume` and `trigger` check a job's
//! name against, so that a typo is refused instead of stored for a job nobody runs.

use scheduler_core::Controls;

use crate::error::{Error, Result};

/// How many known names a refusal lists at most.
const LISTED: usize = 10;

/// Refuses `job` unless the store knows it ([`Controls::known_jobs`]: the jobs the
/// instances registered, the dynamic schedules, the jobs of the lease table's
/// leases); with `paused`, a job with a pause in force counts too (what `resume`
/// asks, so that a pause forced on a job nobody knows can be undone).
///
/// # Errors
/// [`Error::UnknownJob`], with the closest known name if one is near;
/// [`Error::CannotCheckJob`] if the store could not say.
pub async fn check_job(controls: &dyn Controls, job: &str, paused: bool) -> Result<()> {
    let cannot = |cause| Error::CannotCheckJob {
        job: job.to_owned(),
        cause,
    };
    let mut known = controls.known_jobs().await.map_err(cannot)?;
    if paused && !known.iter().any(|name| name == job) {
        let pauses = controls.paused().await.map_err(cannot)?;
        known.extend(pauses.into_iter().map(|pause| pause.job));
        known.sort();
        known.dedup();
    }
    if known.iter().any(|name| name == job) {
        return Ok(());
    }
    let closest = scheduler_spec::closest(known.iter().map(String::as_str), job).map(str::to_owned);
    Err(Error::UnknownJob {
        job: job.to_owned(),
        hint: hint(closest.as_deref(), &known),
    })
}

/// What follows the job's name in the refusal: a guess, or the names known; and
/// `--force`.
fn hint(closest: Option<&str>, known: &[String]) -> String {
    const FORCE: &str = "pass --force to act on it all the same";
    if let Some(closest) = closest {
        return format!(": did you mean {closest:?}? (or {FORCE})");
    }
    if known.is_empty() {
        return format!(
            " (none is known: no instance registered its jobs in this lease table, and no \
             lease or dynamic schedule names one; check --table): {FORCE}"
        );
    }
    let listed: Vec<&str> = known.iter().take(LISTED).map(String::as_str).collect();
    let more = match known.len() - listed.len() {
        0 => String::new(),
        more => format!(" and {more} more"),
    };
    format!(
        " (known: {}{more}): check the name, or {FORCE}",
        listed.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hint_guesses_or_lists_a_few() {
        let known = |n: usize| (0..n).map(|i| format!("job-{i:02}")).collect::<Vec<_>>();
        assert_eq!(
            hint(Some("sweep"), &known(3)),
            ": did you mean \"sweep\"? (or pass --force to act on it all the same)"
        );
        assert_eq!(
            hint(None, &known(2)),
            " (known: job-00, job-01): check the name, or pass --force to act on it all the same"
        );
        assert!(hint(None, &known(12)).contains(", job-09 and 2 more): "));
        assert!(hint(None, &[]).starts_with(" (none is known: "));
    }
}
