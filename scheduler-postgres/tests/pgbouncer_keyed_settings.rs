//! `keyed_settings.rs` through PgBouncer in transaction pooling mode, with a server of its
//! own (see `pgbouncer.rs`).

// `test_postgres` in the included file means `test_postgres::through_pgbouncer`.
extern crate self as test_postgres;
extern crate test_postgres as harness;
use harness::through_pgbouncer::*;

#[path = "keyed_settings.rs"]
mod keyed_settings;
