//! `keyed_chunks.rs` through PgBouncer in transaction pooling mode, with a server of its
//! own (see `pgbouncer.rs`).

#[path = "keyed_chunks.rs"]
mod keyed_chunks;
