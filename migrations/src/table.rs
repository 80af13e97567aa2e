//! Table names: [`TableName`], the lease table (validated once, so it can be spliced
//! into SQL), and the names derived from it.

use std::fmt;

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

    /// The quoted name of a table that belongs to this lease table, named after it
    /// with `suffix` (`"_controls"`: `"app_a"."leases_controls"`). `suffix` is a
    /// literal of this crate, never input.
    pub fn with_suffix(&self, suffix: &'static str) -> String {
        self.quoted_with_suffix(suffix)
    }

    /// The quoted name of an index of the table `table_suffix`, named after the lease
    /// table (`"leases_audit_job"`; an index lives in its table's schema).
    pub fn index_name(&self, table_suffix: &'static str, index_suffix: &'static str) -> String {
        format!("\"{}{table_suffix}{index_suffix}\"", self.table)
    }

    fn quoted_with_suffix(&self, suffix: &str) -> String {
        quoted(self.schema.as_deref(), &self.table, suffix)
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

/// The name of the run history table of a lease table: the lease table's name with
/// `_runs` appended, in the same schema.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct HistoryTable {
    schema: Option<String>,
    table: String,
}

impl HistoryTable {
    /// The history table of the lease table `leases`.
    pub fn for_leases(leases: &TableName) -> Self {
        Self {
            schema: leases.schema().map(str::to_owned),
            // At most 52 + 5 characters: within PostgreSQL's 63.
            table: format!("{}_runs", leases.table()),
        }
    }

    /// The unqualified table name.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// The quoted, qualified name, ready to splice into SQL (its parts are plain
    /// identifiers, as [`TableName`] guarantees).
    pub fn quoted(&self) -> String {
        quoted(self.schema.as_deref(), &self.table, "")
    }

    /// The quoted name of one of the table's indexes, `suffix` appended to the
    /// table's name (at most 6 characters, to stay within 63). Unqualified: an index
    /// lives in its table's schema.
    pub(crate) fn index(&self, suffix: &str) -> String {
        quoted(None, &self.table, suffix)
    }

    /// The quoted, qualified name of the history's newest index (the failed runs'):
    /// a table without it is brought up to date by creating its indexes again.
    pub fn newest_index(&self) -> String {
        quoted(self.schema.as_deref(), &self.table, "_fail")
    }

    /// The unquoted, unqualified name of [`newest_index`](Self::newest_index) (what
    /// SQLite's `sqlite_master` holds).
    pub fn newest_index_name(&self) -> String {
        format!("{}_fail", self.table)
    }
}

impl fmt::Display for HistoryTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.schema {
            Some(schema) => write!(f, "{schema}.{}", self.table),
            None => f.write_str(&self.table),
        }
    }
}

/// `"schema"."table<suffix>"`, or `"table<suffix>"` without a schema.
fn quoted(schema: Option<&str>, table: &str, suffix: &str) -> String {
    match schema {
        Some(schema) => format!("\"{schema}\".\"{table}{suffix}\""),
        None => format!("\"{table}{suffix}\""),
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

    #[test]
    fn history_tables_are_named_after_the_lease_table() {
        let plain = HistoryTable::for_leases(&TableName::default());
        assert_eq!(plain.quoted(), "\"scheduler_leases_runs\"");
        assert_eq!(plain.to_string(), "scheduler_leases_runs");
        let qualified = TableName::new("app_a.leases").map(|t| HistoryTable::for_leases(&t));
        assert_eq!(
            qualified.as_ref().map(HistoryTable::quoted).ok().as_deref(),
            Some("\"app_a\".\"leases_runs\"")
        );
        // The longest lease table still gives identifiers within 63 characters.
        let long = TableName::new(&"a".repeat(52)).map(|t| HistoryTable::for_leases(&t));
        let long = long.as_ref().map(|t| t.index("_time")).unwrap_or_default();
        assert!(long.len() - 2 <= 63, "{long}");
    }
}
