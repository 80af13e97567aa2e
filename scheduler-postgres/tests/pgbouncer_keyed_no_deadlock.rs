//! `keyed_no_deadlock.rs` through PgBouncer in transaction pooling mode, with a server of its
//! own (see `pgbouncer.rs`).

#[path = "keyed_no_deadlock.rs"]
mod keyed_no_deadlock;
