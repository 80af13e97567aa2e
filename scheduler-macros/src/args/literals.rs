//! Reading a key's value: the literal after `key =`, checked, each error on it.

use std::time::Duration;

use proc_macro2::Span;
use scheduler_spec::closest;
use syn::meta::ParseNestedMeta;
use syn::spanned::Spanned;
use syn::{Error, Expr, ExprLit, Lit, LitInt, LitStr, Result, Token};

use super::Given;

pub(super) fn key(meta: &ParseNestedMeta<'_>) -> Span {
    meta.path.span()
}

/// Refuses a key given before.
pub(super) fn once<T>(
    slot: &Option<Given<T>>,
    meta: &ParseNestedMeta<'_>,
    key: &str,
) -> Result<()> {
    match slot {
        Some(_) => Err(meta.error(format!("`{key}` is given twice; give each key once"))),
        None => Ok(()),
    }
}

/// The string literal after `key =`.
pub(super) fn string(meta: &ParseNestedMeta<'_>, key: &str, example: &str) -> Result<LitStr> {
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
pub(super) fn whole_number(
    meta: &ParseNestedMeta<'_>,
    key: &str,
    usage: &str,
) -> Result<(u32, Span)> {
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
pub(super) fn duration(lit: &LitStr) -> Result<Duration> {
    scheduler_spec::parse_duration(&lit.value()).map_err(|e| Error::new(lit.span(), e))
}

/// Which of `words` a string literal holds; else the error `unknown` words, given
/// what was written and the closest word if one is close.
pub(super) fn word<T: Copy>(
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
