//! A job's recent runs as an inline SVG chart, drawn on the server: a bar a run,
//! oldest on the left, its height the run's duration, its colour its outcome
//! (a success `ok`, a failure `bad`, anything else `warn`, as the tables colour
//! them); each bar's `<title>` says which run it is. No script: the page's policy
//! allows none, and inline `<svg>` markup needs none (colours come from the page's
//! inline style sheet).

use chrono::TimeDelta;
use maud::{Markup, html};
use scheduler_core::{Outcome, RunRow};

use crate::layout;
use crate::words;

const WIDTH: i64 = 720;
const HEIGHT: i64 = 160;
/// Room for the axis labels: left, bottom, top.
const LEFT: i64 = 64;
const BOTTOM: i64 = 22;
const TOP: i64 = 10;

/// The class of an outcome's colour.
fn class(outcome: Outcome) -> &'static str {
    if outcome.is_success() {
        "ok"
    } else if outcome.is_failure() {
        "bad"
    } else {
        "warn"
    }
}

/// The chart of `runs` (newest first, as the history reads them); nothing without
/// runs.
pub(crate) fn durations(runs: &[RunRow]) -> Markup {
    if runs.is_empty() {
        return html! {};
    }
    let took = |r: &RunRow| (r.finished - r.started).max(TimeDelta::zero());
    let longest = runs.iter().map(took).max().unwrap_or_default();
    let scale = longest.num_milliseconds().max(1);
    let plot_w = WIDTH - LEFT - 4;
    let plot_h = HEIGHT - TOP - BOTTOM;
    let n = runs.len() as i64;
    let step = (plot_w / n).max(1);
    let bar = (step * 4 / 5).max(1);
    let failed = runs.iter().filter(|r| r.outcome.is_failure()).count();
    html! {
        figure data-chart="durations" {
            svg.chart xmlns="http://www.w3.org/2000/svg" viewBox={ "0 0 " (WIDTH) " " (HEIGHT) }
                width=(WIDTH) height=(HEIGHT) role="img"
                aria-label={ "duration of the last " (n) " runs; " (failed) " failed" } {
                title { "Duration and outcome of the last " (n) " runs, oldest on the left" }
                line x1=(LEFT) y1=(TOP) x2=(LEFT) y2=(TOP + plot_h) {}
                line x1=(LEFT) y1=(TOP + plot_h) x2=(WIDTH - 4) y2=(TOP + plot_h) {}
                text x=(LEFT - 6) y=(TOP + 10) text-anchor="end" { (words::span(longest)) }
                text x=(LEFT - 6) y=(TOP + plot_h) text-anchor="end" { "0" }
                text x="4" y=(TOP + plot_h / 2) { "duration" }
                text x=(LEFT) y=(HEIGHT - 6) { "runs, oldest → newest" }
                @for (i, run) in runs.iter().rev().enumerate() {
                    @let h = (took(run).num_milliseconds() * plot_h / scale).max(2);
                    rect class=(class(run.outcome)) data-bar=(run.id)
                        x=(LEFT + 2 + i as i64 * step) y=(TOP + plot_h - h) width=(bar) height=(h) {
                        title {
                            "#" (run.id) " · tick " (layout::rfc3339(run.tick)) " · " (run.outcome)
                            " · took " (words::span(took(run))) " on " (run.node)
                            @if let Some(e) = &run.error { " · " (e.chars().take(200).collect::<String>()) }
                        }
                    }
                }
            }
            figcaption.small.muted {
                "Duration of each run (bar height), coloured by outcome: "
                span.ok { "succeeded" } ", " span.bad { "failed" } ", " span.warn { "other" } "."
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use chrono::{DateTime, Utc};

    use super::*;

    fn run(id: i64, ms: i64, outcome: Outcome, error: Option<&str>) -> RunRow {
        let tick = DateTime::<Utc>::UNIX_EPOCH + TimeDelta::seconds(id);
        RunRow {
            id,
            job: "j".into(),
            tick,
            node: "n".into(),
            token: id,
            started: tick,
            finished: tick + TimeDelta::milliseconds(ms),
            outcome,
            error: error.map(str::to_owned),
            attempt: 1,
        }
    }

    #[test]
    fn a_bar_a_run_oldest_first_coloured_and_escaped() {
        let runs = [
            run(3, 500, Outcome::Failed, Some("<script>alert(1)</script>")),
            run(2, 1000, Outcome::Succeeded, None),
            run(1, 250, Outcome::Skipped, None),
        ];
        let svg = durations(&runs).into_string();
        let bars: Vec<&str> = svg.split("<rect ").skip(1).collect();
        assert_eq!(bars.len(), 3);
        assert!(bars[0].starts_with(r#"class="warn" data-bar="1""#), "{svg}");
        assert!(bars[1].starts_with(r#"class="ok" data-bar="2""#));
        assert!(bars[2].starts_with(r#"class="bad" data-bar="3""#));
        assert!(
            svg.contains("&lt;script&gt;") && !svg.contains("<script"),
            "{svg}"
        );
        assert!(
            svg.contains(">1 s</text>"),
            "the axis says the longest: {svg}"
        );
        assert!(svg.contains("runs, oldest → newest"));
        assert_eq!(durations(&[]).into_string(), "");
    }
}
