//! The examples are the files beside this crate (`cargo run --example NAME`), each
//! on public crates only, to copy. This library only hosts the README's doctests.

/// The README's code blocks, compiled as doctests so the README stays true to the code.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
struct ReadmeDoctests;
