//! The arguments of `#[job(...)]`: one setter per key, each checking its value where
//! it is written; a key given twice is refused, and so are keys that contradict each
//! other.
//!
//! The values are checked by `scheduler_spec`, the rules `scheduler_core` applies
//! when a scheduler is built: what compiles here is accepted there.

use std::time::Duration;

use chrono::Utc;
use proc_macro2::{Span, TokenStream};
use scheduler_spec::{CronExpr, CronSchedule, Every, Tz};
use syn::meta::ParseNestedMeta;
use syn::parse::Parser;
use syn::punctuated::Punctuated;
use syn::spanned::Spanned;
use syn::{Error, Expr, ExprLit, Lit, LitStr, Result, Token, Type};

/// The keys `#[job]` accepts, in the order the docs list them.
const KEYS: [&str; 9] = [
    "every", "cron", "tz", "scope", "name", "fencing", "jitter", "catch_up", "state",
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
    pub(crate) catch_up: Option<Duration>,
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

/// A value and where its key was written.
#[derive(Debug)]
struct Given<T> {
    key: Span,
    value: T,
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
    catch_up: Option<Given<Duration>>,
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
        self.every = Some(Given {
            key: key(meta),
            value: period,
        });
        Ok(())
    }

    fn cron(&mut self, meta: &ParseNestedMeta<'_>) -> Result<()> {
        once(&self.cron, meta, "cron")?;
        if self.every.is_some() {
            return Err(meta.error(ONE_SCHEDULE));
        }
        let lit = string(meta, "cron", r#""0 */15 * * * *""#)?;
        let expr = CronExpr::parse(&lit.value()).map_err(|e| Error::new(lit.span(), e))?;
        self.cron = Some(Given {
            key: key(meta),
            value: Cron { expr, lit },
        });
        Ok(())
    }

    fn tz(&mut self, meta: &ParseNestedMeta<'_>) -> Result<()> {
        once(&self.tz, meta, "tz")?;
        let lit = string(meta, "tz", r#""Europe/Berlin""#)?;
        let name = lit.value();
        let tz = scheduler_spec::parse_time_zone(&name).map_err(|e| Error::new(lit.span(), e))?;
        self.tz = Some(Given {
            key: key(meta),
            value: Zone { tz, name },
        });
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
        self.scope = Some(Given {
            key: key(meta),
            value: scope,
        });
        Ok(())
    }

    fn name(&mut self, meta: &ParseNestedMeta<'_>) -> Result<()> {
        once(&self.name, meta, "name")?;
        let lit = string(meta, "name", r#""nightly-sweep""#)?;
        let name = lit.value();
        scheduler_spec::check_name(&name).map_err(|reason| {
            Error::new(lit.span(), format!("invalid job name {name:?}: {reason}"))
        })?;
        self.name = Some(Given {
            key: key(meta),
            value: name,
        });
        Ok(())
    }

    fn fencing(&mut self, meta: &ParseNestedMeta<'_>) -> Result<()> {
        once(&self.fencing, meta, "fencing")?;
        let value = if meta.input.peek(Token![=]) {
            match meta.value()?.parse::<Expr>()? {
                Expr::Lit(ExprLit {
                    lit: Lit::Bool(b),
                    attrs,
                }) if attrs.is_empty() => b.value,
                other => {
                    let msg = "`fencing` stands alone or takes `true` or `false`: `fencing` or `fencing = false`";
                    return Err(Error::new_spanned(other, msg));
                }
            }
        } else if meta.input.is_empty() || meta.input.peek(Token![,]) {
            true
        } else {
            return Err(meta.error(
                "`fencing` stands alone or takes `true` or `false`: `fencing` or `fencing = false`",
            ));
        };
        self.fencing = Some(Given {
            key: key(meta),
            value,
        });
        Ok(())
    }

    fn jitter(&mut self, meta: &ParseNestedMeta<'_>) -> Result<()> {
        once(&self.jitter, meta, "jitter")?;
        let lit = string(meta, "jitter", r#""5s""#)?;
        let jitter = duration(&lit)?;
        self.jitter = Some(Given {
            key: key(meta),
            value: jitter,
        });
        Ok(())
    }

    fn catch_up(&mut self, meta: &ParseNestedMeta<'_>) -> Result<()> {
        once(&self.catch_up, meta, "catch_up")?;
        let lit = string(meta, "catch_up", r#""1m""#)?;
        let window = duration(&lit)?;
        self.catch_up = Some(Given {
            key: key(meta),
            value: window,
        });
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
        self.state = Some(Given {
            key: key(meta),
            value: types.into_iter().collect(),
        });
        Ok(())
    }

    /// Checks what only the keys together can tell.
    fn finish(self) -> Result<Args> {
        let schedule = match (self.every, self.cron) {
            (Some(every), None) => {
                if let Some(tz) = self.tz {
                    let msg = "`tz` only applies to `cron`: an `every` schedule ticks at instants, not on a wall clock; remove `tz`";
                    return Err(Error::new(tz.key, msg));
                }
                Schedule::Every(every.value)
            }
            (None, Some(cron)) => {
                let Cron { expr, lit } = cron.value;
                let zone = self.tz.map(|tz| tz.value);
                // Whether it fires at all, by the same search as `build()`: from now,
                // so an expression whose years are all past is refused here too.
                let tz = zone.as_ref().map_or(Tz::UTC, |zone| zone.tz);
                let schedule = CronSchedule::new(expr, tz);
                schedule
                    .check_fires_after(Utc::now())
                    .map_err(|e| Error::new(lit.span(), e))?;
                Schedule::Cron {
                    expr: lit.value(),
                    tz: zone.map(|zone| zone.name),
                }
            }
            // The setters refuse this already; kept for completeness.
            (Some(_), Some(cron)) => return Err(Error::new(cron.key, ONE_SCHEDULE)),
            (None, None) => {
                let msg = r#"missing schedule; add `every = "30s"` or `cron = "0 */15 * * * *"` (sec min hour day month weekday)"#;
                return Err(Error::new(Span::call_site(), msg));
            }
        };
        Ok(Args {
            schedule,
            scope: self.scope.map(|s| s.value),
            name: self.name.map(|n| n.value),
            fencing: self.fencing.map(|f| f.value),
            jitter: self.jitter.map(|j| j.value),
            catch_up: self.catch_up.map(|c| c.value),
            state: self.state.map(|s| s.value).unwrap_or_default(),
        })
    }
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

/// The duration a string literal holds.
fn duration(lit: &LitStr) -> Result<Duration> {
    scheduler_spec::parse_duration(&lit.value()).map_err(|e| Error::new(lit.span(), e))
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
    let guess = KEYS
        .iter()
        .map(|k| (edit_distance(k, &written), k))
        .filter(|(d, k)| *d <= 2 && *d < k.len())
        .min();
    let valid = KEYS.join(", ");
    let msg = match guess {
        Some((_, k)) => format!("unknown key `{written}`; did you mean `{k}`? valid keys: {valid}"),
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
    }

    #[test]
    fn mistakes_are_named() {
        let cases = [
            (
                quote!(evry = "30s"),
                "unknown key `evry`; did you mean `every`? valid keys: every, cron, tz, scope, name, fencing, jitter, catch_up, state",
            ),
            (
                quote!(every = "30s", schedule = "x"),
                "unknown key `schedule`; valid keys: every, cron, tz, scope, name, fencing, jitter, catch_up, state",
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
        ];
        for (tokens, want) in cases {
            assert_eq!(parse(tokens).err().as_deref(), Some(want));
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
