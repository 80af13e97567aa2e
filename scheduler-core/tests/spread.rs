//! Dynamic schedules spread over the live instances: three instances on one store
//! each run about a third of the schedules' ticks, every tick once and on time (a
//! fourth, without their handler, owns none); when one stops, the other two take
//! its share, still every tick once.
//!
//! On the in-memory store, on paused tokio time.
#![allow(clippy::expect_used, clippy::unwrap_used)]

mod support;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use scheduler_core::{Controls, JobContext, MemoryStore, ScheduleRow, Scheduler, Store};
use support::{mid_second, store};

const SCHEDULES: usize = 90;

/// Each run: the schedule, its tick, the node that ran it and how late it began.
type Ran = Arc<Mutex<Vec<(String, DateTime<Utc>, &'static str, i64)>>>;

fn instance(memory: &Arc<MemoryStore>, node: &'static str, ran: &Ran) -> Scheduler {
    instance_of(memory, node, "work", ran)
}

/// An instance that registers only `handler`.
fn instance_of(
    memory: &Arc<MemoryStore>,
    node: &'static str,
    handler: &str,
    ran: &Ran,
) -> Scheduler {
    let ran = ran.clone();
    let clock = memory.clone();
    Scheduler::builder(memory.clone())
        .node_id(node)
        .lease_ttl(Duration::from_secs(4))
        .control_poll(Some(Duration::from_millis(200)))
        .heartbeat(Duration::from_secs(2))
        .handler(handler, move |ctx: JobContext, _args: Arc<str>| {
            let (ran, clock) = (ran.clone(), clock.clone());
            async move {
                let now = clock.now().await.expect("clock");
                let late = (now - ctx.tick().at()).num_milliseconds();
                ran.lock()
                    .unwrap()
                    .push((ctx.job().to_owned(), ctx.tick().at(), node, late));
                Ok(())
            }
        })
        .build()
        .expect("build")
}

#[tokio::test(start_paused = true)]
async fn three_instances_share_the_ticks_and_two_take_over_when_one_stops() {
    let memory = store();
    mid_second(&memory).await;
    let rows: Vec<ScheduleRow> = (0..SCHEDULES)
        .map(|k| ScheduleRow::new(format!("customer-{k:02}"), "work", "every 5s"))
        .collect();
    let ran: Ran = Arc::default();
    let sleep = |ms: u64| tokio::time::sleep(Duration::from_millis(ms));
    // The schedules are put once the handlers registered (at the first poll);
    // node-c stops 30 s later, the others after 60 s.
    let m = memory.clone();
    let put = async move {
        sleep(500).await;
        m.put_schedules(&rows, "ops", "a schedule per customer")
            .await
            .expect("put")
            .expect("recorded");
        let start = m.now().await.expect("clock");
        sleep(60_000).await;
        start
    };
    // node-d runs another handler only: it owns none of these schedules.
    let (start, (), (), ()) = tokio::join!(
        async {
            let start = Arc::new(Mutex::new(None));
            let s = start.clone();
            instance(&memory, "node-a", &ran)
                .run_until(async move {
                    *s.lock().unwrap() = Some(put.await);
                })
                .await;
            start.lock().unwrap().expect("put")
        },
        instance(&memory, "node-b", &ran).run_until(sleep(60_500)),
        instance(&memory, "node-c", &ran).run_until(sleep(30_500)),
        instance_of(&memory, "node-d", "other", &ran).run_until(sleep(60_500)),
    );
    let ran = ran.lock().unwrap().clone();

    // Every tick of every schedule once, from the first to the last whole period.
    let mut by_tick: BTreeMap<(String, DateTime<Utc>), Vec<&str>> = BTreeMap::new();
    for (job, tick, node, _) in &ran {
        by_tick.entry((job.clone(), *tick)).or_default().push(node);
    }
    let twice: Vec<_> = by_tick.iter().filter(|(_, n)| n.len() > 1).collect();
    assert!(twice.is_empty(), "ran twice: {twice:?}");
    let first = start + chrono::TimeDelta::seconds(5);
    let last = start + chrono::TimeDelta::seconds(55);
    for k in 0..SCHEDULES {
        let name = format!("customer-{k:02}");
        let ticks: Vec<DateTime<Utc>> = by_tick
            .keys()
            .filter(|(job, t)| *job == name && *t >= first && *t <= last)
            .map(|(_, t)| *t)
            .collect();
        assert!(
            ticks
                .windows(2)
                .all(|w| w[1] - w[0] == chrono::TimeDelta::seconds(5)),
            "{name} ran every tick: {ticks:?}"
        );
        assert!(ticks.len() >= 10, "{name}: {ticks:?}");
    }

    // While all three ran (after the first heartbeat's read), each ran about a
    // third, on time.
    let share = |from: i64, to: i64| {
        let mut count: BTreeMap<&str, usize> = BTreeMap::new();
        for (_, tick, node, _) in &ran {
            let at = (*tick - start).num_seconds();
            if at >= from && at < to {
                *count.entry(*node).or_default() += 1;
            }
        }
        count
    };
    // On time while all run: no schedule is owned by an instance without its
    // handler (node-d), whose ticks everyone would then ask for late.
    let on_time = ran
        .iter()
        .filter(|r| (5..28).contains(&(r.1 - start).num_seconds()))
        .map(|r| r.3)
        .max()
        .unwrap_or(0);
    assert!(on_time < 400, "a run began {on_time} ms after its tick");
    let together = share(5, 28);
    let total: usize = together.values().sum();
    assert_eq!(together.len(), 3, "{together:?}");
    for (node, n) in &together {
        assert!(
            *n * 5 >= total && *n * 2 <= total,
            "{node} ran {n} of {total}: {together:?}"
        );
    }
    // After node-c stopped (its row says so at once; the others read it at their
    // next beat), its share went to the other two.
    let after = share(36, 60);
    assert_eq!(after.get("node-c"), None, "{after:?}");
    assert!(after.values().all(|&n| n > 0), "{after:?}");
    // A tick deferred for an owner is at most the deferral late (and a little).
    let latest = ran.iter().map(|r| r.3).max().unwrap_or(0);
    assert!(
        latest < 1_000,
        "the latest run began {latest} ms after its tick"
    );
}
