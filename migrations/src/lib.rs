//! The scheduler's database schema, in one place: every table's DDL for PostgreSQL
//! ([`postgres`]) and SQLite ([`sqlite`]), the [`MIGRATIONS`] of the lease table, and
//! the migrations' lock ([`postgres::LOCK`]).
//!
//! The lease table's name is configurable ([`TableName`], optionally
//! schema-qualified) so two apps can share one database, so every statement is built
//! for a table. The store crates run them, each with its own driver: under an
//! advisory lock on PostgreSQL, in a `BEGIN IMMEDIATE` transaction on SQLite, so many
//! instances starting at once apply each migration once. Each store records the
//! migrations it applied by name in a bookkeeping table named after the lease table
//! (`<table>_migrations`).
//!
//! This crate has no dependencies: it only builds SQL text.
//!
//! # Quick start
//!
//! The PostgreSQL schema of the lease table `app_a.leases`, for a review or a
//! database administrator who applies it by hand:
//!
//! ```
//! use scheduler_migrations::{MIGRATIONS, TableName, postgres};
//!
//! let table = TableName::new("app_a.leases")?;
//! let mut script = Vec::new();
//! script.extend(postgres::create_schema(&table));
//! script.push(postgres::create_bookkeeping(&table));
//! for migration in MIGRATIONS {
//!     script.extend(migration.postgres(&table));
//! }
//! assert!(script.iter().any(|sql| sql.starts_with("CREATE TABLE \"app_a\".\"leases\"")));
//! # Ok::<(), scheduler_migrations::InvalidTableName>(())
//! ```
#![deny(missing_docs)]
#![warn(missing_debug_implementations, unreachable_pub)]

pub mod postgres;
pub mod sqlite;
mod table;

pub use table::{HistoryTable, InvalidTableName, TableName};

/// The outcomes of a run that failed, as the run history stores them (the words of
/// `scheduler_core::RunQuery::FAILED`): what the history's index of failed runs
/// holds, and what a read of the failed runs matches.
pub const FAILED_OUTCOMES: &[&str] = &["failed", "cancelled", "timed_out", "lease_lost"];

/// The condition on a history row that its run failed ([`FAILED_OUTCOMES`]), the
/// very text of the partial index's predicate (a query must repeat it for the
/// index to serve it): `outcome IN ('failed', 'cancelled', 'timed_out', 'lease_lost')`.
pub fn failed_run() -> String {
    let words: Vec<String> = FAILED_OUTCOMES.iter().map(|w| format!("'{w}'")).collect();
    format!("outcome IN ({})", words.join(", "))
}

/// One step of the lease table's schema, in both dialects.
///
/// A store applies a migration's statements for its dialect, then records
/// [`name`](Self::name) in its bookkeeping table; a migration recorded there is never
/// applied again. Both dialects share the name, so a migration cannot be added for
/// one and forgotten for the other.
#[derive(Debug)]
pub struct Migration {
    name: &'static str,
    postgres: fn(&TableName) -> Vec<String>,
    sqlite: fn(&TableName) -> Vec<String>,
    repeats_on_postgres: bool,
}

impl Migration {
    /// The name recorded in the bookkeeping table once the migration is applied.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The PostgreSQL statements of this migration for the lease table `table`,
    /// to run in order in one transaction.
    pub fn postgres(&self, table: &TableName) -> Vec<String> {
        (self.postgres)(table)
    }

    /// Whether its PostgreSQL statements leave what exists alone and are run again,
    /// though recorded, after an earlier migration is applied: that one may have
    /// created again a table this one altered (a table dropped by hand, repaired by
    /// deleting its migration's bookkeeping row and migrating again).
    pub fn repeats_on_postgres(&self) -> bool {
        self.repeats_on_postgres
    }

    /// The SQLite statements of this migration for the lease table `table`, to run
    /// in order in one transaction.
    pub fn sqlite(&self, table: &TableName) -> Vec<String> {
        (self.sqlite)(table)
    }
}

/// The lease table's columns added after its first migration, each with the
/// migration that adds it: what a store opened without migrations checks for, since
/// its statements use them (renewals read `cancel_tick`).
pub const ADDED_COLUMNS: &[(&str, &str)] = &[("cancel_tick", "m20261201_000002_cancel_requests")];

/// The dynamic schedules table's (`<table>_schedules`) columns added after the
/// migration that created it, each with the migration that adds it: puts write
/// `next_tick`, and instances that load schedules as they come due read it.
pub const ADDED_SCHEDULE_COLUMNS: &[(&str, &str)] = &[("next_tick", "m20261205_000007_next_tick")];

/// Of [`ADDED_COLUMNS`], those the lease table with columns `present` lacks: the
/// first missing column's migration and every missing column's name, or `None`
/// when nothing is missing. An empty `present` (no table) lacks nothing here: the
/// statements report a missing table themselves.
pub fn missing_columns(present: &[String]) -> Option<(&'static str, Vec<&'static str>)> {
    missing_of(ADDED_COLUMNS, present)
}

/// Of [`ADDED_SCHEDULE_COLUMNS`], those the schedules table with columns `present`
/// lacks, as [`missing_columns`] says it of the lease table.
pub fn missing_schedule_columns(present: &[String]) -> Option<(&'static str, Vec<&'static str>)> {
    missing_of(ADDED_SCHEDULE_COLUMNS, present)
}

fn missing_of(
    added: &'static [(&'static str, &'static str)],
    present: &[String],
) -> Option<(&'static str, Vec<&'static str>)> {
    if present.is_empty() {
        return None;
    }
    let missing: Vec<&(&str, &str)> = added
        .iter()
        .filter(|(column, _)| !present.iter().any(|c| c == column))
        .collect();
    let (_, migration) = missing.first()?;
    Some((
        migration,
        missing.iter().map(|(column, _)| *column).collect(),
    ))
}

/// The tables added next to the lease table after its first migration, as suffixes
/// of its name (`_controls`: `scheduler_leases_controls`), each with the migration
/// that creates it: what a store opened without migrations checks for, since its
/// statements use them (every take reads `_controls`).
pub const ADDED_TABLES: &[(&str, &str)] = &[
    ("_controls", "m20261202_000003_controls"),
    ("_audit", "m20261202_000003_controls"),
    ("_triggers", "m20261202_000003_controls"),
    ("_schedules", "m20261202_000003_controls"),
    ("_handlers", "m20261202_000003_controls"),
    ("_version", "m20261202_000003_controls"),
    ("_jobs", "m20261204_000004_jobs"),
    ("_instances", "m20261204_000005_instances"),
];

/// Of [`ADDED_TABLES`], those missing beside the lease table `table`, given the
/// unqualified names of the tables `present` in its schema: the first missing
/// table's migration and every missing table's name, or `None` when nothing is
/// missing. Without the lease table itself among `present`, nothing is missing here:
/// the statements report a missing table themselves.
pub fn missing_tables(
    table: &TableName,
    present: &[String],
) -> Option<(&'static str, Vec<String>)> {
    if !present.iter().any(|t| t == table.table()) {
        return None;
    }
    let missing: Vec<(String, &'static str)> = ADDED_TABLES
        .iter()
        .map(|(suffix, migration)| (format!("{}{suffix}", table.table()), *migration))
        .filter(|(name, _)| !present.contains(name))
        .collect();
    let (_, migration) = missing.first()?;
    Some((
        migration,
        missing.into_iter().map(|(name, _)| name).collect(),
    ))
}

/// Every migration of the lease table, oldest first.
///
/// Databases record these names: never rename, reorder or change an applied
/// migration; append a new one instead.
pub const MIGRATIONS: &[Migration] = &[
    Migration {
        name: "m20261130_000001_create_leases",
        postgres: postgres::create_leases,
        sqlite: sqlite::create_leases,
        repeats_on_postgres: false,
    },
    Migration {
        name: "m20261201_000002_cancel_requests",
        postgres: postgres::add_cancel_tick,
        sqlite: sqlite::add_cancel_tick,
        repeats_on_postgres: false,
    },
    Migration {
        name: "m20261202_000003_controls",
        postgres: postgres::create_controls,
        sqlite: sqlite::create_controls,
        repeats_on_postgres: false,
    },
    Migration {
        name: "m20261204_000004_jobs",
        postgres: postgres::create_jobs,
        sqlite: sqlite::create_jobs,
        repeats_on_postgres: false,
    },
    Migration {
        name: "m20261204_000005_instances",
        postgres: postgres::create_instances,
        sqlite: sqlite::create_instances,
        repeats_on_postgres: false,
    },
    Migration {
        name: "m20261205_000006_schedule_indexes",
        postgres: postgres::index_schedules,
        sqlite: sqlite::index_schedules,
        repeats_on_postgres: true,
    },
    Migration {
        name: "m20261205_000007_next_tick",
        postgres: postgres::add_next_tick,
        sqlite: sqlite::add_next_tick,
        repeats_on_postgres: true,
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migration_names_are_the_ones_databases_recorded() {
        let names: Vec<&str> = MIGRATIONS.iter().map(Migration::name).collect();
        // Existing databases hold these names in their bookkeeping tables: changing
        // one would apply its migration again.
        assert_eq!(
            names[..3],
            [
                "m20261130_000001_create_leases",
                "m20261201_000002_cancel_requests",
                "m20261202_000003_controls"
            ]
        );
        // Oldest first, each once.
        assert!(names.windows(2).all(|w| w[0] < w[1]), "{names:?}");
    }

    /// Each of `added` names a migration whose statements, in both dialects, name
    /// its column.
    fn each_names_its_migration(added: &[(&str, &str)]) {
        let table = TableName::default();
        for (column, name) in added {
            let migration = MIGRATIONS
                .iter()
                .find(|m| m.name == *name)
                .unwrap_or_else(|| panic!("{name}"));
            assert!(
                migration
                    .postgres(&table)
                    .iter()
                    .any(|s| s.contains(column))
            );
            assert!(migration.sqlite(&table).iter().any(|s| s.contains(column)));
        }
    }

    #[test]
    fn every_added_column_names_a_migration_that_adds_it() {
        each_names_its_migration(ADDED_COLUMNS);
    }

    #[test]
    fn every_added_schedule_column_names_a_migration_that_adds_it() {
        each_names_its_migration(ADDED_SCHEDULE_COLUMNS);
        let old = vec!["name".to_owned(), "handler".to_owned()];
        assert_eq!(
            missing_schedule_columns(&old),
            Some(("m20261205_000007_next_tick", vec!["next_tick"]))
        );
        assert_eq!(missing_schedule_columns(&[]), None, "no table");
    }

    #[test]
    fn every_added_table_names_a_migration_that_creates_it() {
        let table = TableName::default();
        for (suffix, name) in ADDED_TABLES {
            let migration = MIGRATIONS
                .iter()
                .find(|m| m.name == *name)
                .unwrap_or_else(|| panic!("{name}"));
            let created = format!("\"{}{suffix}\" (", table.table());
            let creates = |s: &String| s.starts_with("CREATE TABLE") && s.contains(&created);
            assert!(migration.postgres(&table).iter().any(creates), "{suffix}");
            assert!(migration.sqlite(&table).iter().any(creates), "{suffix}");
        }
    }

    #[test]
    fn missing_tables_name_their_migration() {
        let table = TableName::default();
        let all: Vec<String> = std::iter::once(table.table().to_owned())
            .chain(
                ADDED_TABLES
                    .iter()
                    .map(|(suffix, _)| format!("{}{suffix}", table.table())),
            )
            .collect();
        assert_eq!(missing_tables(&table, &all), None);
        assert_eq!(missing_tables(&table, &[]), None, "no lease table");
        let (migration, names) =
            missing_tables(&table, &all[..1]).unwrap_or_else(|| panic!("missing"));
        assert_eq!(migration, "m20261202_000003_controls");
        assert_eq!(names.len(), ADDED_TABLES.len());
        assert!(names.contains(&"scheduler_leases_version".to_owned()));
    }

    #[test]
    fn every_migration_has_statements_in_both_dialects() {
        let table = TableName::default();
        for migration in MIGRATIONS {
            assert!(!migration.postgres(&table).is_empty(), "{}", migration.name);
            assert!(!migration.sqlite(&table).is_empty(), "{}", migration.name);
        }
    }
}
