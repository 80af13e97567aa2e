//! [`Frame`]: what the frame of every page shows besides the page itself — the
//! summary counts, the refresh the operator chose, the page's own address — read
//! once per `GET` by the dashboard's middleware and kept for the request's task,
//! where [`layout::page`](crate::layout::page) and the links find it. Pages need not
//! pass it along: every page, a refusal's included, gets the same frame.

use std::future::Future;

use serde::Deserialize;

tokio::task_local! {
    static FRAME: Frame;
}

/// The auto-refresh periods offered, in seconds (besides off).
pub(crate) const REFRESH_CHOICES: [u32; 3] = [5, 15, 60];

/// The frame of the page being answered.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Frame {
    /// Reload every this many seconds (`refresh=N` in the address).
    pub(crate) refresh: Option<u32>,
    /// The page's own address, relative, without its `refresh`
    /// (`./jobs?state=failing`): what the refresh choices link to.
    pub(crate) address: String,
    /// The counts of the header; `None` when the store could not say.
    pub(crate) summary: Option<Summary>,
}

/// The counts every page's header shows, each cheap to read however many jobs and
/// leases there are.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Summary {
    /// Jobs registered in code here, plus the dynamic schedules.
    pub(crate) jobs: u64,
    /// Jobs with a pause in force (anywhere).
    pub(crate) paused: u64,
    /// Leases held now: runs under way.
    pub(crate) running: u64,
    /// Jobs whose latest run did not succeed.
    pub(crate) failing: u64,
}

#[derive(Debug, Deserialize)]
struct RefreshQuery {
    #[serde(default)]
    refresh: Option<String>,
}

impl Frame {
    /// The frame of the request being answered (an empty one outside a request).
    pub(crate) fn current() -> Frame {
        FRAME.try_with(Clone::clone).unwrap_or_default()
    }

    /// Runs `page` with this frame as the current one.
    pub(crate) async fn scope<F: Future>(self, page: F) -> F::Output {
        FRAME.scope(self, page).await
    }
}

/// The refresh chosen in `query`: none, or one of [`REFRESH_CHOICES`].
pub(crate) fn refresh(query: Option<&str>) -> Result<Option<u32>, String> {
    let uri = format!("/?{}", query.unwrap_or_default());
    let parsed = uri
        .parse()
        .ok()
        .and_then(|uri| axum::extract::Query::<RefreshQuery>::try_from_uri(&uri).ok());
    let words = || {
        format!(
            "refresh is the seconds between reloads of the page: one of {}, or leave it out \
             to reload only when asked",
            REFRESH_CHOICES.map(|s| s.to_string()).join(", ")
        )
    };
    let Some(axum::extract::Query(RefreshQuery { refresh })) = parsed else {
        return Err(words());
    };
    match refresh.as_deref() {
        None | Some("" | "off") => Ok(None),
        Some(text) => match text.parse::<u32>() {
            Ok(seconds) if REFRESH_CHOICES.contains(&seconds) => Ok(Some(seconds)),
            _ => Err(words()),
        },
    }
}

/// The page at `path` (`/jobs`) with `query`, relative, its `refresh` left out.
pub(crate) fn address(path: &str, query: Option<&str>) -> String {
    let page = path.rsplit('/').next().unwrap_or_default();
    let page = if page.is_empty() { "jobs" } else { page };
    let kept: Vec<&str> = query
        .unwrap_or_default()
        .split('&')
        .filter(|pair| !pair.is_empty() && *pair != "refresh" && !pair.starts_with("refresh="))
        .collect();
    if kept.is_empty() {
        format!("./{page}")
    } else {
        format!("./{page}?{}", kept.join("&"))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn refresh_is_off_or_one_of_the_choices() {
        assert_eq!(refresh(None).unwrap(), None);
        assert_eq!(refresh(Some("state=late")).unwrap(), None);
        assert_eq!(refresh(Some("refresh=5&q=x")).unwrap(), Some(5));
        assert_eq!(refresh(Some("refresh=60")).unwrap(), Some(60));
        assert_eq!(refresh(Some("refresh=off")).unwrap(), None);
        for bad in [
            "refresh=7",
            "refresh=0",
            "refresh=abc",
            "refresh=-5",
            "refresh=1e9",
        ] {
            let words = refresh(Some(bad)).unwrap_err();
            assert!(words.contains("5, 15, 60"), "{bad}");
        }
    }

    #[test]
    fn the_address_keeps_all_but_the_refresh() {
        assert_eq!(address("/jobs", None), "./jobs");
        assert_eq!(address("/jobs", Some("refresh=5")), "./jobs");
        assert_eq!(
            address("/jobs", Some("state=late&refresh=5&q=a%26b")),
            "./jobs?state=late&q=a%26b"
        );
        assert_eq!(address("/job", Some("name=x")), "./job?name=x");
        assert_eq!(address("/", None), "./jobs");
    }
}
