//! The triggered runs not yet done, and a trigger's state in words.

use chrono::{DateTime, Utc};
use maud::{Markup, html};
use scheduler_core::{Trigger, TriggerState};

use crate::layout;
use crate::link;

pub(crate) fn triggers(triggers: &[Trigger], now: DateTime<Utc>) -> Markup {
    html! {
        table {
            thead { tr { th { "Trigger" } th { "Job" } th { "Asked" } th { "By" } th { "State" } } }
            tbody {
                @for t in triggers {
                    tr {
                        td { a href=(link::trigger(t.id.0)) { "#" (t.id) } }
                        td { a href=(link::job(&t.job)) { (t.job) } @if let Some(n) = &t.node { " on " (n) } }
                        td { (layout::instant(t.requested_at, now)) }
                        td { (t.by) @if !t.why.is_empty() { br; span.small.muted { (t.why) } } }
                        td { (trigger_state(&t.state, now)) }
                    }
                }
            }
        }
    }
}

pub(crate) fn trigger_state(state: &TriggerState, now: DateTime<Utc>) -> Markup {
    html! {
        @match state {
            TriggerState::Pending => span.warn { "pending: no instance has claimed it yet" },
            TriggerState::Running { holder, started_at } => {
                span.ok { "running" } " since " (layout::instant(*started_at, now))
                br; span.small.muted { "holder " (holder) }
            },
            TriggerState::Done { outcome, error, finished_at } => {
                (layout::outcome(*outcome)) " " (layout::instant(*finished_at, now))
                @if let Some(e) = error { br; span.bad { (e) } }
            },
            _ => span.muted { "unknown" },
        }
    }
}
