//! The leases page: every lease row, its holder's node, tick, token and expiry.

use axum::extract::State;
use axum::response::Html;
use maud::html;

use crate::jobs::status_line;
use crate::layout::{self, Nav, page};
use crate::problem::Problem;
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

/// `GET leases`.
pub(crate) async fn show(State(shared): Ctx) -> Result<Html<String>, Problem> {
    let controls = shared.controls().ok_or_else(Problem::no_controls)?;
    let now = shared.store.now().await?;
    let leases = controls.leases().await?;
    let body = html! {
        (status_line(&shared, now))
        @if leases.is_empty() {
            p.muted { "No lease has been taken yet." }
        } @else {
            table {
                thead { tr {
                    th { "Lease" } th { "Holder (node)" } th { "Tick" } th.num { "Token" } th { "State" }
                } }
                tbody {
                    @for lease in &leases {
                        @let held = lease.released_at.is_none() && lease.expires_at > now;
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
                            td { (layout::instant(lease.tick, now)) br; span.small.muted { (layout::rfc3339(lease.tick)) } }
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
    };
    Ok(Html(page("Leases", Nav::Leases, body).into_string()))
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
