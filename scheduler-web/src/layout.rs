//! The frame of every page (title, navigation, the inline style sheet) and the small
//! pieces of markup the pages share.

use chrono::{DateTime, SecondsFormat, Utc};
use maud::{DOCTYPE, Markup, PreEscaped, html};
use scheduler_core::Outcome;

use crate::csrf;
use crate::frame::{Frame, REFRESH_CHOICES, Summary};
use crate::link;
use crate::words;

/// Which navigation entry is the current page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Nav {
    Jobs,
    Leases,
    Failures,
    Audit,
    Instances,
    None,
}

/// The navigation: every page, in order.
const NAV: [(Nav, &str, &str); 5] = [
    (Nav::Jobs, link::JOBS, "Jobs"),
    (Nav::Leases, link::LEASES, "Leases"),
    (Nav::Failures, link::FAILURES, "Failures"),
    (Nav::Audit, link::AUDIT, "Audit"),
    (Nav::Instances, link::INSTANCES, "Instances"),
];

const CSS: &str = "\
:root{color-scheme:light dark;--muted:#6b7280;--line:#d1d5db;--ok:#15803d;--bad:#b91c1c;--warn:#a16207}
body{font:14px/1.45 system-ui,-apple-system,'Segoe UI',sans-serif;margin:0}
header{display:flex;flex-wrap:wrap;gap:1.2em;align-items:baseline;padding:.5em 1.2em;border-bottom:1px solid var(--line)}
header strong{font-size:15px}
header a{text-decoration:none}header a.on{font-weight:600;text-decoration:underline}
header nav{display:flex;gap:1.2em}
.summary{display:flex;gap:1em;margin-left:auto}.summary a{text-decoration:none}.summary b{font-variant-numeric:tabular-nums}
.refresh{display:flex;gap:.5em}.refresh a.on{font-weight:600}
main{padding:.4em 1.2em 2em}
h1{font-size:20px;margin:.6em 0}h2{font-size:16px;margin:1.4em 0 .4em}
table{border-collapse:collapse;width:100%}
th,td{text-align:left;vertical-align:top;padding:.3em .6em;border-bottom:1px solid var(--line)}
th{font-weight:600;white-space:nowrap}
td.num{text-align:right;font-variant-numeric:tabular-nums}
code{font-size:12px}
.muted{color:var(--muted)}.small{font-size:12px}
.ok{color:var(--ok)}.bad{color:var(--bad)}.warn{color:var(--warn)}
.paused{color:var(--warn);font-weight:600}
.problem{border-left:4px solid var(--bad);padding:.4em .8em;white-space:pre-wrap}
.notice{border-left:4px solid var(--warn);padding:.4em .8em}
form.inline{display:inline-flex;gap:.3em;margin:0 .3em .2em 0}
form.inline input[type=text]{width:12em}
button{font:inherit;padding:.1em .6em;cursor:pointer}
dl{display:grid;grid-template-columns:max-content auto;gap:.2em 1em}dt{font-weight:600}dd{margin:0}
fieldset{border:1px solid var(--line);margin:.8em 0}
label{display:block;margin:.4em 0}label>span:first-child{display:inline-block;min-width:10em;vertical-align:top}
input[type=text],textarea,select{font:inherit}
label input[type=text]{width:24em}
textarea{width:24em;height:4em}
pre{white-space:pre-wrap;margin:0}
table.jobs td{padding:.15em .5em;line-height:1.3;white-space:nowrap}table.jobs td form.inline{margin:0 .2em 0 0}table.jobs button{padding:0 .4em}
.badge{font-size:11px;border:1px solid currentColor;border-radius:3px;padding:0 .3em;white-space:nowrap}
.clip{display:inline-block;max-width:16em;overflow:hidden;text-overflow:ellipsis;white-space:nowrap;vertical-align:bottom}
details summary{cursor:pointer}
form.filters{display:flex;flex-wrap:wrap;gap:.4em;align-items:center;margin:.4em 0}
form.filters input{width:12em}
.pager{display:flex;gap:.8em;align-items:baseline;margin:.3em 0}
svg.chart{max-width:100%;height:auto;border:1px solid var(--line)}
svg .ok{fill:var(--ok)}svg .bad{fill:var(--bad)}svg .warn{fill:var(--warn)}
svg text{font:11px system-ui,sans-serif;fill:currentColor}svg line{stroke:var(--line)}
";

/// A whole page, in the frame of the request being answered ([`Frame`]): the
/// navigation, the summary counts, and the refresh chosen.
pub(crate) fn page(title: &str, nav: Nav, body: Markup) -> Markup {
    refreshing_page(title, nav, body, None)
}

/// A whole page that reloads itself every `refresh` seconds, if given (or at the
/// operator's chosen refresh, when that is sooner).
pub(crate) fn refreshing_page(title: &str, nav: Nav, body: Markup, refresh: Option<u32>) -> Markup {
    let frame = Frame::current();
    let every = match (refresh, frame.refresh) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                @if let Some(seconds) = every { meta http-equiv="refresh" content=(seconds); }
                title { (title) " · scheduler" }
                style { (PreEscaped(CSS)) }
            }
            body {
                header {
                    strong { "scheduler" }
                    nav {
                        @for (entry, href, label) in NAV {
                            a href=(link::with_refresh(href, frame.refresh)) class=[(nav == entry).then_some("on")] { (label) }
                        }
                    }
                    @if let Some(summary) = frame.summary { (summary_bar(summary, frame.refresh)) }
                    @if !frame.address.is_empty() { (refresh_choice(&frame)) }
                }
                main {
                    h1 { (title) }
                    (body)
                }
            }
        }
    }
}

/// The counts, each a link to the jobs page filtered that way.
fn summary_bar(summary: Summary, refresh: Option<u32>) -> Markup {
    let counts = [
        (summary.jobs, "job", "jobs", link::JOBS.to_owned(), "jobs"),
        (
            summary.paused,
            "paused",
            "paused",
            link::jobs_in_state("paused"),
            "paused",
        ),
        (
            summary.running,
            "running",
            "running",
            link::jobs_in_state("running"),
            "running",
        ),
        (
            summary.failing,
            "failing",
            "failing",
            link::jobs_in_state("failing"),
            "failing",
        ),
    ];
    html! {
        span.summary data-summary {
            @for (n, one, many, href, key) in counts {
                a href=(link::with_refresh(&href, refresh)) data-count=(key)
                    class=[(key == "failing" && n > 0).then_some("bad")] {
                    b { (words::count(n)) } " " @if n == 1 { (one) } @else { (many) }
                }
            }
        }
    }
}

/// Off, or reload every 5, 15 or 60 s: links to this same page.
fn refresh_choice(frame: &Frame) -> Markup {
    html! {
        span.refresh.small data-refresh=(frame.refresh.unwrap_or(0)) {
            span.muted { "refresh" }
            a href=(frame.address) class=[frame.refresh.is_none().then_some("on")] data-choice="off" { "off" }
            @for seconds in REFRESH_CHOICES {
                a href=(link::with_refresh(&frame.address, Some(seconds)))
                    class=[(frame.refresh == Some(seconds)).then_some("on")] data-choice=(seconds) {
                    (seconds) " s"
                }
            }
        }
    }
}

/// The hidden CSRF field every action form carries.
pub(crate) fn csrf_field(token: &str) -> Markup {
    html! { input type="hidden" name=(csrf::FIELD) value=(token); }
}

/// An instant: its age or distance from `now` in words, the instant as the title.
pub(crate) fn instant(at: DateTime<Utc>, now: DateTime<Utc>) -> Markup {
    html! {
        time datetime=(rfc3339(at)) title=(rfc3339(at)) { (words::relative(at, now)) }
    }
}

/// An instant in a job's zone with UTC beside (`2026-03-29 09:00:00 CEST · 07:00:00
/// UTC`), or in UTC only for a job without a zone.
pub(crate) fn zoned(at: DateTime<Utc>, zone: Option<chrono_tz::Tz>) -> Markup {
    html! {
        time datetime=(rfc3339(at)) title=(rfc3339(at)) {
            @if let Some(tz) = zone {
                (at.with_timezone(&tz).format("%Y-%m-%d %H:%M:%S %Z"))
                span.muted { " · " (at.format("%H:%M:%S UTC")) }
            } @else {
                (at.format("%Y-%m-%d %H:%M:%S UTC"))
            }
        }
    }
}

/// An instant in RFC 3339, UTC, to the millisecond.
pub(crate) fn rfc3339(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// A run's outcome (`succeeded`, `failed`, …; a trigger's `skipped`), coloured by its
/// group: a success `ok`, a failure `bad`, anything else (retried, skipped, a newer
/// version's word read as `unknown`) `warn`.
pub(crate) fn outcome(outcome: Outcome) -> Markup {
    let class = if outcome.is_success() {
        "ok"
    } else if outcome.is_failure() {
        "bad"
    } else {
        "warn"
    };
    html! { span class=(class) { (outcome) } }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_outcome_is_coloured_by_its_group() {
        let cases = [
            (Outcome::Succeeded, "ok"),
            (Outcome::Failed, "bad"),
            (Outcome::TimedOut, "bad"),
            (Outcome::Cancelled, "bad"),
            (Outcome::Retried, "warn"),
            (Outcome::CancelledByNewer, "warn"),
            (Outcome::Skipped, "warn"),
            (Outcome::Unknown, "warn"),
        ];
        for (o, class) in cases {
            assert_eq!(
                outcome(o).into_string(),
                format!(r#"<span class="{class}">{o}</span>"#)
            );
        }
    }
}
