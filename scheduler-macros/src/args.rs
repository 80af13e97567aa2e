//! The arguments of `#[job(...)]`: one setter per key, each checking its value where
//! it is written; a key given twice is refused, and so are keys that contradict each
//! other and timings that cannot work together (a jitter or a retry backoff as long
//! as the period, a zero timeout...), each on the value concerned.
//!
//! The values are checked by `scheduler_spec`, the rules `scheduler_core` applies
//! when a scheduler is built: what compiles here is accepted there.

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use proc_macro2::{Span, TokenStream};
use scheduler_spec::{
    CronExpr, CronSchedule, DEFAULT_CATCH_UP_MAX, Every, Timing, TimingError, Tz,
};
use syn::meta::ParseNestedMeta;
use syn::parse::Parser;
use syn::punctuated::Punctuated;
use syn::spanned::Spanned;
use syn::{Error, Expr, ExprLit, Lit, LitInt, LitStr, Result, Token, Type};

/// The keys `#[job]` accepts, in the order the docs list them.
const KEYS: [&str; 16] = [
    "every",
    "cron",
    "tz",
    "scope",
    "name",
    "fencing",
    "jitter",
    "catch_up",
    "catch_up_window",
    "catch_up_max",
    "overlap",
    "max_concurrent",
    "retry",
    "retry_backoff",
    "timeout",
    "state",
];

/// The wait before the first retry when `retry` is given without `retry_backoff`.
const DEFAULT_RETRY_BACKOFF: Duration = Duration::from_secs(1);

/// What `#[job(...)]` says, checked.
#[derive(Debug)]
pub(crate) struct Args {
    pub(crate) schedule: Schedule,
    pub(crate) scope: Option<Scope>,
    /// The job's name, if given (a valid one); else the function's.
    pub(crate) name: Option<String>,
    /// Whether `fencing` was given (as `fencing` or `fencing = true/false`).
    pub(crate) fencing: Option<bool>,
    pub(crate) jitter: Option<Duration>,
    /// The catch-up window: `catch_up = "1m"` or `catch_up_window = "1m"`.
    pub(crate) catch_up: Option<Duration>,
    pub(crate) policy: Policy,
    /// The types of state the job reads, as written in `state(A, B)`.
    pub(crate) state: Vec<Type>,
}

/// The policies the keys set; `None` where no key sets one, so the default stays.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Policy {
    pub(crate) catch_up: Option<CatchUp>,
    pub(crate) overlap: Option<Overlap>,
    pub(crate) retry: Option<Retry>,
    pub(crate) timeout: Option<Duration>,
}

impl Policy {
    /// Whether no key sets a policy.
    pub(crate) fn is_unset(&self) -> bool {
        *self == Policy::default()
    }
}

/// `scheduler_core::CatchUp`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CatchUp {
    Skip,
    Latest,
    All { max: u32 },
}

/// `scheduler_core::Overlap`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Overlap {
    Skip,
    BufferOne,
    CancelRunning,
    /// `max` comes from `max_concurrent`.
    Concurrent {
        max: u32,
    },
}

/// `scheduler_core::Retry`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Retry {
    pub(crate) attempts: u32,
    pub(crate) backoff: Duration,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Schedule {
    Every(Duration),
    Cron { expr: String, tz: Option<String> },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scope {
    Cluster,
    Node,
}

impl Args {
    /// Parses and checks the attribute's arguments.
    pub(crate) fn parse(tokens: TokenStream) -> Result<Self> {
        let mut setters = Setters::default();
        syn::meta::parser(|meta| setters.set(&meta)).parse2(tokens)?;
        setters.finish()
    }
}

/// A value, where its key was written and where the value was (the key's span for
/// a key without one).
#[derive(Debug)]
struct Given<T> {
    key: Span,
    value: T,
    at: Span,
}

/// What `catch_up` says: the window, or a policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CatchUpKey {
    Window(Duration),
    Skip,
    Latest,
    All,
}

/// A parsed cron expression and the literal that holds it.
#[derive(Debug)]
struct Cron {
    expr: CronExpr,
    lit: LitStr,
}

/// A time zone and the name it was given by.
#[derive(Debug)]
struct Zone {
    tz: Tz,
    name: String,
}

/// The keys seen so far.
#[derive(Debug, Default)]
struct Setters {
    every: Option<Given<Duration>>,
    cron: Option<Given<Cron>>,
    tz: Option<Given<Zone>>,
    scope: Option<Given<Scope>>,
    name: Option<Given<String>>,
    fencing: Option<Given<bool>>,
    jitter: Option<Given<Duration>>,
    catch_up: Option<Given<CatchUpKey>>,
    catch_up_window: Option<Given<Duration>>,
    catch_up_max: Option<Given<u32>>,
    overlap: Option<Given<Overlap>>,
    max_concurrent: Option<Given<u32>>,
    retry: Option<Given<u32>>,
    retry_backoff: Option<Given<Duration>>,
    timeout: Option<Given<Duration>>,
    state: Option<Given<Vec<Type>>>,
}

const ONE_SCHEDULE: &str = "give either `every` or `cron`, not both: a job has one schedule";

impl Setters {
    fn set(&mut self, meta: &ParseNestedMeta<'_>) -> Result<()> {
        let key = meta.path.get_ident().map(ToString::to_string);
        match key.as_deref() {
            Some("every") => self.every(meta),
            Some("cron") => self.cron(meta),
            Some("tz") => self.tz(meta),
            Some("scope") => self.scope(meta),
            Some("name") => self.name(meta),
            Some("fencing") => self.fencing(meta),
            Some("jitter") => self.jitter(meta),
            Some("catch_up") => self.catch_up(meta),
            Some("catch_up_window") => self.catch_up_window(meta),
            Some("catch_up_max") => self.catch_up_max(meta),
            Some("overlap") => self.overlap(meta),
            Some("max_concurrent") => self.max_concurrent(meta),
            Some("retry") => self.retry(meta),
            Some("retry_backoff") => self.retry_backoff(meta),
            Some("timeout") => self.timeout(meta),
            Some("state") => self.state(meta),
            _ => Err(unknown_key(meta)),
        }
    }

    fn every(&mut self, meta: &ParseNestedMeta<'_>) -> Result<()> {
        once(&self.every, meta, "every")?;
        if self.cron.is_some() {
            return Err(meta.error(ONE_SCHEDULE));
        }
        let lit = string(meta, "every", r#""30s""#)?;
        let period = duration(&lit)?;
        if Every::new(period).is_err() {
            let msg = format!(
                "the period of `every` must be at least 1ms, not {:?}",
                lit.value()
            );
            return Err(Error::new(lit.span(), msg));
        }
        self.every = given(meta, period, lit.span());
        Ok(())
    }

    fn cron(&mut self, meta: &ParseNestedMeta<'_>) -> Result<()> {
        once(&self.cron, meta, "cron")?;
        if self.every.is_some() {
            return Err(meta.error(ONE_SCHEDULE));
        }
        let lit = string(meta, "cron", r#""0 */15 * * * *""#)?;
        let expr = CronExpr::parse(&lit.value()).map_err(|e| Error::new(lit.span(), e))?;
        let at = lit.span();
        self.cron = given(meta, Cron { expr, lit }, at);
        Ok(())
    }

    fn tz(&mut self, meta: &ParseNestedMeta<'_>) -> Result<()> {
        once(&self.tz, meta, "tz")?;
        let lit = string(meta, "tz", r#""Europe/Berlin""#)?;
        let name = lit.value();
        let tz = scheduler_spec::parse_time_zone(&name).map_err(|e| Error::new(lit.span(), e))?;
        self.tz = given(meta, Zone { tz, name }, lit.span());
        Ok(())
    }

    fn scope(&mut self, meta: &ParseNestedMeta<'_>) -> Result<()> {
        once(&self.scope, meta, "scope")?;
        let lit = string(meta, "scope", r#""node""#)?;
        let scope = match lit.value().as_str() {
            "cluster" => Scope::Cluster,
            "node" => Scope::Node,
            other => {
                let msg = format!(
                    r#"unknown scope {other:?}; use "cluster" (one run per tick in the cluster) or "node" (one per tick per node)"#
                );
                return Err(Error::new(lit.span(), msg));
            }
        };
        self.scope = given(meta, scope, lit.span());
        Ok(())
    }

    fn name(&mut self, meta: &ParseNestedMeta<'_>) -> Result<()> {
        once(&self.name, meta, "name")?;
        let lit = string(meta, "name", r#""nightly-sweep""#)?;
        let name = lit.value();
        scheduler_spec::check_name(&name).map_err(|reason| {
            Error::new(lit.span(), format!("invalid job name {name:?}: {reason}"))
        })?;
        self.name = given(meta, name, lit.span());
        Ok(())
    }

    fn fencing(&mut self, meta: &ParseNestedMeta<'_>) -> Result<()> {
        once(&self.fencing, meta, "fencing")?;
        let usage =
            "`fencing` stands alone or takes `true` or `false`: `fencing` or `fencing = false`";
        let (value, at) = if meta.input.peek(Token![=]) {
            match meta.value()?.parse::<Expr>()? {
                Expr::Lit(ExprLit {
                    lit: Lit::Bool(b),
                    attrs,
                }) if attrs.is_empty() => (b.value, b.span),
                other => return Err(Error::new_spanned(other, usage)),
            }
        } else if meta.input.is_empty() || meta.input.peek(Token![,]) {
            (true, key(meta))
        } else {
            return Err(meta.error(usage));
        };
        self.fencing = given(meta, value, at);
        Ok(())
    }

    fn jitter(&mut self, meta: &ParseNestedMeta<'_>) -> Result<()> {
        once(&self.jitter, meta, "jitter")?;
        let lit = string(meta, "jitter", r#""5s""#)?;
        self.jitter = given(meta, duration(&lit)?, lit.span());
        Ok(())
    }

    /// A duration (the window) or a policy word: a word is letters and underscores,
    /// so `"5"` and `"1.5s"` are reported as durations.
    fn catch_up(&mut self, meta: &ParseNestedMeta<'_>) -> Result<()> {
        once(&self.catch_up, meta, "catch_up")?;
        let lit = string(meta, "catch_up", r#""latest""#)?;
        let value = lit.value();
        let is_word =
            !value.is_empty() && value.chars().all(|c| c.is_ascii_alphabetic() || c == '_');
        let catch_up = if is_word {
            let words = [
                ("skip", CatchUpKey::Skip),
                ("latest", CatchUpKey::Latest),
                ("all", CatchUpKey::All),
            ];
            word(&lit, &words, |written, guess| {
                format!(
                    r#"unknown catch-up policy {written:?}; {}use "skip", "latest" or "all", or a duration for the window, like "1m""#,
                    did_you_mean(guess)
                )
            })?
        } else {
            CatchUpKey::Window(duration(&lit)?)
        };
        self.catch_up = given(meta, catch_up, lit.span());
        Ok(())
    }

    fn catch_up_window(&mut self, meta: &ParseNestedMeta<'_>) -> Result<()> {
        once(&self.catch_up_window, meta, "catch_up_window")?;
        let lit = string(meta, "catch_up_window", r#""10m""#)?;
        self.catch_up_window = given(meta, duration(&lit)?, lit.span());
        Ok(())
    }

    fn catch_up_max(&mut self, meta: &ParseNestedMeta<'_>) -> Result<()> {
        once(&self.catch_up_max, meta, "catch_up_max")?;
        let usage = "`catch_up_max` takes how many missed ticks `catch_up = \"all\"` runs at most, like `catch_up_max = 3`";
        let (max, at) = whole_number(meta, "catch_up_max", usage)?;
        self.catch_up_max = given(meta, max, at);
        Ok(())
    }

    fn overlap(&mut self, meta: &ParseNestedMeta<'_>) -> Result<()> {
        once(&self.overlap, meta, "overlap")?;
        let lit = string(meta, "overlap", r#""buffer_one""#)?;
        let words = [
            ("skip", Overlap::Skip),
            ("buffer_one", Overlap::BufferOne),
            ("cancel_running", Overlap::CancelRunning),
            ("concurrent", Overlap::Concurrent { max: 0 }),
        ];
        let overlap = word(&lit, &words, |written, guess| {
            let valid = r#"use "skip" (a tick due during a run is skipped), "buffer_one" (the latest tick due during a run waits for it to end), "cancel_running" (the newest tick cancels the run) or "concurrent" (with `max_concurrent = N`: up to N runs at once)"#;
            format!(
                "unknown overlap policy {written:?}; {}{valid}",
                did_you_mean(guess)
            )
        })?;
        self.overlap = given(meta, overlap, lit.span());
        Ok(())
    }

    fn max_concurrent(&mut self, meta: &ParseNestedMeta<'_>) -> Result<()> {
        once(&self.max_concurrent, meta, "max_concurrent")?;
        let usage = "`max_concurrent` takes how many runs `overlap = \"concurrent\"` allows at once, like `max_concurrent = 2`";
        let (max, at) = whole_number(meta, "max_concurrent", usage)?;
        self.max_concurrent = given(meta, max, at);
        Ok(())
    }

    fn retry(&mut self, meta: &ParseNestedMeta<'_>) -> Result<()> {
        once(&self.retry, meta, "retry")?;
        let usage = "`retry` takes how many times a failed run is retried (attempts after the first), like `retry = 3`";
        let (attempts, at) = whole_number(meta, "retry", usage)?;
        self.retry = given(meta, attempts, at);
        Ok(())
    }

    fn retry_backoff(&mut self, meta: &ParseNestedMeta<'_>) -> Result<()> {
        once(&self.retry_backoff, meta, "retry_backoff")?;
        let lit = string(meta, "retry_backoff", r#""10s""#)?;
        self.retry_backoff = given(meta, duration(&lit)?, lit.span());
        Ok(())
    }

    fn timeout(&mut self, meta: &ParseNestedMeta<'_>) -> Result<()> {
        once(&self.timeout, meta, "timeout")?;
        let lit = string(meta, "timeout", r#""5m""#)?;
        self.timeout = given(meta, duration(&lit)?, lit.span());
        Ok(())
    }

    fn state(&mut self, meta: &ParseNestedMeta<'_>) -> Result<()> {
        once(&self.state, meta, "state")?;
        let usage = "`state` lists the types the job reads with `ctx.state::<T>()`, like `state(PgPool, Config)`";
        if !meta.input.peek(syn::token::Paren) {
            return Err(meta.error(usage));
        }
        let content;
        syn::parenthesized!(content in meta.input);
        let types = Punctuated::<Type, Token![,]>::parse_terminated(&content)?;
        if types.is_empty() {
            return Err(meta.error(usage));
        }
        self.state = given(meta, types.into_iter().collect(), key(meta));
        Ok(())
    }

    /// Checks what only the keys together can tell.
    fn finish(self) -> Result<Args> {
        let now = Utc::now();
        let (schedule, period) = match (self.every, self.cron) {
            (Some(every), None) => {
                if let Some(tz) = self.tz {
                    let msg = "`tz` only applies to `cron`: an `every` schedule ticks at instants, not on a wall clock; remove `tz`";
                    return Err(Error::new(tz.key, msg));
                }
                (Schedule::Every(every.value), Some(every.value))
            }
            (None, Some(cron)) => {
                let Cron { expr, lit } = cron.value;
                let zone = self.tz.map(|tz| tz.value);
                // Whether it fires at all, by the same search as `build()`: from now,
                // so an expression whose years are all past is refused here too.
                let tz = zone.as_ref().map_or(Tz::UTC, |zone| zone.tz);
                let schedule = CronSchedule::new(expr, tz);
                schedule
                    .check_fires_after(now)
                    .map_err(|e| Error::new(lit.span(), e))?;
                let schedule_args = Schedule::Cron {
                    expr: lit.value(),
                    tz: zone.map(|zone| zone.name),
                };
                (schedule_args, shortest_gap(&schedule, now))
            }
            // The setters refuse this already; kept for completeness.
            (Some(_), Some(cron)) => return Err(Error::new(cron.key, ONE_SCHEDULE)),
            (None, None) => {
                let msg = r#"missing schedule; add `every = "30s"` or `cron = "0 */15 * * * *"` (sec min hour day month weekday)"#;
                return Err(Error::new(Span::call_site(), msg));
            }
        };

        let catch_up_key = self.catch_up.as_ref().map(|c| c.value);
        // The window, and the literal that gave it.
        let in_catch_up = match &self.catch_up {
            Some(Given {
                value: CatchUpKey::Window(window),
                at,
                ..
            }) => Some((*window, *at)),
            _ => None,
        };
        let window = match (in_catch_up, &self.catch_up_window) {
            (Some(_), Some(window)) => {
                let msg = r#"`catch_up` is a duration here, which already sets the catch-up window; write a policy in `catch_up` ("skip", "latest" or "all") to give the window with `catch_up_window`, or remove `catch_up_window`"#;
                return Err(Error::new(window.key, msg));
            }
            (Some(window), None) => Some(window),
            (None, Some(window)) => Some((window.value, window.at)),
            (None, None) => None,
        };
        let catch_up = match catch_up_key {
            None | Some(CatchUpKey::Window(_)) => None,
            Some(CatchUpKey::Skip) => Some(CatchUp::Skip),
            Some(CatchUpKey::Latest) => Some(CatchUp::Latest),
            Some(CatchUpKey::All) => Some(CatchUp::All {
                max: self
                    .catch_up_max
                    .as_ref()
                    .map_or(DEFAULT_CATCH_UP_MAX, |max| max.value),
            }),
        };
        if let Some(max) = &self.catch_up_max
            && catch_up_key != Some(CatchUpKey::All)
        {
            let msg = r#"`catch_up_max` bounds how many missed ticks `catch_up = "all"` runs, and applies to nothing else; add `catch_up = "all"` or remove `catch_up_max`"#;
            return Err(Error::new(max.key, msg));
        }
        let retry = match (&self.retry, &self.retry_backoff) {
            (Some(retry), backoff) => Some(Retry {
                attempts: retry.value,
                backoff: backoff
                    .as_ref()
                    .map_or(DEFAULT_RETRY_BACKOFF, |backoff| backoff.value),
            }),
            (None, Some(backoff)) => {
                let msg = "`retry_backoff` is the wait before retrying a failed run, and there are no retries; add `retry = 3` (retries after the first attempt) or remove `retry_backoff`";
                return Err(Error::new(backoff.key, msg));
            }
            (None, None) => None,
        };
        let overlap = match (self.overlap.as_ref().map(|o| o.value), &self.max_concurrent) {
            (Some(Overlap::Concurrent { .. }), Some(max)) if max.value == 0 => {
                let msg = "`max_concurrent` of 0 runs nothing; give at least 1";
                return Err(Error::new(max.at, msg));
            }
            (Some(Overlap::Concurrent { .. }), Some(max)) => {
                Some(Overlap::Concurrent { max: max.value })
            }
            (Some(Overlap::Concurrent { .. }), None) => {
                let msg = "`overlap = \"concurrent\"` needs how many runs at once: add `max_concurrent = 2`";
                return Err(Error::new(
                    self.overlap.as_ref().map_or(Span::call_site(), |o| o.key),
                    msg,
                ));
            }
            (_, Some(max)) => {
                let msg = r#"`max_concurrent` bounds the runs of `overlap = "concurrent"`, and applies to nothing else; add `overlap = "concurrent"` or remove `max_concurrent`"#;
                return Err(Error::new(max.key, msg));
            }
            (overlap, None) => overlap,
        };
        let policy = Policy {
            catch_up,
            overlap,
            retry,
            timeout: self.timeout.as_ref().map(|t| t.value),
        };
        let jitter = self.jitter.as_ref().map(|j| j.value);

        // The rules `build()` applies, on the same settings.
        let timing = Timing {
            period,
            jitter: jitter.unwrap_or_default(),
            window: window.map(|(window, _)| window),
            timeout: policy.timeout,
            retry: retry.map(|r| (r.attempts, r.backoff)),
            catch_up_max: match catch_up {
                Some(CatchUp::All { max }) => Some(max),
                _ => None,
            },
        };
        scheduler_spec::check_timing(&timing).map_err(|cause| {
            // On the value the rule concerns; a default backoff on `retry`, saying so.
            let (at, default_backoff) = match cause {
                TimingError::JitterNotShorterThanPeriod { .. } => (value_at(&self.jitter), false),
                TimingError::ZeroWindow => (window.map(|(_, at)| at), false),
                TimingError::ZeroTimeout => (value_at(&self.timeout), false),
                TimingError::ZeroRetries => (value_at(&self.retry), false),
                TimingError::ZeroBackoff | TimingError::BackoffNotShorterThanPeriod { .. } => {
                    match value_at(&self.retry_backoff) {
                        Some(backoff) => (Some(backoff), false),
                        None => (value_at(&self.retry), true),
                    }
                }
                TimingError::ZeroCatchUpMax | TimingError::CatchUpMaxTooLarge { .. } => {
                    (value_at(&self.catch_up_max), false)
                }
                _ => (None, false),
            };
            let note = if default_backoff {
                format!(" (`retry_backoff` is {DEFAULT_RETRY_BACKOFF:?} when not given)")
            } else {
                String::new()
            };
            Error::new(at.unwrap_or_else(Span::call_site), format!("{cause}{note}"))
        })?;

        Ok(Args {
            schedule,
            scope: self.scope.map(|s| s.value),
            name: self.name.map(|n| n.value),
            fencing: self.fencing.map(|f| f.value),
            jitter,
            catch_up: window.map(|(window, _)| window),
            policy,
            state: self.state.map(|s| s.value).unwrap_or_default(),
        })
    }
}

/// `value` given by the key `meta` names, written at `at`.
fn given<T>(meta: &ParseNestedMeta<'_>, value: T, at: Span) -> Option<Given<T>> {
    Some(Given {
        key: key(meta),
        value,
        at,
    })
}

/// Where a key's value was written, if the key was given.
fn value_at<T>(given: &Option<Given<T>>) -> Option<Span> {
    given.as_ref().map(|given| given.at)
}

/// The shortest of the next 64 gaps between ticks after `from`: what `build()`
/// holds a jitter and a retry backoff below, found the same way.
fn shortest_gap(schedule: &CronSchedule, from: DateTime<Utc>) -> Option<Duration> {
    let mut at = schedule.next_after(from)?;
    let mut shortest: Option<TimeDelta> = None;
    for _ in 0..64 {
        let Some(next) = schedule.next_after(at) else {
            break;
        };
        let gap = next - at;
        shortest = Some(shortest.map_or(gap, |s| s.min(gap)));
        at = next;
    }
    shortest.and_then(|gap| gap.to_std().ok())
}

fn key(meta: &ParseNestedMeta<'_>) -> Span {
    meta.path.span()
}

/// Refuses a key given before.
fn once<T>(slot: &Option<Given<T>>, meta: &ParseNestedMeta<'_>, key: &str) -> Result<()> {
    match slot {
        Some(_) => Err(meta.error(format!("`{key}` is given twice; give each key once"))),
        None => Ok(()),
    }
}

/// The string literal after `key =`.
fn string(meta: &ParseNestedMeta<'_>, key: &str, example: &str) -> Result<LitStr> {
    let usage = format!("`{key}` takes a string, like `{key} = {example}`");
    if !meta.input.peek(Token![=]) {
        return Err(meta.error(usage));
    }
    match meta.value()?.parse::<Expr>()? {
        Expr::Lit(ExprLit {
            lit: Lit::Str(lit),
            attrs,
        }) if attrs.is_empty() => Ok(lit),
        other => Err(Error::new_spanned(other, usage)),
    }
}

/// The whole number after `key =`, and where it is; `usage` if there is none.
fn whole_number(meta: &ParseNestedMeta<'_>, key: &str, usage: &str) -> Result<(u32, Span)> {
    if !meta.input.peek(Token![=]) {
        return Err(meta.error(usage));
    }
    match meta.value()?.parse::<Expr>()? {
        Expr::Lit(ExprLit {
            lit: Lit::Int(lit),
            attrs,
        }) if attrs.is_empty() => number(&lit, key),
        other => Err(Error::new_spanned(other, usage)),
    }
}

/// The `u32` an integer literal holds.
fn number(lit: &LitInt, key: &str) -> Result<(u32, Span)> {
    let n = lit.base10_parse::<u32>().map_err(|_| {
        let msg = format!(
            "`{key}` is at most {}, not {}",
            u32::MAX,
            lit.base10_digits()
        );
        Error::new(lit.span(), msg)
    })?;
    Ok((n, lit.span()))
}

/// The duration a string literal holds.
fn duration(lit: &LitStr) -> Result<Duration> {
    scheduler_spec::parse_duration(&lit.value()).map_err(|e| Error::new(lit.span(), e))
}

/// Which of `words` a string literal holds; else the error `unknown` words, given
/// what was written and the closest word if one is close.
fn word<T: Copy>(
    lit: &LitStr,
    words: &[(&'static str, T)],
    unknown: impl FnOnce(&str, Option<&str>) -> String,
) -> Result<T> {
    let written = lit.value();
    match words.iter().find(|(word, _)| *word == written) {
        Some((_, value)) => Ok(*value),
        None => {
            let guess = closest(words.iter().map(|(word, _)| *word), &written);
            Err(Error::new(lit.span(), unknown(&written, guess)))
        }
    }
}

/// `did you mean "x"? ` for a guess, nothing without one.
fn did_you_mean(guess: Option<&str>) -> String {
    guess.map_or_else(String::new, |guess| format!("did you mean {guess:?}? "))
}

/// Of `candidates`, the closest to `written` if it is close: at most two edits away,
/// and fewer edits than its length.
fn closest<'a>(candidates: impl IntoIterator<Item = &'a str>, written: &str) -> Option<&'a str> {
    candidates
        .into_iter()
        .map(|candidate| (edit_distance(candidate, written), candidate))
        .filter(|(d, candidate)| *d <= 2 && *d < candidate.len())
        .min()
        .map(|(_, candidate)| candidate)
}

/// The error for a key not in [`KEYS`], with a guess when one is close.
fn unknown_key(meta: &ParseNestedMeta<'_>) -> Error {
    let path = &meta.path;
    let written = path
        .segments
        .iter()
        .map(|segment| segment.ident.to_string())
        .collect::<Vec<_>>()
        .join("::");
    let valid = KEYS.join(", ");
    let msg = match closest(KEYS, &written) {
        Some(k) => format!("unknown key `{written}`; did you mean `{k}`? valid keys: {valid}"),
        None => format!("unknown key `{written}`; valid keys: {valid}"),
    };
    Error::new_spanned(path, msg)
}

/// Levenshtein distance, in characters.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let substitute = diagonal + usize::from(ca != *cb);
            diagonal = row[j + 1];
            row[j + 1] = substitute.min(row[j] + 1).min(diagonal + 1);
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use quote::quote;

    use super::*;

    fn parse(tokens: TokenStream) -> std::result::Result<Args, String> {
        Args::parse(tokens).map_err(|e| e.to_string())
    }

    #[test]
    fn every_form_of_every_key() {
        let args = parse(quote!(
            every = "1h30m",
            scope = "node",
            name = "sweep-all",
            fencing,
            jitter = "5s",
            catch_up = "1m",
            state(PgPool, std::sync::Arc<Config>)
        ));
        let args = args.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(args.schedule, Schedule::Every(Duration::from_secs(5400)));
        assert_eq!(args.scope, Some(Scope::Node));
        assert_eq!(args.name.as_deref(), Some("sweep-all"));
        assert_eq!(args.fencing, Some(true));
        assert_eq!(args.jitter, Some(Duration::from_secs(5)));
        assert_eq!(args.catch_up, Some(Duration::from_secs(60)));
        let state: Vec<String> = args.state.iter().map(|t| quote!(#t).to_string()).collect();
        assert_eq!(state, ["PgPool", "std :: sync :: Arc < Config >"]);

        let args = parse(quote!(
            cron = "0 0 3 * * *",
            tz = "Europe/Berlin",
            fencing = false,
        ))
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            args.schedule,
            Schedule::Cron {
                expr: "0 0 3 * * *".into(),
                tz: Some("Europe/Berlin".into())
            }
        );
        assert_eq!(args.fencing, Some(false));
        assert_eq!(args.scope, None);
        assert_eq!(args.catch_up, None);
        assert!(args.policy.is_unset());
    }

    #[test]
    fn every_form_of_every_policy_key() {
        let args = parse(quote!(
            every = "1h",
            catch_up = "all",
            catch_up_window = "10m",
            catch_up_max = 3,
            overlap = "buffer_one",
            retry = 2,
            retry_backoff = "10s",
            timeout = "5m",
        ))
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(args.catch_up, Some(Duration::from_secs(600)));
        assert_eq!(
            args.policy,
            Policy {
                catch_up: Some(CatchUp::All { max: 3 }),
                overlap: Some(Overlap::BufferOne),
                retry: Some(Retry {
                    attempts: 2,
                    backoff: Duration::from_secs(10)
                }),
                timeout: Some(Duration::from_secs(300)),
            }
        );

        let cases = [
            // The window alone, either way it is written.
            (
                quote!(every = "1h", catch_up = "1m"),
                Some(60),
                Policy::default(),
            ),
            (
                quote!(every = "1h", catch_up_window = "1m"),
                Some(60),
                Policy::default(),
            ),
            (
                quote!(every = "1h", catch_up = "skip"),
                None,
                Policy {
                    catch_up: Some(CatchUp::Skip),
                    ..Policy::default()
                },
            ),
            (
                quote!(every = "1h", catch_up = "latest", catch_up_window = "2h"),
                Some(7200),
                Policy {
                    catch_up: Some(CatchUp::Latest),
                    ..Policy::default()
                },
            ),
            (
                quote!(every = "1h", catch_up = "all"),
                None,
                Policy {
                    catch_up: Some(CatchUp::All {
                        max: DEFAULT_CATCH_UP_MAX,
                    }),
                    ..Policy::default()
                },
            ),
            (
                quote!(every = "1h", overlap = "skip"),
                None,
                Policy {
                    overlap: Some(Overlap::Skip),
                    ..Policy::default()
                },
            ),
            (
                quote!(every = "1h", retry = 3),
                None,
                Policy {
                    retry: Some(Retry {
                        attempts: 3,
                        backoff: DEFAULT_RETRY_BACKOFF,
                    }),
                    ..Policy::default()
                },
            ),
            (
                quote!(every = "1h", timeout = "1m30s"),
                None,
                Policy {
                    timeout: Some(Duration::from_secs(90)),
                    ..Policy::default()
                },
            ),
            // Below the shortest gap of a cron schedule (15 minutes).
            (
                quote!(
                    cron = "0 */15 * * * *",
                    jitter = "14m",
                    retry = 1,
                    retry_backoff = "14m59s"
                ),
                None,
                Policy {
                    retry: Some(Retry {
                        attempts: 1,
                        backoff: Duration::from_secs(899),
                    }),
                    ..Policy::default()
                },
            ),
        ];
        for (tokens, window, policy) in cases {
            let written = tokens.to_string();
            let args = parse(tokens).unwrap_or_else(|e| panic!("{written}: {e}"));
            assert_eq!(args.catch_up, window.map(Duration::from_secs), "{written}");
            assert_eq!(args.policy, policy, "{written}");
        }
    }

    #[test]
    fn the_defaults_are_the_documented_ones() {
        assert_eq!(DEFAULT_CATCH_UP_MAX, 10);
        assert_eq!(DEFAULT_RETRY_BACKOFF, Duration::from_secs(1));
    }

    #[test]
    fn mistakes_are_named() {
        let cases = [
            (
                quote!(evry = "30s"),
                "unknown key `evry`; did you mean `every`? valid keys: every, cron, tz, scope, name, fencing, jitter, catch_up, catch_up_window, catch_up_max, overlap, max_concurrent, retry, retry_backoff, timeout, state",
            ),
            (
                quote!(every = "30s", schedule = "x"),
                "unknown key `schedule`; valid keys: every, cron, tz, scope, name, fencing, jitter, catch_up, catch_up_window, catch_up_max, overlap, max_concurrent, retry, retry_backoff, timeout, state",
            ),
            (
                quote!(every = "30s", every = "1m"),
                "`every` is given twice; give each key once",
            ),
            (quote!(every = "30s", cron = "0 * * * * *"), ONE_SCHEDULE),
            (quote!(cron = "0 * * * * *", every = "30s"), ONE_SCHEDULE),
            (
                quote!(scope = "node"),
                "missing schedule; add `every = \"30s\"` or `cron = \"0 */15 * * * *\"` (sec min hour day month weekday)",
            ),
            (
                quote!(every = 30),
                "`every` takes a string, like `every = \"30s\"`",
            ),
            (
                quote!(every),
                "`every` takes a string, like `every = \"30s\"`",
            ),
            (
                quote!(every = "30x"),
                "invalid duration \"30x\": unknown unit; use ms, s, m, h or d",
            ),
            (
                quote!(every = "0s"),
                "the period of `every` must be at least 1ms, not \"0s\"",
            ),
            (
                quote!(every = "1s", fencing = "yes"),
                "`fencing` stands alone or takes `true` or `false`: `fencing` or `fencing = false`",
            ),
            (
                quote!(every = "1s", state = "PgPool"),
                "`state` lists the types the job reads with `ctx.state::<T>()`, like `state(PgPool, Config)`",
            ),
            (
                quote!(every = "1s", state()),
                "`state` lists the types the job reads with `ctx.state::<T>()`, like `state(PgPool, Config)`",
            ),
            (
                quote!(every = "1s", name = ""),
                "invalid job name \"\": a name must not be empty",
            ),
            (
                quote!(cron = "0 0 0 1 1 * 2020", tz = "Europe/Berlin"),
                "cron expression \"0 0 0 1 1 * 2020\" never fires; check that its day, month and weekday fields can meet and that its years are not all past",
            ),
            (
                quote!(cron = "0 */15 * * *"),
                "invalid cron expression \"0 */15 * * *\": it has 5 fields; put a seconds field first, like \"0 0 */15 * * *\"",
            ),
            (
                quote!(cron = "0 * * * * *", tz = "utc"),
                "unknown time zone \"utc\"; did you mean \"UTC\"?",
            ),
            (
                quote!(every = "1m", timout = "5m"),
                "unknown key `timout`; did you mean `timeout`? valid keys: every, cron, tz, scope, name, fencing, jitter, catch_up, catch_up_window, catch_up_max, overlap, max_concurrent, retry, retry_backoff, timeout, state",
            ),
            // Policies.
            (
                quote!(every = "1m", catch_up = "lastest"),
                r#"unknown catch-up policy "lastest"; did you mean "latest"? use "skip", "latest" or "all", or a duration for the window, like "1m""#,
            ),
            (
                quote!(every = "1m", catch_up = "never"),
                r#"unknown catch-up policy "never"; use "skip", "latest" or "all", or a duration for the window, like "1m""#,
            ),
            (
                quote!(every = "1m", catch_up = "5"),
                r#"invalid duration "5": a number needs a unit; use ms, s, m, h or d"#,
            ),
            (
                quote!(every = "1m", catch_up = all),
                r#"`catch_up` takes a string, like `catch_up = "latest"`"#,
            ),
            (
                quote!(every = "1m", catch_up = "1m", catch_up_window = "10m"),
                r#"`catch_up` is a duration here, which already sets the catch-up window; write a policy in `catch_up` ("skip", "latest" or "all") to give the window with `catch_up_window`, or remove `catch_up_window`"#,
            ),
            (
                quote!(every = "1m", catch_up_window = "10m", catch_up = "1m"),
                r#"`catch_up` is a duration here, which already sets the catch-up window; write a policy in `catch_up` ("skip", "latest" or "all") to give the window with `catch_up_window`, or remove `catch_up_window`"#,
            ),
            (
                quote!(every = "1m", catch_up_window = "soon"),
                r#"invalid duration "soon": expected a number; write it like "30s", "15m", "1h30m" or "500ms""#,
            ),
            (
                quote!(every = "1m", catch_up = "latest", catch_up_max = 3),
                r#"`catch_up_max` bounds how many missed ticks `catch_up = "all"` runs, and applies to nothing else; add `catch_up = "all"` or remove `catch_up_max`"#,
            ),
            (
                quote!(every = "1m", catch_up_max = 3),
                r#"`catch_up_max` bounds how many missed ticks `catch_up = "all"` runs, and applies to nothing else; add `catch_up = "all"` or remove `catch_up_max`"#,
            ),
            (
                quote!(every = "1m", catch_up = "all", catch_up_max = "3"),
                r#"`catch_up_max` takes how many missed ticks `catch_up = "all"` runs at most, like `catch_up_max = 3`"#,
            ),
            (
                quote!(every = "1m", catch_up = "all", catch_up_max = -1),
                r#"`catch_up_max` takes how many missed ticks `catch_up = "all"` runs at most, like `catch_up_max = 3`"#,
            ),
            (
                quote!(every = "1m", catch_up = "all", catch_up_max = 4294967296),
                "`catch_up_max` is at most 4294967295, not 4294967296",
            ),
            (
                quote!(every = "1m", overlap = "buffer-one"),
                r#"unknown overlap policy "buffer-one"; did you mean "buffer_one"? use "skip" (a tick due during a run is skipped), "buffer_one" (the latest tick due during a run waits for it to end), "cancel_running" (the newest tick cancels the run) or "concurrent" (with `max_concurrent = N`: up to N runs at once)"#,
            ),
            (
                quote!(every = "1m", overlap = "queue"),
                r#"unknown overlap policy "queue"; use "skip" (a tick due during a run is skipped), "buffer_one" (the latest tick due during a run waits for it to end), "cancel_running" (the newest tick cancels the run) or "concurrent" (with `max_concurrent = N`: up to N runs at once)"#,
            ),
            (
                quote!(every = "1m", overlap = "concurrent"),
                r#"`overlap = "concurrent"` needs how many runs at once: add `max_concurrent = 2`"#,
            ),
            (
                quote!(every = "1m", overlap = "concurrent", max_concurrent = 0),
                "`max_concurrent` of 0 runs nothing; give at least 1",
            ),
            (
                quote!(every = "1m", overlap = "skip", max_concurrent = 2),
                r#"`max_concurrent` bounds the runs of `overlap = "concurrent"`, and applies to nothing else; add `overlap = "concurrent"` or remove `max_concurrent`"#,
            ),
            (
                quote!(every = "1m", retry),
                "`retry` takes how many times a failed run is retried (attempts after the first), like `retry = 3`",
            ),
            (
                quote!(every = "1m", retry = 2.5),
                "`retry` takes how many times a failed run is retried (attempts after the first), like `retry = 3`",
            ),
            (
                quote!(every = "1m", retry = 3, retry = 2),
                "`retry` is given twice; give each key once",
            ),
            (
                quote!(every = "1m", retry_backoff = "10s"),
                "`retry_backoff` is the wait before retrying a failed run, and there are no retries; add `retry = 3` (retries after the first attempt) or remove `retry_backoff`",
            ),
            (
                quote!(every = "1m", retry = 3, retry_backoff = "1.5s"),
                r#"invalid duration "1.5s": fractions are not supported; combine units instead, like "1s500ms""#,
            ),
            (
                quote!(every = "1m", timeout = 300),
                r#"`timeout` takes a string, like `timeout = "5m"`"#,
            ),
            // The timing rules, as `build()` words them.
            (
                quote!(every = "1s", jitter = "1h"),
                "jitter 3600s is not shorter than the period 1s: each tick would start in a later tick's slot; keep the jitter well below the period",
            ),
            (
                quote!(every = "1m", jitter = "1m"),
                "jitter 60s is not shorter than the period 60s: each tick would start in a later tick's slot; keep the jitter well below the period",
            ),
            (
                quote!(cron = "0 */15 * * * *", jitter = "15m"),
                "jitter 900s is not shorter than the period 900s: each tick would start in a later tick's slot; keep the jitter well below the period",
            ),
            (
                quote!(every = "1m", catch_up = "0s"),
                "a catch-up window of zero lets no tick start; give a positive duration or leave it out (one period)",
            ),
            (
                quote!(every = "1m", catch_up = "skip", catch_up_window = "0ms"),
                "a catch-up window of zero lets no tick start; give a positive duration or leave it out (one period)",
            ),
            (
                quote!(every = "1m", timeout = "0s"),
                "a run timeout of zero cancels every run at once; give a positive duration or leave it out (no limit)",
            ),
            (
                quote!(every = "1m", retry = 0),
                "`retry` of 0 attempts retries nothing; give at least 1 or leave it out",
            ),
            (
                quote!(every = "1m", retry = 3, retry_backoff = "0s"),
                "a retry backoff of zero retries a failed run at once, over and over; give a positive duration",
            ),
            (
                quote!(every = "1m", retry = 3, retry_backoff = "2m"),
                "retry backoff 120s is not shorter than the period 60s: no retry could start before the next tick; shorten the backoff",
            ),
            (
                quote!(every = "500ms", retry = 3),
                "retry backoff 1s is not shorter than the period 500ms: no retry could start before the next tick; shorten the backoff (`retry_backoff` is 1s when not given)",
            ),
            (
                quote!(every = "1m", catch_up = "all", catch_up_max = 0),
                "catching up on all missed ticks with `max` 0 catches up on none; give a `max` of at least 1, or choose skip",
            ),
        ];
        for (tokens, want) in cases {
            let written = tokens.to_string();
            assert_eq!(parse(tokens).err().as_deref(), Some(want), "{written}");
        }
    }

    #[test]
    fn edit_distance_counts_edits() {
        assert_eq!(edit_distance("every", "evry"), 1);
        assert_eq!(edit_distance("catch_up", "catchup"), 1);
        assert_eq!(edit_distance("tz", "tz"), 0);
        assert_eq!(edit_distance("", "abc"), 3);
    }
}
