//! Shared bits of the examples.
