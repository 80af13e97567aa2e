//! What the list pages (leases, failures, audit, instances) share: how many rows a
//! page holds, the count line (`1–50 of 10,000`), the pager's links, filter values
//! read from the query, and long stored texts folded so that no page outgrows
//! 200 KB whatever the store holds.

use std::fmt::Write as _;

use maud::{Markup, html};

use crate::problem::Problem;
use crate::shared::Shared;

/// The most rows a list page shows, whatever [`Dashboard::page_size`](crate::Dashboard::page_size)
/// says: with every text shortened to [`MAX_SHOWN`], a page stays within 200 KB.
pub(crate) const MAX_ROWS: u32 = 100;

/// The most rows a list of stored texts (failures, audit) shows: each row may carry
/// several texts of [`MAX_SHOWN`] bytes.
pub(crate) const MAX_TEXT_ROWS: u32 = 50;

/// The most bytes of one stored text (an error, a reason, a detail) a list shows;
/// the rest is said to be there, not shown.
pub(crate) const MAX_SHOWN: usize = 400;

/// The most bytes of a name, an actor or a version a list shows.
const SHORT_SHOWN: usize = 200;

/// A text longer than this is folded into a `<details>`, its first line shown.
const FOLD_OVER: usize = 120;

/// The most bytes of a filter value or a name cursor the pages read.
const MAX_FILTER: usize = 1024;

/// The filters' form laid out on one line (the layout's style sheet sets labels
/// as blocks for the action forms).
pub(crate) const FILTERS_STYLE: &str =
    "display:flex;flex-wrap:wrap;gap:.4em 1.2em;align-items:center;margin:.6em 0";

/// A filter's label on that line.
pub(crate) const FILTER_STYLE: &str = "display:inline-flex;gap:.4em;align-items:center;margin:0";

/// Rows per list page: the dashboard's page size, at most [`MAX_ROWS`].
pub(crate) fn rows(shared: &Shared) -> u32 {
    shared.page_size.clamp(1, MAX_ROWS)
}

/// Rows per page of a list of stored texts: at most [`MAX_TEXT_ROWS`].
pub(crate) fn text_rows(shared: &Shared) -> u32 {
    shared.page_size.clamp(1, MAX_TEXT_ROWS)
}

/// `10000` as `10,000`.
pub(crate) fn thousands(n: u64) -> String {
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

/// `1–50 of 10,000`: rows `first` (1-based) to `first + shown - 1` of `total`.
pub(crate) fn count(first: u64, shown: usize, total: u64) -> String {
    if shown == 0 {
        return format!("0 of {}", thousands(total));
    }
    let last = first + shown as u64 - 1;
    format!(
        "{}–{} of {}",
        thousands(first),
        thousands(last),
        thousands(total)
    )
}

/// A filter value from the query: absent or empty is no filter; one over 1 KiB
/// is refused (`what` names the parameter).
pub(crate) fn filter(value: Option<String>, what: &str) -> Result<Option<String>, Problem> {
    match value {
        Some(v) if v.len() > MAX_FILTER => Err(Problem::bad_request(format!(
            "the {what} given is {} bytes long; the pages read at most {MAX_FILTER} bytes",
            v.len()
        ))),
        Some(v) if v.trim().is_empty() => Ok(None),
        Some(v) => Ok(Some(v)),
        None => Ok(None),
    }
}

/// A row id cursor (`before=ID`): absent, or a positive id.
pub(crate) fn id_cursor(before: Option<i64>, usage: &str) -> Result<Option<i64>, Problem> {
    match before {
        Some(id) if id < 1 => Err(Problem::bad_request(format!(
            "`before` is a row id, a number of at least 1 (it was {id}); this page's address is {usage}"
        ))),
        other => Ok(other),
    }
}

/// A query string from `pairs`, the empty values left out: `?job=a%20b&before=7`.
pub(crate) fn query(page: &str, pairs: &[(&str, Option<&str>)]) -> String {
    let mut out = format!("./{page}");
    let mut sep = '?';
    for (key, value) in pairs {
        if let Some(v) = value.filter(|v| !v.is_empty()) {
            let _ = write!(out, "{sep}{key}={}", crate::link::encode(v));
            sep = '&';
        }
    }
    out
}

/// The pager under a list: each link (name, label, address), or its label greyed
/// when there is no such page.
pub(crate) fn pager(links: &[(&str, &str, Option<String>)]) -> Markup {
    html! {
        nav.pager aria-label="pages" {
            @for (name, label, href) in links {
                @if let Some(href) = href {
                    a href=(href) data-page=(*name) rel=[rel(name)] { (*label) }
                } @else {
                    span.muted data-page-off=(*name) { (*label) }
                }
                " "
            }
        }
    }
}

fn rel(name: &str) -> Option<&'static str> {
    match name {
        "previous" | "newer" => Some("prev"),
        "next" | "older" => Some("next"),
        _ => None,
    }
}

/// `text` cut to at most `max` bytes at a character boundary, and the bytes left
/// out.
pub(crate) fn cut(text: &str, max: usize) -> (&str, usize) {
    if text.len() <= max {
        return (text, 0);
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    (&text[..end], text.len() - end)
}

/// A stored text (an error, a reason): shown whole when short and on one line;
/// else its first line, and the text (at most [`MAX_SHOWN`] bytes) folded in a
/// `<details>`. `class` styles the text (`bad` for an error).
pub(crate) fn long_text(text: &str, class: &str) -> Markup {
    let one_line = !text.contains('\n');
    if text.len() <= FOLD_OVER && one_line {
        return html! { span class=(class) { (text) } };
    }
    let first = text.lines().next().unwrap_or_default();
    let (head, _) = cut(first, FOLD_OVER);
    let (shown, left_out) = cut(text, MAX_SHOWN);
    html! {
        details {
            summary { span class=(class) { (head) } " " span.small.muted { "(" (thousands(text.len() as u64)) " bytes)" } }
            pre class=(class) { (shown) }
            @if left_out > 0 {
                p.small.muted { "… " (thousands(left_out as u64)) " bytes more, not shown" }
            }
        }
    }
}

/// A short stored text (a name, an actor) cut to 200 bytes.
pub(crate) fn short_text(text: &str) -> Markup {
    let (shown, left_out) = cut(text, SHORT_SHOWN);
    html! {
        (shown) @if left_out > 0 { span.small.muted { "… (" (thousands(left_out as u64)) " bytes more)" } }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_written_with_thousands() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(10_000), "10,000");
        assert_eq!(thousands(1_234_567), "1,234,567");
        assert_eq!(count(1, 50, 10_000), "1–50 of 10,000");
        assert_eq!(count(9_951, 50, 10_000), "9,951–10,000 of 10,000");
        assert_eq!(count(1, 0, 0), "0 of 0");
    }

    #[test]
    fn a_cut_keeps_whole_characters() {
        assert_eq!(cut("héllo", 2), ("h", 5));
        assert_eq!(cut("hello", 10), ("hello", 0));
    }

    #[test]
    fn long_texts_are_folded_and_bounded() {
        let short = long_text("boom", "bad").into_string();
        assert_eq!(short, r#"<span class="bad">boom</span>"#);
        let long = "x".repeat(50_000);
        let folded = long_text(&long, "bad").into_string();
        assert!(folded.starts_with("<details>"), "{folded:.80}");
        assert!(
            folded.len() < MAX_SHOWN + FOLD_OVER + 300,
            "{}",
            folded.len()
        );
        assert!(folded.contains("49,600 bytes more"), "{folded}");
        let lines = long_text("first\n<second>", "bad").into_string();
        assert!(
            lines.contains("<summary><span class=\"bad\">first</span>"),
            "{lines}"
        );
        assert!(lines.contains("&lt;second&gt;"), "{lines}");
    }

    #[test]
    fn queries_leave_out_empty_values() {
        assert_eq!(
            query("audit", &[("job", None), ("before", None)]),
            "./audit"
        );
        assert_eq!(
            query("audit", &[("job", Some("a b&")), ("before", Some("7"))]),
            "./audit?job=a%20b%26&before=7"
        );
        assert_eq!(query("audit", &[("job", Some(""))]), "./audit");
    }
}
