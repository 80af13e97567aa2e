// Doc-only modules, as `clap::_tutorial` is: each chapter is a markdown file in
// `_guide/`, its Rust examples compiled (and run, unless they need a server) as
// doctests of this crate.
#![doc = include_str!("_guide/index.md")]

#[doc = include_str!("_guide/jobs.md")]
pub mod jobs {}

#[doc = include_str!("_guide/policies.md")]
pub mod policies {}

#[doc = include_str!("_guide/controls.md")]
pub mod controls {}

#[doc = include_str!("_guide/dashboard.md")]
pub mod dashboard {}

#[doc = include_str!("_guide/postgres.md")]
pub mod postgres {}

#[doc = include_str!("_guide/keyed.md")]
pub mod keyed {}

#[doc = include_str!("_guide/metrics.md")]
pub mod metrics {}

#[doc = include_str!("_guide/history.md")]
pub mod history {}

#[doc = include_str!("_guide/cli.md")]
pub mod cli {}

#[doc = include_str!("_guide/guarantees.md")]
pub mod guarantees {}

#[doc = include_str!("_guide/contributing.md")]
pub mod contributing {}
