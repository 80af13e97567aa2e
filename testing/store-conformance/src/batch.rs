//! The rules of a batch put of dynamic schedules
//! ([`Controls::put_schedules`]): every row checked first, all or nothing, one
//! version bump and one audit record for the batch, seen by every instance at its
//! next poll.
//!
//! Each rule takes two handles on one store (`a` writes, `b` plays another instance
//! that polls) and uses names of its own, so that [`all`] runs them on one store.

use scheduler_core::{ControlAction, Controls, Error, Page, ScheduleRow};

use crate::SharedStore;

fn controls(store: &SharedStore) -> &dyn Controls {
    store
        .controls()
        .expect("the store keeps controls: Store::controls() returned None")
}

async fn version(c: &dyn Controls) -> i64 {
    c.poll(None)
        .await
        .expect("poll")
        .expect("poll(None) always answers")
        .version
}

async fn register(c: &dyn Controls, handler: &str) {
    c.register_handlers("batch-node", &[handler.to_owned()])
        .await
        .expect("register handlers");
}

/// `n` rows named `{prefix}-{i:04}`, every 30 s, handler `handler`, each with its own
/// arguments.
fn rows(prefix: &str, handler: &str, n: usize) -> Vec<ScheduleRow> {
    (0..n)
        .map(|i| {
            let mut row = ScheduleRow::new(format!("{prefix}-{i:04}"), handler, "every 30s");
            row.args = format!(r#"{{"customer": {i}}}"#);
            row
        })
        .collect()
}

/// Asserts `err` refuses row `index` named `name`, and returns its cause.
fn refused_row(err: Error, index: usize, name: &str, what: &str) -> Error {
    let text = err.to_string();
    let Error::InBatch {
        index: got,
        name: got_name,
        cause,
    } = err
    else {
        panic!("{what}: not InBatch: {err:?}")
    };
    assert_eq!((got, got_name.as_str()), (index, name), "{what}: {text}");
    assert!(
        text.contains(&format!("row {index} ({name:?})")),
        "{what}: the message names the row: {text}"
    );
    *cause
}

/// Asserts nothing changed since version `since` and no row of `prefix` is stored.
async fn nothing_written(c: &dyn Controls, since: i64, prefix: &str, what: &str) {
    assert_eq!(
        c.poll(Some(since)).await.expect("poll"),
        None,
        "{what}: a refused batch changed the store"
    );
    let stored = c.schedules().await.expect("schedules");
    assert!(
        !stored.iter().any(|row| row.name.starts_with(prefix)),
        "{what}: a refused batch wrote rows"
    );
}

/// A batch of 250 rows is stored with one version bump and one audit record (its
/// job the first row's name, its detail the count and the first names); another
/// instance's next poll returns every row, stamped with that one version.
pub async fn a_batch_is_one_put(a: &SharedStore, b: &SharedStore) {
    let (ca, cb) = (controls(a), controls(b));
    register(ca, "batch-h").await;
    let before = version(cb).await;
    let newest_before = ca
        .control_history(None, Page::default())
        .await
        .expect("history")
        .first()
        .map(|r| r.id);
    let batch = rows("batch-one", "batch-h", 250);
    let record = ca
        .put_schedules(&batch, "ops", "customers of the day")
        .await
        .expect("put the batch")
        .expect("a batch that is not empty is recorded");
    assert_eq!(record.action, ControlAction::SchedulePut);
    assert_eq!(record.job, "batch-one-0000");
    assert_eq!(
        (record.by.as_str(), record.why.as_str()),
        ("ops", "customers of the day")
    );
    assert!(
        record
            .detail
            .starts_with(r#"250 schedules put: "batch-one-0000", "batch-one-0001""#)
            && record.detail.ends_with("and 245 more"),
        "{}",
        record.detail
    );

    let state = cb
        .poll(Some(before))
        .await
        .expect("poll")
        .expect("the batch changed the version");
    assert_eq!(state.version, before + 1, "one version bump for the batch");
    let polled: Vec<&ScheduleRow> = state
        .schedules
        .iter()
        .filter(|row| row.name.starts_with("batch-one-"))
        .collect();
    assert_eq!(polled.len(), 250, "the poll returns every row of the batch");
    assert!(
        polled
            .iter()
            .all(|row| row.version == state.version && !row.removed)
    );

    let stored: Vec<ScheduleRow> = cb
        .schedules()
        .await
        .expect("schedules")
        .into_iter()
        .filter(|row| row.name.starts_with("batch-one-"))
        .collect();
    assert_eq!(stored.len(), 250);
    for (put, got) in batch.iter().zip(&stored) {
        assert_eq!(
            (&got.name, &got.handler, &got.schedule, got.enabled),
            (&put.name, &put.handler, &put.schedule, put.enabled)
        );
        let args: serde_json::Value = serde_json::from_str(&got.args).expect("args are JSON");
        let want: serde_json::Value = serde_json::from_str(&put.args).expect("args are JSON");
        assert_eq!(args, want, "{}", got.name);
    }
    let history = ca
        .control_history(None, Page::default())
        .await
        .expect("history");
    assert_eq!(history[0], record);
    assert_eq!(
        history.get(1).map(|r| r.id),
        newest_before,
        "one audit record for the batch"
    );
}

/// One bad row refuses the batch, naming it (index and name), nothing written: a
/// schedule that does not parse, a period under the store's minimum, arguments
/// that are not JSON, a name twice, a handler no instance registered.
pub async fn a_bad_row_refuses_the_batch(a: &SharedStore) {
    let c = controls(a);
    register(c, "batch-h").await;
    let since = version(c).await;

    let mut batch = rows("batch-bad", "batch-h", 6);
    batch[3].schedule = "every banana".to_owned();
    let err = c.put_schedules(&batch, "ops", "").await.unwrap_err();
    let cause = refused_row(err, 3, "batch-bad-0003", "a schedule that does not parse");
    assert!(matches!(cause, Error::InvalidSchedule { .. }), "{cause:?}");
    nothing_written(c, since, "batch-bad", "a schedule that does not parse").await;

    let mut batch = rows("batch-bad", "batch-h", 6);
    batch[5].schedule = "every 1ms".to_owned();
    let err = c.put_schedules(&batch, "ops", "").await.unwrap_err();
    let cause = refused_row(err, 5, "batch-bad-0005", "a period too short");
    assert!(matches!(cause, Error::InvalidInput { .. }), "{cause:?}");
    nothing_written(c, since, "batch-bad", "a period too short").await;

    let mut batch = rows("batch-bad", "batch-h", 6);
    batch[2].args = "{not json".to_owned();
    let err = c.put_schedules(&batch, "ops", "").await.unwrap_err();
    let cause = refused_row(err, 2, "batch-bad-0002", "arguments that are not JSON");
    assert!(matches!(cause, Error::InvalidControl { .. }), "{cause:?}");
    nothing_written(c, since, "batch-bad", "arguments that are not JSON").await;

    let mut batch = rows("batch-bad", "batch-h", 6);
    batch[4].name = "batch-bad-0001".to_owned();
    let err = c.put_schedules(&batch, "ops", "").await.unwrap_err();
    let cause = refused_row(err, 4, "batch-bad-0001", "a name twice");
    assert!(cause.to_string().contains("also row 1"), "{cause}");
    nothing_written(c, since, "batch-bad", "a name twice").await;

    // Rows after the first of a schedule text are still checked, name and all.
    let mut batch = rows("batch-bad", "batch-h", 6);
    batch[4].name = "batch-bad\n0004".to_owned();
    let err = c.put_schedules(&batch, "ops", "").await.unwrap_err();
    let cause = refused_row(err, 4, "batch-bad\n0004", "a bad name");
    assert!(matches!(cause, Error::InvalidName { .. }), "{cause:?}");
    nothing_written(c, since, "batch-bad", "a bad name").await;

    let mut batch = rows("batch-bad", "batch-h", 6);
    batch[1].handler = "batch-nobody-registered-this".to_owned();
    let err = c.put_schedules(&batch, "ops", "").await.unwrap_err();
    let cause = refused_row(err, 1, "batch-bad-0001", "an unknown handler");
    assert!(matches!(cause, Error::UnknownHandler { .. }), "{cause:?}");
    nothing_written(c, since, "batch-bad", "an unknown handler").await;

    let err = c
        .put_schedules(&rows("batch-bad", "batch-h", 2), " ", "")
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::InvalidInput { .. }),
        "an empty actor: {err:?}"
    );
    nothing_written(c, since, "batch-bad", "an empty actor").await;
}

/// A batch replaces the rows it names (a removed one comes back) and leaves the
/// others alone.
pub async fn a_batch_replaces_existing_rows(a: &SharedStore) {
    let c = controls(a);
    register(c, "batch-h").await;
    let old = rows("batch-replace", "batch-h", 3);
    for row in &old {
        c.put_schedule(row, "ops", "").await.expect("put one");
    }
    c.remove_schedule("batch-replace-0001", "ops", "")
        .await
        .expect("remove")
        .expect("there was one");
    let mut batch = rows("batch-replace", "batch-h", 2);
    for row in &mut batch {
        row.schedule = "every 1m".to_owned();
        row.enabled = false;
    }
    c.put_schedules(&batch, "ops", "slower")
        .await
        .expect("put the batch");
    let stored: Vec<ScheduleRow> = c
        .schedules()
        .await
        .expect("schedules")
        .into_iter()
        .filter(|row| row.name.starts_with("batch-replace-"))
        .collect();
    let seen: Vec<(&str, &str, bool)> = stored
        .iter()
        .map(|r| (r.name.as_str(), r.schedule.as_str(), r.enabled))
        .collect();
    assert_eq!(
        seen,
        [
            ("batch-replace-0000", "every 1m", false),
            ("batch-replace-0001", "every 1m", false),
            ("batch-replace-0002", "every 30s", true),
        ]
    );
}

/// An empty batch writes nothing, bumps nothing, records nothing: `Ok(None)`.
pub async fn an_empty_batch_writes_nothing(a: &SharedStore) {
    let c = controls(a);
    let since = version(c).await;
    let history = c
        .control_history(None, Page::default())
        .await
        .expect("history");
    assert_eq!(c.put_schedules(&[], "ops", "").await.expect("empty"), None);
    assert_eq!(c.poll(Some(since)).await.expect("poll"), None);
    assert_eq!(
        c.control_history(None, Page::default())
            .await
            .expect("history"),
        history
    );
}

/// Every schedule is read back by [`Controls::schedules`] and by a first poll, in
/// name order, however many: 25,001 rows, past the pages the SQL stores read them in
/// (10,000 per statement; one statement for a million hit PostgreSQL's statement
/// bound, and held every raw row at once).
pub async fn every_schedule_is_read_back(a: &SharedStore) {
    let c = controls(a);
    register(c, "many").await;
    let put: Vec<ScheduleRow> = rows("many", "many", 25_001);
    c.put_schedules(&put, "ops", "many rows")
        .await
        .expect("put")
        .expect("recorded");
    let names: Vec<String> = c
        .schedules()
        .await
        .expect("schedules")
        .into_iter()
        .filter(|row| row.name.starts_with("many-"))
        .map(|row| row.name)
        .collect();
    let mut expected: Vec<String> = put.into_iter().map(|row| row.name).collect();
    expected.sort();
    assert_eq!(names.len(), expected.len(), "every row, once");
    assert!(names == expected, "in name order");
    // A first poll reads them all too (in pages, in one snapshot).
    let state = c
        .poll(None)
        .await
        .expect("poll")
        .expect("a first poll reads");
    let polled: Vec<String> = state
        .schedules
        .into_iter()
        .filter(|row| row.name.starts_with("many-"))
        .map(|row| row.name)
        .collect();
    assert_eq!(polled.len(), expected.len(), "every row polled, once");
    assert!(polled == expected, "polled in name order");
}

/// Every rule, on one store (`stores[0]` writes; the last plays another instance).
pub async fn all(stores: &[SharedStore]) {
    let (a, b) = (&stores[0], &stores[stores.len() - 1]);
    a_batch_is_one_put(a, b).await;
    a_bad_row_refuses_the_batch(a).await;
    a_batch_replaces_existing_rows(a).await;
    an_empty_batch_writes_nothing(a).await;
    every_schedule_is_read_back(a).await;
}
