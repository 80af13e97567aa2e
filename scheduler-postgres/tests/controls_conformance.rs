//! The shared rules of controls (`scheduler_store_tests::controls`) against a real
//! PostgreSQL server: several stores, each with its own pool (an instance each), on
//! one new database per test.

#![allow(clippy::expect_used)]

use std::sync::Arc;

use scheduler_postgres::{PostgresOptions, PostgresStore};
use scheduler_store_tests::SharedStore;
use scheduler_store_tests::controls as rules;
use test_postgres::TestDb;

async fn instances(db: &TestDb, n: usize) -> Vec<SharedStore> {
    let mut stores = Vec::new();
    for _ in 0..n {
        let store = PostgresStore::connect(db.url(), PostgresOptions::default())
            .await
            .expect("connect");
        stores.push(Arc::new(store) as SharedStore);
    }
    stores
}

#[tokio::test]
async fn a_pause_refuses_the_take() {
    let db = TestDb::new().await;
    let s = instances(&db, 2).await;
    rules::pause_refuses_the_take(&s[0], &s[1]).await;
}

#[tokio::test]
async fn a_node_pause_refuses_only_that_node() {
    let db = TestDb::new().await;
    let s = instances(&db, 2).await;
    rules::node_pause_refuses_only_that_node(&s[0], &s[1]).await;
}

#[tokio::test]
async fn a_resume_ends_the_pause() {
    let db = TestDb::new().await;
    let s = instances(&db, 2).await;
    rules::resume_ends_the_pause(&s[0], &s[1]).await;
}

#[tokio::test]
async fn a_pause_caught_up_is_left_to_its_catch_up() {
    let db = TestDb::new().await;
    let s = instances(&db, 2).await;
    rules::a_pause_caught_up_is_left_to_its_catch_up(&s[0], &s[1]).await;
}

#[tokio::test]
async fn the_history_records_who_when_why() {
    let db = TestDb::new().await;
    let s = instances(&db, 1).await;
    rules::history_records_who_when_why(&s[0]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_trigger_is_claimed_exactly_once() {
    let db = TestDb::new().await;
    let s = instances(&db, 4).await;
    rules::trigger_is_claimed_exactly_once(&s).await;
}

#[tokio::test]
async fn a_claim_waits_for_a_held_lease() {
    let db = TestDb::new().await;
    let s = instances(&db, 2).await;
    rules::claim_waits_for_a_held_lease(&s[0], &s[1]).await;
}

#[tokio::test]
async fn a_claim_is_taken_over_after_the_claimant_vanished() {
    let db = TestDb::new().await;
    let s = instances(&db, 2).await;
    rules::claim_is_taken_over_after_the_claimant_vanished(&s[0], &s[1]).await;
}

#[tokio::test]
async fn triggers_finish_once_and_report_their_state() {
    let db = TestDb::new().await;
    let s = instances(&db, 2).await;
    rules::finish_and_status(&s[0], &s[1]).await;
}

#[tokio::test]
async fn every_outcome_reads_back() {
    let db = TestDb::new().await;
    let s = instances(&db, 1).await;
    rules::every_outcome_reads_back(&s[0]).await;
}

#[tokio::test]
async fn a_trigger_leaves_a_due_tick_takeable() {
    let db = TestDb::new().await;
    let s = instances(&db, 2).await;
    rules::a_trigger_leaves_a_due_tick_takeable(&s[0], &s[1]).await;
}

#[tokio::test]
async fn a_trigger_leaves_a_completed_tick_completed() {
    let db = TestDb::new().await;
    let s = instances(&db, 2).await;
    rules::a_trigger_leaves_a_completed_tick_completed(&s[0], &s[1]).await;
}

#[tokio::test]
async fn a_trigger_on_a_new_lease_leaves_the_first_tick_takeable() {
    let db = TestDb::new().await;
    let s = instances(&db, 2).await;
    rules::a_trigger_on_a_new_lease_leaves_the_first_tick_takeable(&s[0], &s[1]).await;
}

#[tokio::test]
async fn a_finish_gives_the_lease_back_to_its_holder_only() {
    let db = TestDb::new().await;
    let s = instances(&db, 2).await;
    rules::finish_gives_the_lease_back_to_its_holder_only(&s[0], &s[1]).await;
}

#[tokio::test]
async fn a_trigger_is_not_stopped_by_a_request_meant_for_the_run_before() {
    let db = TestDb::new().await;
    let s = instances(&db, 2).await;
    rules::a_trigger_is_not_stopped_by_a_request_meant_for_the_run_before(&s[0], &s[1]).await;
}

#[tokio::test]
async fn a_trigger_is_not_stopped_by_an_older_tick() {
    let db = TestDb::new().await;
    let s = instances(&db, 2).await;
    rules::a_trigger_is_not_stopped_by_an_older_tick(&s[0], &s[1]).await;
}

#[tokio::test]
async fn poll_sees_each_change_and_nothing_else() {
    let db = TestDb::new().await;
    let s = instances(&db, 2).await;
    rules::poll_sees_each_change(&s[0], &s[1]).await;
}

#[tokio::test]
async fn bad_schedules_store_nothing() {
    let db = TestDb::new().await;
    let s = instances(&db, 1).await;
    rules::bad_schedules_store_nothing(&s[0]).await;
}

#[tokio::test]
async fn dashboard_reads_agree_with_a_full_poll() {
    let db = TestDb::new().await;
    let s = instances(&db, 2).await;
    rules::reads_for_dashboards(&s[0], &s[1]).await;
}

#[tokio::test]
async fn every_rule_in_turn_on_one_database() {
    let db = TestDb::new().await;
    let s = instances(&db, 2).await;
    rules::all(&s).await;
}

#[tokio::test]
async fn jobs_are_known_by_registration_schedule_and_lease() {
    let db = TestDb::new().await;
    let s = instances(&db, 2).await;
    rules::jobs_are_known_by_registration_schedule_and_lease(&s[0], &s[1]).await;
}
