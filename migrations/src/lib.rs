//! The scheduler's database schema, as sea-orm migrations.
//!
//! The lease table's name is configurable ([`TableName`], optionally
//! schema-qualified) so two apps can share one database, so the migrations are
//! values built for a table rather than unit structs. The store crates run them
//! (under an advisory lock, so many instances starting at once apply each one once)
//! and record them in a bookkeeping table named after the lease table.

use std::fmt;

use sea_orm_migration::prelude::*;

/// A validated, possibly schema-qualified table name: `leases` or `app_a.leases`.
///
/// Each part is 1 to 63 characters of lowercase ASCII letters, digits and `_`, not
/// starting with a digit, so it never needs escaping beyond quotes and can never
/// carry SQL.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TableName {
    schema: Option<String>,
    table: String,
}

/// Why a table name was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidTableName {
    /// The refused name.
    pub name: String,
    /// Why.
    pub reason: &'static str,
}

impl fmt::Display for InvalidTableName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid table name {:?}: {}", self.name, self.reason)
    }
}

impl std::error::Error for InvalidTableName {}

impl TableName {
    /// The default lease table: `scheduler_leases` in the connection's search path.
    pub const DEFAULT: &'static str = "scheduler_leases";

    /// Parses `table` or `schema.table`.
    ///
    /// # Errors
    /// [`InvalidTableName`] if a part is empty, longer than 63 characters, or uses
    /// anything but lowercase ASCII letters, digits and `_` (not leading with a digit).
    pub fn new(name: &str) -> Result<Self, InvalidTableName> {
        let fail = |reason| InvalidTableName {
            name: name.to_owned(),
            reason,
        };
        let mut parts = name.split('.');
        let first = parts.next().unwrap_or_default();
        let second = parts.next();
        if parts.next().is_some() {
            return Err(fail("use `table` or `schema.table`, with at most one dot"));
        }
        for part in std::iter::once(first).chain(second) {
            check_ident(part).map_err(fail)?;
        }
        // The bookkeeping table appends `_migrations`: keep room for it.
        let table = second.unwrap_or(first);
        if table.len() > 63 - "_migrations".len() {
            return Err(fail("the table part must be at most 52 characters long"));
        }
        Ok(match second {
            Some(table) => Self {
                schema: Some(first.to_owned()),
                table: table.to_owned(),
            },
            None => Self {
                schema: None,
                table: first.to_owned(),
            },
        })
    }

    /// The schema, if the name is qualified.
    pub fn schema(&self) -> Option<&str> {
        self.schema.as_deref()
    }

    /// The unqualified table name.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// The quoted, qualified name, ready to splice into SQL: `"app_a"."leases"`.
    pub fn quoted(&self) -> String {
        self.quoted_with_suffix("")
    }

    /// The quoted name of the migrations bookkeeping table: `"app_a"."leases_migrations"`.
    pub fn migrations_table(&self) -> String {
        self.quoted_with_suffix("_migrations")
    }

    fn quoted_with_suffix(&self, suffix: &str) -> String {
        match &self.schema {
            Some(schema) => format!("\"{schema}\".\"{}{suffix}\"", self.table),
            None => format!("\"{}{suffix}\"", self.table),
        }
    }
}

impl Default for TableName {
    fn default() -> Self {
        Self {
            schema: None,
            table: Self::DEFAULT.to_owned(),
        }
    }
}

impl fmt::Display for TableName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.schema {
            Some(schema) => write!(f, "{schema}.{}", self.table),
            None => f.write_str(&self.table),
        }
    }
}

impl std::str::FromStr for TableName {
    type Err = InvalidTableName;
    fn from_str(s: &str) -> Result<Self, InvalidTableName> {
        Self::new(s)
    }
}

fn check_ident(part: &str) -> Result<(), &'static str> {
    let mut chars = part.chars();
    match chars.next() {
        None => Err("a name part must not be empty"),
        _ if part.len() > 63 => Err("a name part must be at most 63 characters long"),
        Some(c) if !(c.is_ascii_lowercase() || c == '_') => {
            Err("a name part must start with a lowercase letter or `_`")
        }
        _ if !chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_') => {
            Err("a name part may only use lowercase letters, digits and `_`")
        }
        _ => Ok(()),
    }
}

/// The migrations for the lease table `table`, oldest first.
pub fn migrations(table: &TableName) -> Vec<Box<dyn MigrationTrait>> {
    vec![Box::new(CreateLeases {
        table: table.clone(),
    })]
}

/// Creates the lease table.
///
/// One row per lease name, kept forever (release expires the row in place rather than
/// deleting it, so the last tick stays recorded and the fencing token keeps growing).
/// `fillfactor = 50` leaves room in each page so renewals and releases stay HOT
/// updates and leave almost no dead index entries behind.
#[derive(Debug)]
struct CreateLeases {
    table: TableName,
}

impl MigrationName for CreateLeases {
    fn name(&self) -> &str {
        "m20261130_000001_create_leases"
    }
}

#[async_trait::async_trait]
impl MigrationTrait for CreateLeases {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let db = manager.get_connection();
        if let Some(schema) = self.table.schema() {
            // PostgreSQL checks `CREATE SCHEMA IF NOT EXISTS` against CREATE on the
            // database before it looks for the schema: asking only when the schema is
            // missing lets a user with CREATE on an existing schema alone migrate.
            let found = db
                .query_one_raw(sea_orm::Statement::from_sql_and_values(
                    manager.get_database_backend(),
                    "SELECT to_regnamespace($1) IS NOT NULL AS found",
                    [format!("\"{schema}\"").into()],
                ))
                .await?
                .map(|row| row.try_get::<bool>("", "found"))
                .transpose()?;
            if found != Some(true) {
                db.execute_unprepared(&format!("CREATE SCHEMA IF NOT EXISTS \"{schema}\""))
                    .await?;
            }
        }
        let t = self.table.quoted();
        let constraint = format!("\"{}_token_positive\"", self.table.table());
        db.execute_unprepared(&format!(
            "CREATE TABLE {t} (
                name        text        PRIMARY KEY,
                holder      text        NOT NULL,
                tick        timestamptz NOT NULL,
                token       bigint      NOT NULL,
                taken_at    timestamptz NOT NULL DEFAULT now(),
                expires_at  timestamptz NOT NULL,
                released_at timestamptz,
                CONSTRAINT {constraint} CHECK (token > 0)
            ) WITH (fillfactor = 50)"
        ))
        .await?;
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let t = self.table.quoted();
        manager
            .get_connection()
            .execute_unprepared(&format!("DROP TABLE IF EXISTS {t}"))
            .await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_names_are_plain_identifiers() {
        assert_eq!(TableName::default().quoted(), "\"scheduler_leases\"");
        let qualified = TableName::new("app_a.leases");
        assert_eq!(
            qualified.as_ref().map(TableName::quoted).ok().as_deref(),
            Some("\"app_a\".\"leases\"")
        );
        assert_eq!(
            qualified.map(|t| t.migrations_table()).ok().as_deref(),
            Some("\"app_a\".\"leases_migrations\"")
        );
        for bad in [
            "",
            "a.b.c",
            "Leases",
            "1leases",
            "lea\"ses",
            "x; DROP TABLE y",
            ".leases",
            "a.",
        ] {
            assert!(TableName::new(bad).is_err(), "{bad:?} was accepted");
        }
        assert!(TableName::new(&"a".repeat(53)).is_err());
        assert!(TableName::new(&"a".repeat(52)).is_ok());
    }
}
