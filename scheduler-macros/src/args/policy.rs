//! The policy keys (`catch_up`, `catch_up_window`, `catch_up_max`, `overlap`,
//! `max_concurrent`, `retry`, `retry_backoff`, `timeout`): reading each where it is
//! written. The words they take and the rules they keep together are
//! `scheduler_spec`'s ([`PolicyKeys`](scheduler_spec::PolicyKeys)), the ones a
//! dynamic schedule's policy text keeps.

use std::time::Duration;

use scheduler_spec::{CatchUpWord, OverlapWord, did_you_mean};
use syn::Result;
use syn::meta::ParseNestedMeta;

use super::literals::{duration, once, string, whole_number, word};
use super::{Setters, given};

/// What `catch_up` says: the window, or a policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum CatchUpKey {
    Window(Duration),
    Policy(CatchUpWord),
}

impl Setters {
    /// A duration (the window) or a policy word: a word is letters and underscores,
    /// so `"5"` and `"1.5s"` are reported as durations.
    pub(super) fn catch_up(&mut self, meta: &ParseNestedMeta<'_>) -> Result<()> {
        once(&self.catch_up, meta, "catch_up")?;
        let lit = string(meta, "catch_up", r#""latest""#)?;
        let value = lit.value();
        let is_word =
            !value.is_empty() && value.chars().all(|c| c.is_ascii_alphabetic() || c == '_');
        let catch_up = if is_word {
            let policy = word(&lit, &CatchUpWord::WORDS, |written, guess| {
                format!(
                    r#"unknown catch-up policy {written:?}; {}use "skip", "latest" or "all", or a duration for the window, like "1m""#,
                    did_you_mean(guess)
                )
            })?;
            CatchUpKey::Policy(policy)
        } else {
            CatchUpKey::Window(duration(&lit)?)
        };
        self.catch_up = given(meta, catch_up, lit.span());
        Ok(())
    }

    pub(super) fn catch_up_window(&mut self, meta: &ParseNestedMeta<'_>) -> Result<()> {
        once(&self.catch_up_window, meta, "catch_up_window")?;
        let lit = string(meta, "catch_up_window", r#""10m""#)?;
        self.catch_up_window = given(meta, duration(&lit)?, lit.span());
        Ok(())
    }

    pub(super) fn catch_up_max(&mut self, meta: &ParseNestedMeta<'_>) -> Result<()> {
        once(&self.catch_up_max, meta, "catch_up_max")?;
        let usage = "`catch_up_max` takes how many missed ticks `catch_up = \"all\"` runs at most, like `catch_up_max = 3`";
        let (max, at) = whole_number(meta, "catch_up_max", usage)?;
        self.catch_up_max = given(meta, max, at);
        Ok(())
    }

    pub(super) fn overlap(&mut self, meta: &ParseNestedMeta<'_>) -> Result<()> {
        once(&self.overlap, meta, "overlap")?;
        let lit = string(meta, "overlap", r#""buffer_one""#)?;
        let overlap = word(&lit, &OverlapWord::WORDS, |written, guess| {
            let valid = r#"use "skip" (a tick due during a run is skipped), "buffer_one" (the latest tick due during a run waits for it to end), "cancel_running" (the newest tick cancels the run) or "concurrent" (with `max_concurrent = N`: up to N runs at once)"#;
            format!(
                "unknown overlap policy {written:?}; {}{valid}",
                did_you_mean(guess)
            )
        })?;
        self.overlap = given(meta, overlap, lit.span());
        Ok(())
    }

    pub(super) fn max_concurrent(&mut self, meta: &ParseNestedMeta<'_>) -> Result<()> {
        once(&self.max_concurrent, meta, "max_concurrent")?;
        let usage = "`max_concurrent` takes how many runs `overlap = \"concurrent\"` allows at once, like `max_concurrent = 2`";
        let (max, at) = whole_number(meta, "max_concurrent", usage)?;
        self.max_concurrent = given(meta, max, at);
        Ok(())
    }

    pub(super) fn retry(&mut self, meta: &ParseNestedMeta<'_>) -> Result<()> {
        once(&self.retry, meta, "retry")?;
        let usage = "`retry` takes how many times a failed run is retried (attempts after the first), like `retry = 3`";
        let (attempts, at) = whole_number(meta, "retry", usage)?;
        self.retry = given(meta, attempts, at);
        Ok(())
    }

    pub(super) fn retry_backoff(&mut self, meta: &ParseNestedMeta<'_>) -> Result<()> {
        once(&self.retry_backoff, meta, "retry_backoff")?;
        let lit = string(meta, "retry_backoff", r#""10s""#)?;
        self.retry_backoff = given(meta, duration(&lit)?, lit.span());
        Ok(())
    }

    pub(super) fn timeout(&mut self, meta: &ParseNestedMeta<'_>) -> Result<()> {
        once(&self.timeout, meta, "timeout")?;
        let lit = string(meta, "timeout", r#""5m""#)?;
        self.timeout = given(meta, duration(&lit)?, lit.span());
        Ok(())
    }
}
