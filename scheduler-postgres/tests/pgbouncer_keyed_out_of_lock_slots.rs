//! `keyed_out_of_lock_slots.rs` through PgBouncer in transaction pooling mode, with a server of its
//! own (see `pgbouncer.rs`).

#[path = "keyed_out_of_lock_slots.rs"]
mod keyed_out_of_lock_slots;
