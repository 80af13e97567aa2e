//! Links between the pages: all relative, all siblings in the one directory under
//! the nest prefix (`./jobs`, `./job?name=…`), so they work under any prefix. Names
//! travel in the query, never in the path, so a name like `..` or `a/b` cannot
//! change which page a link reaches.

use std::fmt::Write as _;

/// Where the prefix itself (`original_path`, as the request came in) redirects:
/// `jobs` next to it, relative to it.
pub(crate) fn home_to_jobs(original_path: &str) -> String {
    match original_path.rsplit_once('/') {
        // `/scheduler/` (nested at `/scheduler/`), `/` (merged at the root).
        Some((_, "")) | None => "./jobs".to_owned(),
        // `/scheduler`: the page is `/scheduler/jobs`, one level down.
        Some((_, last)) => format!("./{last}/jobs"),
    }
}

/// The jobs page.
pub(crate) const JOBS: &str = "./jobs";
/// The leases page.
pub(crate) const LEASES: &str = "./leases";
/// The failed runs.
pub(crate) const FAILURES: &str = "./failures";
/// The record of every control applied.
pub(crate) const AUDIT: &str = "./audit";
/// The instances running the scheduler.
pub(crate) const INSTANCES: &str = "./instances";
/// The form of a new dynamic schedule.
pub(crate) const NEW_SCHEDULE: &str = "./schedule";

/// The jobs page showing only the jobs in `state` (`failing`, `paused`, `late`,
/// `running`).
pub(crate) fn jobs_in_state(state: &str) -> String {
    format!("{JOBS}?state={}", encode(state))
}

/// A job's history, newest first.
pub(crate) fn job(name: &str) -> String {
    format!("./job?name={}", encode(name))
}

/// A page of a job's history: runs before `runs_before`, controls before
/// `controls_before`.
pub(crate) fn job_page(
    name: &str,
    runs_before: Option<i64>,
    controls_before: Option<i64>,
) -> String {
    let mut link = job(name);
    if let Some(id) = runs_before {
        let _ = write!(link, "&runs_before={id}");
    }
    if let Some(id) = controls_before {
        let _ = write!(link, "&controls_before={id}");
    }
    link
}

/// A triggered run.
pub(crate) fn trigger(id: i64) -> String {
    format!("./trigger?id={id}")
}

/// The form of dynamic schedule `name`.
pub(crate) fn schedule(name: &str) -> String {
    format!("./schedule?name={}", encode(name))
}

/// `href` with `refresh=N` added, when the operator chose a refresh: what keeps the
/// choice across the pages.
pub(crate) fn with_refresh(href: &str, refresh: Option<u32>) -> String {
    match refresh {
        Some(seconds) => {
            let sep = if href.contains('?') { '&' } else { '?' };
            format!("{href}{sep}refresh={seconds}")
        }
        None => href.to_owned(),
    }
}

/// `href` with the refresh of the page being answered kept ([`with_refresh`]).
pub(crate) fn kept(href: &str) -> String {
    with_refresh(href, crate::frame::Frame::current().refresh)
}

/// `text` percent-encoded for a query value: every byte but `A-Z a-z 0-9 - . _ ~`.
pub(crate) fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_prefix_redirects_to_its_jobs_page() {
        assert_eq!(home_to_jobs("/scheduler"), "./scheduler/jobs");
        assert_eq!(home_to_jobs("/ops/scheduler"), "./scheduler/jobs");
        assert_eq!(home_to_jobs("/scheduler/"), "./jobs");
        assert_eq!(home_to_jobs("/"), "./jobs");
        // A segment with a colon stays a path, not a scheme.
        assert_eq!(home_to_jobs("/ops:jobs"), "./ops:jobs/jobs");
    }

    #[test]
    fn names_are_encoded_into_the_query() {
        assert_eq!(job("sweep"), "./job?name=sweep");
        assert_eq!(job("a b&c=d/..#"), "./job?name=a%20b%26c%3Dd%2F..%23");
        assert_eq!(job("ü"), "./job?name=%C3%BC");
        assert_eq!(
            job_page("x", Some(7), Some(3)),
            "./job?name=x&runs_before=7&controls_before=3"
        );
    }

    #[test]
    fn a_refresh_is_added_to_any_link() {
        assert_eq!(with_refresh(JOBS, Some(5)), "./jobs?refresh=5");
        assert_eq!(
            with_refresh("./job?name=x", Some(60)),
            "./job?name=x&refresh=60"
        );
        assert_eq!(with_refresh(JOBS, None), "./jobs");
    }
}
