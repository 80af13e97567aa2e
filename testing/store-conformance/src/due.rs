//! The rules of the dynamic schedules' bounds (`scheduler_core::control::due`): a
//! put writes each row's bound no later than its first tick, the read of the rows
//! due by an instant filters, orders and pages them, and an advance moves a bound
//! forward only, at the version read, without a version bump.
//!
//! Each rule uses handlers and names of its own, so that [`all`] runs them on one
//! store.

use std::collections::BTreeMap;

use chrono::{DateTime, TimeDelta, Utc};
use scheduler_core::{Advance, Controls, DueCursor, DueSchedule, Page, ScheduleRow, TickBounds};

use crate::SharedStore;

fn controls(store: &SharedStore) -> &dyn Controls {
    store
        .controls()
        .expect("the store keeps controls: Store::controls() returned None")
}

async fn register(c: &dyn Controls, handlers: &[&str]) {
    let names: Vec<String> = handlers.iter().map(|h| (*h).to_owned()).collect();
    c.register_handlers("due-node", &names)
        .await
        .expect("register handlers");
}

/// Far enough ahead that every row is due by it.
fn far() -> DateTime<Utc> {
    Utc::now() + TimeDelta::days(400)
}

/// Every row of `handlers` due by `until`, read in pages of `page`.
async fn due_all(
    c: &dyn Controls,
    handlers: &[&str],
    until: DateTime<Utc>,
    page: u32,
) -> Vec<DueSchedule> {
    let handlers: Vec<String> = handlers.iter().map(|h| (*h).to_owned()).collect();
    let mut all = Vec::new();
    let mut after: Option<DueCursor> = None;
    loop {
        let got = c
            .due_schedules(&handlers, until, after.as_ref(), page)
            .await
            .expect("due schedules");
        assert!(got.len() <= page as usize, "a page holds at most its limit");
        let Some(last) = got.last() else {
            return all;
        };
        after = Some(last.cursor());
        let full = got.len() == page as usize;
        all.extend(got);
        if !full {
            return all;
        }
    }
}

/// The bound of row `name`, read through the due read.
async fn bound_of(c: &dyn Controls, handler: &str, name: &str) -> Option<DueSchedule> {
    due_all(c, &[handler], far(), 100)
        .await
        .into_iter()
        .find(|due| due.row.name == name)
}

async fn version(c: &dyn Controls) -> i64 {
    c.poll(None).await.expect("poll").expect("answers").version
}

/// The first tick of `row` strictly after `at`.
fn first_tick_after(row: &ScheduleRow, at: DateTime<Utc>) -> DateTime<Utc> {
    TickBounds::new(at + TimeDelta::seconds(60)).bound(row)
}

/// Rows put one by one and in a batch, then replaced: each row's bound is no later
/// than its first tick after the put, and no earlier than its first tick after the
/// put less [`TickBounds::MARGIN`].
pub async fn a_put_bounds_each_row_no_later_than_its_first_tick(store: &SharedStore) {
    let c = controls(store);
    let h = "due-put-h";
    register(c, &[h]).await;
    let mut zoned = ScheduleRow::new("due-put-zoned", h, "0 0 9 * * *");
    zoned.zone = Some("America/New_York".to_owned());
    let singles = vec![
        ScheduleRow::new("due-put-minute", h, "every 1m"),
        ScheduleRow::new("due-put-daily", h, "0 30 3 * * *"),
        zoned,
    ];
    let batch = vec![
        ScheduleRow::new("due-put-b-2m", h, "every 2m"),
        ScheduleRow::new("due-put-b-hourly", h, "0 15 * * * *"),
        ScheduleRow::new("due-put-b-daily", h, "0 45 22 * * *"),
        ScheduleRow::new("due-put-b-daily-2", h, "0 45 22 * * *"),
    ];
    let before = Utc::now();
    for row in &singles {
        c.put_schedule(row, "ops", "a bound").await.expect("put");
    }
    c.put_schedules(&batch, "ops", "bounds")
        .await
        .expect("put a batch");
    let check = |due: &[DueSchedule], rows: &[ScheduleRow], before: DateTime<Utc>| {
        let by_name: BTreeMap<&str, &DueSchedule> =
            due.iter().map(|d| (d.row.name.as_str(), d)).collect();
        for row in rows {
            let got = by_name
                .get(row.name.as_str())
                .unwrap_or_else(|| panic!("{}: not read as due", row.name));
            let latest = first_tick_after(row, before);
            let earliest = TickBounds::new(before).bound(row);
            assert!(
                got.next_tick <= latest,
                "{}: bound {} later than its first tick {latest}",
                row.name,
                got.next_tick
            );
            assert!(
                got.next_tick >= earliest,
                "{}: bound {} earlier than its first tick less the margin {earliest}",
                row.name,
                got.next_tick
            );
            assert_eq!(got.row.schedule, row.schedule, "{}", row.name);
        }
    };
    let due = due_all(c, &[h], far(), 100).await;
    assert_eq!(due.len(), singles.len() + batch.len());
    check(&due, &singles, before);
    check(&due, &batch, before);
    // Rows sharing a schedule share a bound.
    let pair: Vec<DateTime<Utc>> = due
        .iter()
        .filter(|d| d.row.schedule == "0 45 22 * * *")
        .map(|d| d.next_tick)
        .collect();
    assert_eq!(pair.len(), 2);
    assert_eq!(pair[0], pair[1]);

    // A row replaced gets the bound of its new schedule.
    let replaced = ScheduleRow::new("due-put-daily", h, "every 5m");
    let again = Utc::now();
    c.put_schedule(&replaced, "ops", "more often")
        .await
        .expect("replace");
    let due = due_all(c, &[h], far(), 100).await;
    check(&due, std::slice::from_ref(&replaced), again);
}

/// The due read returns the enabled, not removed rows of the handlers asked for,
/// whose bound is no later than the instant asked, by `(next_tick, name)`, each
/// once however it is paged.
pub async fn the_due_read_filters_orders_and_pages(store: &SharedStore) {
    let c = controls(store);
    let (a, b) = ("due-read-a", "due-read-b");
    register(c, &[a, b]).await;
    let schedules = ["every 1m", "0 0 * * * *", "0 0 0 * * *"];
    let mut rows: Vec<ScheduleRow> = (0..30)
        .map(|i| ScheduleRow::new(format!("due-read-a-{i:02}"), a, schedules[i % 3]))
        .collect();
    rows.extend((0..5).map(|i| ScheduleRow::new(format!("due-read-b-{i}"), b, "every 1m")));
    let mut off = ScheduleRow::new("due-read-a-off", a, "every 1m");
    off.enabled = false;
    rows.push(off);
    rows.push(ScheduleRow::new("due-read-a-gone", a, "every 1m"));
    c.put_schedules(&rows, "ops", "due reads")
        .await
        .expect("put");
    c.remove_schedule("due-read-a-gone", "ops", "gone")
        .await
        .expect("remove")
        .expect("it was there");

    let whole = due_all(c, &[a], far(), 1000).await;
    let names: Vec<&str> = whole.iter().map(|d| d.row.name.as_str()).collect();
    assert_eq!(whole.len(), 30, "handler a's enabled rows only: {names:?}");
    assert!(
        names
            .iter()
            .all(|n| n.starts_with("due-read-a-") && *n != "due-read-a-off"),
        "{names:?}"
    );
    let keys: Vec<DueCursor> = whole.iter().map(DueSchedule::cursor).collect();
    assert!(
        keys.windows(2).all(|w| w[0] < w[1]),
        "by (next_tick, name), each once: {names:?}"
    );
    for due in &whole {
        let stored = c
            .schedule(&due.row.name)
            .await
            .expect("read")
            .expect("stored");
        assert_eq!(due.row, stored, "the due read returns the row as stored");
    }
    for page in [1, 7, 29, 30] {
        let paged = due_all(c, &[a], far(), page).await;
        assert_eq!(paged, whole, "pages of {page}");
    }
    assert_eq!(due_all(c, &[a, b], far(), 8).await.len(), 35);
    assert!(due_all(c, &[], far(), 8).await.is_empty(), "no handler");
    assert!(
        due_all(c, &["due-read-none"], far(), 8).await.is_empty(),
        "a handler without rows"
    );

    // Only the rows bound by `until`: the every-minute rows' bound is the earliest.
    let until = whole[0].next_tick;
    let early = due_all(c, &[a], until, 4).await;
    let expected: Vec<&DueSchedule> = whole.iter().filter(|d| d.next_tick <= until).collect();
    assert_eq!(early.iter().collect::<Vec<_>>(), expected);
    // The ten every-minute rows (with the hourly and daily ones when their tick
    // falls on the same minute).
    assert!(early.len() >= 10, "{early:?}");
    let before_any = until - TimeDelta::microseconds(1);
    assert!(due_all(c, &[a], before_any, 4).await.is_empty());
}

/// An advance moves a bound forward only, only at the version it read, bumps no
/// version and records nothing; a put made since wins, and a removal ends the row's
/// reads.
pub async fn an_advance_moves_forward_only_at_the_version_read(store: &SharedStore) {
    let c = controls(store);
    let h = "due-adv-h";
    register(c, &[h]).await;
    let name = "due-adv-x";
    c.put_schedule(&ScheduleRow::new(name, h, "every 1m"), "ops", "advances")
        .await
        .expect("put");
    let read = bound_of(c, h, name).await.expect("due");
    let (b0, v) = (read.next_tick, read.row.version);
    let advance = |minutes: i64, version: i64| Advance {
        name: name.to_owned(),
        version,
        next_tick: b0 + TimeDelta::minutes(minutes),
    };
    let since = version(c).await;
    let history = c
        .control_history(None, Page::default())
        .await
        .expect("history")
        .first()
        .map(|r| r.id);

    assert_eq!(
        c.advance_schedules(&[advance(10, v)])
            .await
            .expect("advance"),
        1
    );
    let got = bound_of(c, h, name).await.expect("due");
    assert_eq!(got.next_tick, b0 + TimeDelta::minutes(10));
    assert_eq!(got.row.version, v, "an advance is not a change of the row");
    assert_eq!(
        c.poll(Some(since)).await.expect("poll"),
        None,
        "no version bump"
    );
    let history_now = c
        .control_history(None, Page::default())
        .await
        .expect("history")
        .first()
        .map(|r| r.id);
    assert_eq!(history_now, history, "no audit record");

    // Never backwards, never at another version.
    assert_eq!(
        c.advance_schedules(&[advance(5, v)])
            .await
            .expect("advance"),
        0
    );
    assert_eq!(
        c.advance_schedules(&[advance(10, v)])
            .await
            .expect("advance"),
        0
    );
    assert_eq!(
        c.advance_schedules(&[advance(20, v + 1)])
            .await
            .expect("advance"),
        0
    );
    assert_eq!(
        c.advance_schedules(&[advance(20, v - 1)])
            .await
            .expect("advance"),
        0
    );
    assert_eq!(
        bound_of(c, h, name).await.expect("due").next_tick,
        b0 + TimeDelta::minutes(10)
    );
    // Twice in one call: the later wins, the row counted once.
    assert_eq!(
        c.advance_schedules(&[advance(40, v), advance(30, v)])
            .await
            .expect("advance"),
        1
    );
    assert_eq!(
        bound_of(c, h, name).await.expect("due").next_tick,
        b0 + TimeDelta::minutes(40)
    );
    // Not due before its bound.
    let handlers = [h.to_owned()];
    let early = c
        .due_schedules(&handlers, b0 + TimeDelta::minutes(39), None, 10)
        .await
        .expect("due");
    assert!(early.iter().all(|d| d.row.name != name), "{early:?}");
    // Unknown rows and empty calls move nothing.
    let unknown = Advance {
        name: "due-adv-nobody".to_owned(),
        version: v,
        next_tick: b0,
    };
    assert_eq!(c.advance_schedules(&[unknown]).await.expect("advance"), 0);
    assert_eq!(c.advance_schedules(&[]).await.expect("advance"), 0);

    // A put made since the read wins over an advance at the old version.
    let put_at = Utc::now();
    let row = ScheduleRow::new(name, h, "every 1m");
    c.put_schedule(&row, "ops", "again").await.expect("put");
    assert_eq!(
        c.advance_schedules(&[advance(50, v)])
            .await
            .expect("advance"),
        0
    );
    let after_put = bound_of(c, h, name).await.expect("due");
    assert!(after_put.row.version > v);
    assert!(
        after_put.next_tick <= first_tick_after(&row, put_at),
        "the put's bound, not the advance's: {}",
        after_put.next_tick
    );
    // A removal bumps the version: the row is read no more, advanced no more.
    let v2 = after_put.row.version;
    c.remove_schedule(name, "ops", "gone")
        .await
        .expect("remove")
        .expect("it was there");
    assert!(bound_of(c, h, name).await.is_none());
    assert_eq!(
        c.advance_schedules(&[advance(60, v2)])
            .await
            .expect("advance"),
        0
    );
}

/// A poll without the schedules reads everything else a poll does (the version,
/// the pauses, the resumes, the open triggers) and no schedule, from scratch or
/// since a version; the changes of the rows an instance names are read apart
/// ([`Controls::changed_schedules`]): the rows named changed within the versions
/// given, removed ones included, by name.
pub async fn a_poll_without_schedules_reads_the_rest(store: &SharedStore) {
    let c = controls(store);
    let h = "due-poll-h";
    register(c, &[h]).await;
    c.put_schedule(
        &ScheduleRow::new("due-poll-x", h, "every 1m"),
        "ops",
        "poll",
    )
    .await
    .expect("put");
    c.pause(&scheduler_core::ControlRequest::new("due-poll-x", "ops").why("hold"))
        .await
        .expect("pause");
    let full = c.poll(None).await.expect("poll").expect("answers");
    let bare = c
        .poll_without_schedules(None)
        .await
        .expect("poll")
        .expect("a read from scratch always answers");
    assert!(!full.schedules.is_empty());
    assert!(bare.schedules.is_empty(), "{:?}", bare.schedules);
    assert_eq!(bare.version, full.version);
    assert_eq!(bare.paused, full.paused);
    assert_eq!(bare.resumed, full.resumed);
    assert_eq!(bare.triggers, full.triggers);
    let since = full.version;
    assert_eq!(
        c.poll_without_schedules(Some(since)).await.expect("poll"),
        None
    );
    let rows: Vec<ScheduleRow> = ["due-poll-y", "due-poll-z", "due-poll-w"]
        .into_iter()
        .map(|name| ScheduleRow::new(name, h, "every 2m"))
        .collect();
    c.put_schedules(&rows, "ops", "poll").await.expect("put");
    c.remove_schedule("due-poll-x", "ops", "gone")
        .await
        .expect("remove")
        .expect("it was there");
    let changed = c
        .poll_without_schedules(Some(since))
        .await
        .expect("poll")
        .expect("changed");
    assert!(changed.schedules.is_empty(), "{:?}", changed.schedules);
    let upto = changed.version;
    let names = |rows: &[ScheduleRow]| -> Vec<(String, bool)> {
        rows.iter().map(|r| (r.name.clone(), r.removed)).collect()
    };
    let asked: Vec<String> = ["due-poll-z", "due-poll-x", "due-poll-y", "due-poll-none"]
        .map(str::to_owned)
        .to_vec();
    let among = c
        .changed_schedules(since, upto, &asked)
        .await
        .expect("changed");
    assert_eq!(
        names(&among),
        [
            ("due-poll-x".to_owned(), true),
            ("due-poll-y".to_owned(), false),
            ("due-poll-z".to_owned(), false),
        ],
        "the rows named, changed since, removed ones included, by name"
    );
    // Changes before `since` or after `upto` are not read.
    let before_removal = upto - 1;
    let early = c
        .changed_schedules(since, before_removal, &asked)
        .await
        .expect("changed");
    assert_eq!(
        names(&early),
        [
            ("due-poll-y".to_owned(), false),
            ("due-poll-z".to_owned(), false)
        ]
    );
    assert!(
        c.changed_schedules(upto, upto + 10, &asked)
            .await
            .expect("changed")
            .is_empty()
    );
    assert!(
        c.changed_schedules(since, upto, &[])
            .await
            .expect("changed")
            .is_empty()
    );
}

/// Every rule, on one store.
pub async fn all(store: &SharedStore) {
    a_poll_without_schedules_reads_the_rest(store).await;
    a_put_bounds_each_row_no_later_than_its_first_tick(store).await;
    the_due_read_filters_orders_and_pages(store).await;
    an_advance_moves_forward_only_at_the_version_read(store).await;
}
