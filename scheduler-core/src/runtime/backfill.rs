//! Backfill: every tick of a past range of a job, once across the cluster.
