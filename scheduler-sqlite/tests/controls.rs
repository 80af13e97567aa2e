//! The shared rules of controls (`scheduler_store_tests::controls`) against a real
//! SQLite file: several stores, each with its own pool (an instance each), on one
//! new file per test.

#![allow(clippy::expect_used)]

mod support;

use std::path::Path;
use std::sync::Arc;

use scheduler_sqlite::{SqliteOptions, SqliteStore};
use scheduler_store_tests::SharedStore;
use scheduler_store_tests::controls as rules;
use support::TempDir;

async fn instances(path: &Path, n: usize) -> Vec<SharedStore> {
    let mut stores = Vec::new();
    for _ in 0..n {
        let store = SqliteStore::open(path, SqliteOptions::default())
            .await
            .expect("open");
        stores.push(Arc::new(store) as SharedStore);
    }
    stores
}

#[tokio::test]
async fn a_pause_refuses_the_take() {
    let dir = TempDir::new("pause");
    let s = instances(&dir.join("leases.db"), 2).await;
    rules::pause_refuses_the_take(&s[0], &s[1]).await;
}

#[tokio::test]
async fn a_node_pause_refuses_only_that_node() {
    let dir = TempDir::new("node-pause");
    let s = instances(&dir.join("leases.db"), 2).await;
    rules::node_pause_refuses_only_that_node(&s[0], &s[1]).await;
}

#[tokio::test]
async fn a_resume_ends_the_pause() {
    let dir = TempDir::new("resume");
    let s = instances(&dir.join("leases.db"), 2).await;
    rules::resume_ends_the_pause(&s[0], &s[1]).await;
}

#[tokio::test]
async fn a_pause_caught_up_is_left_to_its_catch_up() {
    let dir = TempDir::new("caught-up");
    let s = instances(&dir.join("leases.db"), 2).await;
    rules::a_pause_caught_up_is_left_to_its_catch_up(&s[0], &s[1]).await;
}

#[tokio::test]
async fn the_history_records_who_when_why() {
    let dir = TempDir::new("control-history");
    let s = instances(&dir.join("leases.db"), 1).await;
    rules::history_records_who_when_why(&s[0]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_trigger_is_claimed_exactly_once() {
    let dir = TempDir::new("trigger-once");
    let s = instances(&dir.join("leases.db"), 4).await;
    rules::trigger_is_claimed_exactly_once(&s).await;
}

#[tokio::test]
async fn a_claim_waits_for_a_held_lease() {
    let dir = TempDir::new("trigger-held");
    let s = instances(&dir.join("leases.db"), 2).await;
    rules::claim_waits_for_a_held_lease(&s[0], &s[1]).await;
}

#[tokio::test]
async fn a_claim_is_taken_over_after_the_claimant_vanished() {
    let dir = TempDir::new("trigger-reclaim");
    let s = instances(&dir.join("leases.db"), 2).await;
    rules::claim_is_taken_over_after_the_claimant_vanished(&s[0], &s[1]).await;
}

#[tokio::test]
async fn triggers_finish_once_and_report_their_state() {
    let dir = TempDir::new("trigger-finish");
    let s = instances(&dir.join("leases.db"), 2).await;
    rules::finish_and_status(&s[0], &s[1]).await;
}

#[tokio::test]
async fn every_outcome_reads_back() {
    let dir = TempDir::new("trigger-outcomes");
    let s = instances(&dir.join("leases.db"), 1).await;
    rules::every_outcome_reads_back(&s[0]).await;
}

#[tokio::test]
async fn a_trigger_leaves_a_due_tick_takeable() {
    let dir = TempDir::new("trigger-due");
    let s = instances(&dir.join("leases.db"), 2).await;
    rules::a_trigger_leaves_a_due_tick_takeable(&s[0], &s[1]).await;
}

#[tokio::test]
async fn a_trigger_leaves_a_completed_tick_completed() {
    let dir = TempDir::new("trigger-after");
    let s = instances(&dir.join("leases.db"), 2).await;
    rules::a_trigger_leaves_a_completed_tick_completed(&s[0], &s[1]).await;
}

#[tokio::test]
async fn a_trigger_on_a_new_lease_leaves_the_first_tick_takeable() {
    let dir = TempDir::new("trigger-new");
    let s = instances(&dir.join("leases.db"), 2).await;
    rules::a_trigger_on_a_new_lease_leaves_the_first_tick_takeable(&s[0], &s[1]).await;
}

#[tokio::test]
async fn a_finish_gives_the_lease_back_to_its_holder_only() {
    let dir = TempDir::new("trigger-give-back");
    let s = instances(&dir.join("leases.db"), 2).await;
    rules::finish_gives_the_lease_back_to_its_holder_only(&s[0], &s[1]).await;
}

#[tokio::test]
async fn a_trigger_is_not_stopped_by_a_request_meant_for_the_run_before() {
    let dir = TempDir::new("trigger-cancel");
    let s = instances(&dir.join("leases.db"), 2).await;
    rules::a_trigger_is_not_stopped_by_a_request_meant_for_the_run_before(&s[0], &s[1]).await;
}

#[tokio::test]
async fn a_trigger_is_not_stopped_by_an_older_tick() {
    let dir = TempDir::new("trigger-older-tick");
    let s = instances(&dir.join("leases.db"), 2).await;
    rules::a_trigger_is_not_stopped_by_an_older_tick(&s[0], &s[1]).await;
}

#[tokio::test]
async fn poll_sees_each_change_and_nothing_else() {
    let dir = TempDir::new("poll");
    let s = instances(&dir.join("leases.db"), 2).await;
    rules::poll_sees_each_change(&s[0], &s[1]).await;
}

#[tokio::test]
async fn bad_schedules_store_nothing() {
    let dir = TempDir::new("bad-schedules");
    let s = instances(&dir.join("leases.db"), 1).await;
    rules::bad_schedules_store_nothing(&s[0]).await;
}

#[tokio::test]
async fn dashboard_reads_agree_with_a_full_poll() {
    let dir = TempDir::new("dashboard-reads");
    let s = instances(&dir.join("leases.db"), 2).await;
    rules::reads_for_dashboards(&s[0], &s[1]).await;
}

#[tokio::test]
async fn jobs_are_known_by_registration_schedule_and_lease() {
    let dir = TempDir::new("known-jobs");
    let s = instances(&dir.join("leases.db"), 2).await;
    rules::jobs_are_known_by_registration_schedule_and_lease(&s[0], &s[1]).await;
}

#[tokio::test]
async fn every_rule_in_turn_on_one_file() {
    let dir = TempDir::new("controls-all");
    let s = instances(&dir.join("leases.db"), 2).await;
    rules::all(&s).await;
}
