//! The leases page: the lease rows by name, a page at a time (first, previous,
//! next, last), searched by name and filtered by holder's node and by held or not;
//! each with its holder's node, tick, token and expiry.

use axum::extract::State;
use axum::response::Html;
use chrono::{DateTime, Utc};
use maud::{Markup, html};
use scheduler_core::{Cursor, LeaseRow, ListQuery, Listing};
use serde::Deserialize;

use crate::jobs::status_line;
use crate::layout::{self, Nav, page};
use crate::listing;
use crate::problem::Problem;
use crate::query::{Address, Query};
use crate::shared::Ctx;

/// The node id in a holder (`node:pid:random`); the whole holder when it has
/// another shape.
pub(crate) fn holder_node(holder: &str) -> &str {
    let mut parts = holder.rsplitn(3, ':');
    match (parts.next(), parts.next(), parts.next()) {
        (Some(_random), Some(_pid), Some(node)) => node,
        _ => holder,
    }
}

/// Held now, or not.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Held {
    Yes,
    No,
}

/// Which end of the list, without a name cursor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum End {
    First,
    Last,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct LeasesQuery {
    /// Only names containing this (ASCII-case-insensitive).
    #[serde(default)]
    q: Option<String>,
    #[serde(default)]
    node: Option<String>,
    /// `yes`, `no`, or empty for both.
    #[serde(default, deserialize_with = "empty_is_none")]
    held: Option<Held>,
    #[serde(default)]
    after: Option<String>,
    #[serde(default)]
    before: Option<String>,
    /// `first` or `last`: that end of the list.
    #[serde(default)]
    page: Option<End>,
    /// The position of the page's first row (1-based), as the link that led here
    /// counted it: for the count line only.
    #[serde(default)]
    at: Option<u64>,
}

impl Address for LeasesQuery {
    const USAGE: &'static str = "leases[?q=TEXT][&node=NODE][&held=yes|no], and one of \
         &after=NAME, &before=NAME or &page=first|last to page (&at=N: the page's first row's \
         position)";
}

/// An empty value (`held=` from a form's "any" choice) is no filter.
fn empty_is_none<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::de::DeserializeOwned,
{
    let text: Option<String> = Option::deserialize(d)?;
    match text.as_deref().map(str::trim) {
        None | Some("") => Ok(None),
        Some(v) => T::deserialize(serde::de::value::StrDeserializer::<D::Error>::new(v)).map(Some),
    }
}

/// The filters a page link keeps.
#[derive(Debug)]
struct Filters {
    search: Option<String>,
    node: Option<String>,
    held: Option<Held>,
}

impl Filters {
    /// The address of a page of these filters, at `cursor` (`after`/`before` and a
    /// name, or `page` and `first`/`last`), its first row at position `from`.
    fn link(&self, cursor: (&str, &str), from: Option<u64>) -> String {
        let held = self.held.map(|h| match h {
            Held::Yes => "yes",
            Held::No => "no",
        });
        let from = from.map(|f| f.to_string());
        listing::query(
            "leases",
            &[
                ("q", self.search.as_deref()),
                ("node", self.node.as_deref()),
                ("held", held),
                (cursor.0, Some(cursor.1)),
                ("at", from.as_deref()),
            ],
        )
    }
}

/// `GET leases[?q=TEXT][&node=NODE][&held=yes|no][&after=NAME|&before=NAME|&page=first|last][&at=N]`.
pub(crate) async fn show(
    State(shared): Ctx,
    Query(query): Query<LeasesQuery>,
) -> Result<Html<String>, Problem> {
    let filters = Filters {
        search: listing::filter(query.q, "search (q)")?,
        node: listing::filter(query.node, "node")?,
        held: query.held,
    };
    let after = listing::filter(query.after, "cursor (after)")?;
    let before = listing::filter(query.before, "cursor (before)")?;
    let cursor = match (after, before, query.page) {
        (None, None, None | Some(End::First)) => Cursor::First,
        (None, None, Some(End::Last)) => Cursor::Last,
        (Some(name), None, None) => Cursor::After(name),
        (None, Some(name), None) => Cursor::Before(name),
        _ => {
            return Err(Problem::bad_request(format!(
                "give one of after, before or page, not two; this page's address is {}",
                LeasesQuery::USAGE
            )));
        }
    };
    if query.at == Some(0) {
        return Err(Problem::bad_request(
            "`at` counts rows from 1 (it was 0); this page's address is leases?…&at=N",
        ));
    }
    let controls = shared.controls().ok_or_else(Problem::no_controls)?;
    let now = shared.store.now().await?;
    let limit = listing::rows(&shared);
    let mut list = ListQuery::new(limit).search(filters.search.clone().unwrap_or_default());
    if let Some(node) = &filters.node {
        list = list.node(node.clone());
    }
    if let Some(held) = filters.held {
        list = list.held(held == Held::Yes);
    }
    let at_last = matches!(cursor, Cursor::Last);
    let at_first = matches!(cursor, Cursor::First);
    list.cursor = cursor;
    let leases = controls.leases_listing(&list).await?;
    if leases.total == 0
        && let Some(node) = &filters.node
        && controls
            .leases_listing(&ListQuery::new(1).node(node.clone()))
            .await?
            .total
            == 0
    {
        return Err(Problem::bad_request(format!(
            "no lease was ever held by a node {node:?}: the node filter takes a node id as the \
             holders show it"
        )));
    }

    let first = position(&leases, at_first, at_last, query.at, limit);
    let shown = leases.rows.len() as u64;
    let links = pages(&filters, &leases, first, limit);
    let filtered = filters.search.is_some() || filters.node.is_some() || filters.held.is_some();
    let body = html! {
        (status_line(&shared, now))
        (filter_form(&filters))
        @if leases.rows.is_empty() {
            p.muted data-empty="leases" {
                @if filtered { "No lease matches these filters." }
                @else if leases.total > 0 { "No lease on this side of the cursor." }
                @else { "No lease has been taken yet." }
            }
        } @else {
            p.small.muted data-count="leases" {
                (listing::count(first, leases.rows.len(), leases.total.max(first + shown - 1)))
                @if filtered { " matching" }
                ", by name"
            }
            (table(&leases.rows, now))
        }
        (listing::pager(&links))
    };
    Ok(Html(page("Leases", Nav::Leases, body).into_string()))
}

/// The position of the page's first row: 1 on the first page, counted back from
/// the total on the last, else as the link that led here said.
fn position(
    leases: &Listing<LeaseRow>,
    at_first: bool,
    at_last: bool,
    from: Option<u64>,
    limit: u32,
) -> u64 {
    let shown = leases.rows.len() as u64;
    if at_first || !leases.more_before {
        1
    } else if at_last || !leases.more_after {
        leases.total.saturating_sub(shown) + 1
    } else {
        // A guess from the link, kept within what is possible.
        from.unwrap_or(u64::from(limit) + 1)
            .clamp(2, leases.total.saturating_sub(shown).max(2))
    }
}

/// First, previous, next and last, each when there is such a page.
fn pages(
    filters: &Filters,
    leases: &Listing<LeaseRow>,
    first: u64,
    limit: u32,
) -> Vec<(&'static str, &'static str, Option<String>)> {
    let shown = leases.rows.len() as u64;
    let head = leases.rows.first().map(|r| r.name.as_str());
    let tail = leases.rows.last().map(|r| r.name.as_str());
    let before = leases.more_before;
    let after = leases.more_after;
    vec![
        (
            "first",
            "« First",
            before.then(|| filters.link(("page", "first"), None)),
        ),
        (
            "previous",
            "‹ Previous",
            head.filter(|_| before).map(|name| {
                let from = first.saturating_sub(u64::from(limit)).max(1);
                filters.link(("before", name), Some(from))
            }),
        ),
        (
            "next",
            "Next ›",
            tail.filter(|_| after)
                .map(|name| filters.link(("after", name), Some(first + shown))),
        ),
        (
            "last",
            "Last »",
            after.then(|| filters.link(("page", "last"), None)),
        ),
    ]
}

fn filter_form(filters: &Filters) -> Markup {
    html! {
        form.filters method="get" action="./leases" style=(listing::FILTERS_STYLE) {
            label.inline style=(listing::FILTER_STYLE) {
                span style="min-width:0" { "Name" }
                input type="search" name="q" value=[filters.search.as_deref()] placeholder="part of a name";
            }
            label.inline style=(listing::FILTER_STYLE) {
                span style="min-width:0" { "Node" }
                input type="text" name="node" value=[filters.node.as_deref()] placeholder="any node";
            }
            label.inline style=(listing::FILTER_STYLE) {
                span style="min-width:0" { "State" }
                select name="held" {
                    option value="" selected[filters.held.is_none()] { "any" }
                    option value="yes" selected[filters.held == Some(Held::Yes)] { "held" }
                    option value="no" selected[filters.held == Some(Held::No)] { "not held" }
                }
            }
            button type="submit" { "Filter" }
            @if filters.search.is_some() || filters.node.is_some() || filters.held.is_some() {
                " " a href="./leases" data-filter="clear" { "every lease" }
            }
        }
    }
}

fn table(leases: &[LeaseRow], now: DateTime<Utc>) -> Markup {
    html! {
        table {
            thead { tr {
                th { "Lease" } th { "Holder (node)" } th { "Tick" } th.num { "Token" } th { "State" }
            } }
            tbody {
                @for lease in leases {
                    @let held = lease.held_at(now);
                    tr data-lease=(lease.name) {
                        td { code { (lease.name) } }
                        td {
                            @if let Some(holder) = &lease.holder {
                                strong { (holder_node(holder)) }
                                br; span.small.muted { (holder) }
                            } @else {
                                span.muted { "—" }
                            }
                        }
                        td { (layout::instant(lease.tick, now)) }
                        td.num { (lease.token) }
                        td {
                            @if let Some(released) = lease.released_at {
                                span.muted { "released " (layout::instant(released, now)) }
                            } @else if held {
                                span.ok { "held" } ", expires " (layout::instant(lease.expires_at, now))
                            } @else {
                                span.warn { "expired " (layout::instant(lease.expires_at, now)) }
                            }
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_node_is_the_holder_without_pid_and_random() {
        assert_eq!(holder_node("web-1:4242:00ff00ff00ff00ff"), "web-1");
        assert_eq!(holder_node("eu:west:1:00ff"), "eu:west");
        assert_eq!(holder_node("odd"), "odd");
    }
}
