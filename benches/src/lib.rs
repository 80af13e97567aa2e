//! Shared set-up of the benchmarks.
