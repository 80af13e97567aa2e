//! A chaos suite for the scheduler: app instances run as separate OS processes
//! against one PostgreSQL, a driver injects faults on a schedule, then checks the
//! record the instances left.
//!
//! # The app
//!
//! `chaos-app` (`src/bin/chaos-app.rs`) runs the jobs of [`app::JOBS`], all every
//! period (1 s): `alerts` and `sweep` (short), `report` (slow: 60 % of the period),
//! `payout` (needs fencing: 40 % of the period in 50 ms steps, then a write into
//! `payouts` through `PostgresStore::fenced`, attempted even when cancelled) and
//! `uptime` (once per node). Each run inserts its row into `runs` (job, tick, node,
//! instance, token, `started`) when it starts and records `finished` and its outcome
//! when it ends (`ok` / `cancelled`, then for `payout` `+paid` / `+refused` /
//! `+error`). Every instance writes a heartbeat row four times a second. All times
//! are the database's `clock_timestamp()`. `SIGTERM` shuts an instance down
//! gracefully; it exits by itself when the driver goes away. With `--record-url`,
//! runs and heartbeats go to another database (fenced writes stay in the lease
//! database): a failover of the lease database may lose what it acknowledged last,
//! and the record of what ran must not go with it.
//!
//! # The driver
//!
//! A [`Scenario`] starts [`Instance`]s (processes of `chaos-app`, their output in a
//! log file each), signals them with the `kill` command (`SIGKILL`, `SIGSTOP`,
//! `SIGCONT`, `SIGTERM`), can put a [`Proxy`] between an instance and the server
//! (switched to a blackhole: a connection cut without a close; or pointed at another
//! server, as a failover moves a VIP or a DNS name), reads the record with an
//! [`Inspector`], and at the end shuts everything down gracefully and checks the
//! record: [`check::check`], plus what the scenario asserts itself. The scenarios
//! are in `tests/scenarios.rs`; the failover ones run a primary and its streaming
//! replica (`test_postgres::TestServer::start_replica`), crash the primary, promote
//! the replica and point the instances' proxy at it.
//! `tests/patroni.rs` fails over a real Patroni cluster ([`patroni::Cluster`]:
//! etcd, three Patroni nodes in `synchronous_mode`, HAProxy) by crashing, switching
//! over or cutting off its leader, and lets Patroni do the rest.
//!
//! # What is checked, exactly
//!
//! Times are the database's. `ttl` is the lease ttl (2 s), `period` the jobs' period
//! (1 s), [`SLACK`] 500 ms.
//!
//! - **Checked range**: ticks `t` with `began < t ≤ stop − SLACK`, where `began` is
//!   when every initial instance had written its first heartbeat and `stop` when the
//!   final graceful shutdown begins. A node job's range on a node starts one period
//!   after the first instance on that node was ready (nodes are never left without
//!   one): that instance runs the node's latest tick as a catch-up at once, and the
//!   next tick may find it still running (a documented overlap skip).
//! - **Fault window**: `[fault − SLACK, recovery + ttl + period]`. `fault` is the
//!   database time just before the driver injects the fault (signal sent, server
//!   stopped, proxy cut); `recovery` the moment it ends (`SIGCONT`, server up again,
//!   proxy restored; for `SIGKILL` the kill itself). The `SLACK` before the fault
//!   covers a run that had started but not yet recorded its start; after recovery, a
//!   lease held when the fault hit expires at most one ttl after its last renewal,
//!   and the tick due at that expiry is taken within one period. A rolling restart
//!   and a skewed clock declare no window: they must not cost a single tick.
//! - **Once per tick outside the windows**: each tick in the range and outside every
//!   window has exactly one run — a cluster job's in the whole cluster, a node job's
//!   on each node. Misses and duplicates inside windows are counted, not failed.
//! - **Never early outside the windows**: no run starts more than [`check::EARLY`]
//!   (250 ms) before its tick; the database's clock decides when a tick is due.
//!   Inside a window, early starts are counted and listed as notes.
//! - **Never twice concurrently**, windows included: two runs of one tick of one
//!   series never overlap in time. A run lasts from `started` to its recorded
//!   `finished`, or if none to when its instance was killed, or to the end of the
//!   record. The app retries recording an end while the database is unreachable,
//!   so a recorded end is never earlier than the real one: the check can only err
//!   towards reporting an overlap.
//! - **Fenced writes never duplicated, never stale**: `payouts` has at most one row
//!   per (job, tick); no row was written after a run of its job with a larger token
//!   had started (that run's take waited for the fenced transaction's row lock, so
//!   it starts after every write of the older token); each row belongs to a run with
//!   its token that recorded it as paid; a run recorded as refused has none, and one
//!   recorded as paid has one.
//! - **Longest gap** between the starts of consecutive runs of one series in the
//!   range: at most `ttl + period + SLACK` around a crash-like fault (`SIGKILL`,
//!   `SIGSTOP`, a cut connection), `outage + ttl + period + SLACK` around a database
//!   restart, and `period + SLACK` when only graceful changes happen. The `SLACK`: a
//!   start is recorded by the job's first `INSERT`, after the wake-up, the batched
//!   take and the spawn of the run (milliseconds on an idle machine, hundreds on two
//!   loaded cores); and a holder hit after winning a tick but before recording its
//!   start stretches the gap from the tick before by how late after its tick the
//!   fault landed, which the driver keeps under `2 × MID_RUN` (300 ms).
//! - **A lease database that loses writes.** After a failover to an asynchronous
//!   replica ([`Scenario::lossy`]), what the old primary acknowledged last may be
//!   gone: inside a window, a tick run twice concurrently, a run recorded as paid
//!   whose write is missing, and a write committed under a smaller token than a run
//!   before it held (the larger one's take was lost) are counted and noted, not
//!   violations. Everything else holds as above.
//! - **No panic**: no instance's output contains `panicked`.
//! - **Recovered without a restart**: every instance alive at the end (neither killed
//!   nor restarted) wrote heartbeats after the last window ended (or after it became
//!   ready, if later) showing its count of ticks the store answered (runs ended plus
//!   ticks found held elsewhere) growing, one of them healthy by the readiness
//!   probe; and it exits with status 0 on `SIGTERM`.
//!
//! # Numbers reported per scenario
//!
//! Runs expected (ticks in the range, all series), runs recorded (runs of those
//! ticks), duplicates (surplus runs), misses (and how many fell in windows), the
//! longest gap (and its bound), the **time to detect** a lost lease (from the moment
//! the faulty holder can run again — `SIGCONT`, proxy restored — to the record of its
//! interrupted fencing run's end, cancelled or its write refused) and the **time for
//! takeover** (from the fault to the first run of the fencing job by another
//! instance; after a database restart, by any instance). A [`Report`] prints them as
//! a table row.
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

use std::time::Duration;

pub mod app;
pub mod check;
pub mod error;
pub mod instance;
pub mod patroni;
pub mod proxy;
pub mod record;
pub mod report;
pub mod scenario;

pub use error::{Error, Result};
pub use instance::{Instance, InstanceSpec, Signal};
pub use proxy::{Proxy, url_address, url_via};
pub use record::{Inspector, Record, Run};
pub use report::Report;
pub use scenario::{Scenario, ScenarioConfig, Verdict};

/// Scheduling slack the checks allow (see the crate documentation).
pub const SLACK: Duration = Duration::from_millis(500);

/// A run the driver faults "mid-run" started at most this long ago, so most of its
/// work is still ahead of it, and at most this long after its tick, so the fault
/// lands at most about twice this long after the tick (which bounds the gap when
/// the holder had won a tick it had not yet recorded).
pub const MID_RUN: Duration = Duration::from_millis(150);
