//! The arguments of `#[job(...)]`: one setter per key, each checking its value where
//! it is written; a key given twice is refused, and so are keys that contradict each
//! other and timings that cannot work together (a jitter or a retry backoff as long
//! as the period, a zero timeout...), each on the value concerned.
//!
//! The values are checked by `scheduler_spec`, the rules `scheduler_core` applies
//! when a scheduler is built: what compiles here is accepted there.
//!
//! The policy keys' setters and the policies they set are in `policy`, reading a
//! key's literal in `literals`, the guesses for a misspelled key or word in
//! `spelling`.

mod literals;
mod policy;
mod spelling;

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use proc_macro2::{Span, TokenStream};
use scheduler_spec::{
    CronExpr, CronSchedule, DEFAULT_RETRY_BACKOFF, Every, OverlapWord, PolicyError, PolicyKeys,
    Timing, TimingError, Tz,
};
use syn::meta::ParseNestedMeta;
use syn::parse::Parser;
use syn::punctuated::Punctuated;
use syn::{Error, Expr, ExprLit, Lit, LitStr, Result, Token, Type};

use literals::{duration, key, once, string};
use policy::CatchUpKey;
/// The policies the keys set: `scheduler_spec`'s, the ones a dynamic schedule's
/// policy text sets.
pub(crate) use scheduler_spec::{
    CatchUpSpec as CatchUp, OverlapSpec as Overlap, PolicySpec as Policy,
};
use spelling::unknown_key;

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
    overlap: Option<Given<OverlapWord>>,
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
        // The rules the policy keys keep together: `scheduler_spec`'s, each error on
        // the key (or value) it concerns.
        let keys = PolicyKeys {
            catch_up: match catch_up_key {
                Some(CatchUpKey::Policy(word)) => Some(word),
                None | Some(CatchUpKey::Window(_)) => None,
            },
            catch_up_max: self.catch_up_max.as_ref().map(|max| max.value),
            overlap: self.overlap.as_ref().map(|overlap| overlap.value),
            max_concurrent: self.max_concurrent.as_ref().map(|max| max.value),
            retry: self.retry.as_ref().map(|retry| retry.value),
            retry_backoff: self.retry_backoff.as_ref().map(|backoff| backoff.value),
            timeout: self.timeout.as_ref().map(|timeout| timeout.value),
        };
        let policy = keys.resolve().map_err(|cause| {
            let at = match cause {
                PolicyError::CatchUpMaxWithoutAll => key_at(&self.catch_up_max),
                PolicyError::BackoffWithoutRetry => key_at(&self.retry_backoff),
                PolicyError::ZeroMaxConcurrent => value_at(&self.max_concurrent),
                PolicyError::ConcurrentWithoutMax => key_at(&self.overlap),
                PolicyError::MaxConcurrentWithoutConcurrent => key_at(&self.max_concurrent),
                _ => None,
            };
            Error::new(at.unwrap_or_else(Span::call_site), cause)
        })?;
        let jitter = self.jitter.as_ref().map(|j| j.value);

        // The rules `build()` applies, on the same settings.
        let timing = Timing {
            period,
            jitter: jitter.unwrap_or_default(),
            window: window.map(|(window, _)| window),
            ..policy.timing()
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

/// Where a key was written, if it was given.
fn key_at<T>(given: &Option<Given<T>>) -> Option<Span> {
    given.as_ref().map(|given| given.key)
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

#[cfg(test)]
mod tests;
