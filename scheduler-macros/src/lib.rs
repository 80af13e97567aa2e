//! `#[job(...)]`: turns an `async fn` into a `scheduler_core` job, checking its
//! schedule while the code compiles.
//!
//! Use it through `scheduler-core`, which re-exports it as `scheduler_core::job`
//! (feature `macros`, on by default); the code it generates refers to that crate.
#![deny(missing_docs)]
#![warn(missing_debug_implementations, unreachable_pub)]

mod args;
mod expand;

use proc_macro::TokenStream;

/// Makes a job of an `async fn(JobContext) -> Result<(), E>`.
///
/// The function becomes a unit struct of the same name and visibility that
/// implements `Idempotent`, so it is registered by name:
/// `Scheduler::builder(store).job(sweep)`.
///
/// ```no_run
/// use scheduler_core::{BoxError, JobContext, MemoryStore, Scheduler, job};
///
/// /// Deletes expired sessions.
/// #[job(every = "1h", jitter = "30s")]
/// async fn sweep(ctx: JobContext) -> Result<(), std::io::Error> {
///     println!("sweeping for tick {}", ctx.tick());
///     Ok(())
/// }
///
/// /// Compacts this node's local cache at 03:00, Berlin time.
/// #[job(cron = "0 0 3 * * *", tz = "Europe/Berlin", scope = "node", fencing)]
/// async fn compact(_: JobContext) -> Result<(), BoxError> {
///     Ok(())
/// }
///
/// #[tokio::main(flavor = "current_thread")]
/// async fn main() -> Result<(), BoxError> {
///     let scheduler = Scheduler::builder(MemoryStore::new()).job(sweep).job(compact).build()?;
///     scheduler.run_until(std::future::pending()).await;
///     Ok(())
/// }
/// ```
///
/// # Keys
///
/// | key | value | default |
/// |---|---|---|
/// | `every` | a period: `"30s"`, `"15m"`, `"1h30m"`, `"500ms"`, `"2d"` (units `ms`, `s`, `m`, `h`, `d`); ticks at whole multiples of it since the Unix epoch | one of `every` and `cron` is required |
/// | `cron` | a cron expression read as crontab reads it: `"[sec] min hour day month weekday [year]"`, e.g. `"0 9 * * 1-5"` (5 fields, second 0), `"0 */15 * * * *"`, `"@daily"`; weekdays 0–7 (0 and 7 Sunday) or names, either day field when both are restricted, `L`, `W`, `#` (see `scheduler_spec::CronExpr`) | |
/// | `tz` | the IANA time zone `cron` is read in, e.g. `"Europe/Berlin"`; only with `cron` | `"UTC"` |
/// | `scope` | `"cluster"` (one run per tick in the cluster) or `"node"` (one per tick per node) | `"cluster"` |
/// | `name` | the job's name, unique in its scheduler: 1 to 200 bytes, no control characters | the function's name |
/// | `fencing` | bare, or `fencing = true`: a duplicate run would do harm (`Duplicate::NeedsFencing`) | duplicates are harmless |
/// | `jitter` | a duration: each tick starts after a random delay up to it; shorter than the period | none |
/// | `catch_up` | a duration, the catch-up window: how late a tick may still start (`catch_up = "10m"`); or the catch-up policy, which of the ticks that could not start on time still run: `"skip"` (none), `"latest"` (the most recent, once), `"all"` (each, oldest first) | window: one period; policy: `"latest"` |
/// | `catch_up_window` | the catch-up window, next to a policy word: `catch_up = "all", catch_up_window = "6h"` (alone, the same as `catch_up = "6h"`); not with a duration in `catch_up` | one period |
/// | `catch_up_max` | with `catch_up = "all"` only: how many missed ticks it runs at most, an integer from 1 to 100,000 (`catch_up_max = 3`) | 10 |
/// | `overlap` | a tick due while this instance's previous run still runs: `"skip"` (skipped), `"buffer_one"` (the latest such tick waits for the run to end) `"cancel_running"` (the newest tick cancels the run, anywhere in the cluster) or `"concurrent"` (up to `max_concurrent` runs of different ticks at once, each tick under one of that many lease slots) | `"skip"` |
/// | `max_concurrent` | an integer: how many runs `overlap = "concurrent"` allows at once; required with it, refused without it | |
/// | `retry` | how many times a failed run is retried, after the first attempt, under the same lease: an integer (`retry = 3`) | no retries |
/// | `retry_backoff` | with `retry` only: the wait before the first retry, doubling for each next one; shorter than the period | `"1s"` |
/// | `timeout` | a duration: how long a run may take before it is cancelled | no limit |
/// | `state` | the types the job reads with `ctx.state::<T>()`, like `state(PgPool, Config)`: `build()` refuses a scheduler not given a value of each | none declared |
///
/// Every value is checked at compile time, and a mistake is reported on the literal
/// that holds it: a duration that does not parse, a zero period, a cron expression
/// that does not parse or never fires (no fire time after the moment of compiling,
/// found by the search `build()` runs from its own now), an unknown time zone or
/// scope, an invalid name, an unknown or repeated key, `every` with `cron` or
/// neither, `tz` without `cron`, an unknown policy word, `catch_up_max` without
/// `catch_up = "all"`, `retry_backoff` without `retry`. So are the timings together
/// (`scheduler_spec::check_timing`), against the period (for `cron`, the shortest
/// gap between its next 64 ticks from the moment of compiling, as `build()` measures
/// it from its own now): a `jitter` or a `retry_backoff` (1s when not given) as long
/// as the period or longer, a zero `catch_up` window, `timeout`, `retry_backoff` or
/// `catch_up_max`, a `catch_up_max` above 100,000 (`scheduler_spec::MAX_CATCH_UP`),
/// `retry = 0`; `#[job(every = "1s", jitter = "1h")]` does not
/// compile. The rules are `scheduler_spec`'s, which `scheduler_core` applies too: a
/// job that compiles is one `build()` accepts.
/// The function must be `async`, take one `JobContext` parameter (named anything, or
/// `_`; its type written `JobContext` or as a path ending in `JobContext`) and return
/// a `Result<(), E>` whose `E` converts into `BoxError`.
///
/// # What it generates
///
/// For `#[job(every = "30s")] pub async fn sweep(ctx: JobContext) -> Result<(), E>`:
///
/// - `pub struct sweep;` (a unit struct: `Debug`, `Clone`, `Copy`, `Default`) with
///   the function's doc comments, `deprecated`, lint levels and `cfg`;
/// - in an anonymous `const _: () = { … };` block: the function as written, with its
///   other attributes (`tracing::instrument`, say), and `impl Idempotent for sweep`,
///   whose `run` awaits it and converts its error into `BoxError`. Methods for keys
///   not given keep the trait's defaults: `policy` is generated only when one of
///   `catch_up` (a policy word), `catch_up_max`, `overlap`, `retry`, `retry_backoff`
///   or `timeout` is given, as `Policy::default()` with a setter for each; the
///   catch-up window goes to `catch_up`.
///
/// The struct takes the function's name in both namespaces: in that scope, a
/// `let sweep = …` is a pattern matching the struct, not a new variable. To call a
/// job outside the scheduler (in a test), use `Idempotent::run` with
/// `JobContext::detached`.
///
/// On any error the function is emitted unchanged next to the error, so the rest of
/// the code still resolves.
#[proc_macro_attribute]
pub fn job(args: TokenStream, item: TokenStream) -> TokenStream {
    expand::job(args.into(), item.into()).into()
}
