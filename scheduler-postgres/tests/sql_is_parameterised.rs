//! Values reach SQL only as bound parameters: a scan of the store's source finds
//! every SQL text built with `format!` and checks that only identifiers (and integer
//! bounds) named in an allow-list, each with its reason, are spliced into it.

use std::path::Path;

/// What may be interpolated into SQL built with `format!` in the store's source, and
/// why it is not a value. The names are trusted: what the scan proves is that no
/// other variable (a lease name, a holder, a key, a tick…) is ever formatted into SQL
/// text, so values can only reach SQL as bound parameters.
const SQL_INTERPOLATIONS: &[(&str, &str)] = &[
    (
        "t",
        "TableName::quoted() / HistoryTable::quoted(): validated identifiers",
    ),
    (
        "book",
        "TableName::migrations_table(): a validated identifier",
    ),
    (
        "schema",
        "TableName::schema(), or in a hint current_schema() quoted by ident()",
    ),
    ("table", "a TableName / HistoryTable: validated identifiers"),
    ("by_job", "HistoryTable::index(): a validated identifier"),
    ("by_time", "HistoryTable::index(): a validated identifier"),
    (
        "pre",
        "sql.rs: a SQL fragment built from literals and `{l}`/`{tick}`",
    ),
    (
        "decide",
        "sql.rs: a SQL fragment built from literals and `{l}`/`{tick}`",
    ),
    (
        "completed",
        "sql.rs: a SQL fragment built from literals, `{l}` and `{triggers}`",
    ),
    (
        "held_completed",
        "sql.rs: a SQL fragment built from literals, `{l}` and `{triggers}`",
    ),
    (
        "lock",
        "fenced.rs: one of two literals (\"\", \" FOR UPDATE\")",
    ),
    ("l", "sql.rs: a table alias literal (\"h\", \"l\")"),
    (
        "tick",
        "sql.rs: a column reference literal (\"req.tick\", \"excluded.tick\")",
    ),
    ("mine", "sql.rs: the shared CTE, built from `{t}` only"),
    (
        "req",
        "sql.rs: the take's `req` CTE, built from literals, `{controls}` and `{version}`",
    ),
    (
        "extra",
        "sql.rs: one of two literals (\"\", \", NULL::bigint\")",
    ),
    (
        "first_extra",
        "sql.rs: one of two literals (\"\", \", NULL::bigint AS version\")",
    ),
    (
        "claims",
        "sql.rs: one of two SQL fragments built from literals and `{triggers}`",
    ),
    (
        "tail",
        "sql.rs: one of two literals (\"\", the known take's version row)",
    ),
    (
        "controls",
        "sql.rs, controls_sql.rs: TableName::with_suffix(\"_controls\"), a validated identifier",
    ),
    (
        "audit",
        "controls_sql.rs: TableName::with_suffix(\"_audit\"), a validated identifier",
    ),
    (
        "triggers",
        "controls_sql.rs: TableName::with_suffix(\"_triggers\"), a validated identifier",
    ),
    (
        "schedules",
        "controls_sql.rs: TableName::with_suffix(\"_schedules\"), a validated identifier",
    ),
    (
        "handlers",
        "controls_sql.rs: TableName::with_suffix(\"_handlers\"), a validated identifier",
    ),
    (
        "jobs",
        "controls_sql.rs: TableName::with_suffix(\"_jobs\"), a validated identifier",
    ),
    (
        "version",
        "controls_sql.rs: TableName::with_suffix(\"_version\"), a validated identifier",
    ),
    (
        "instances",
        "controls_sql/instances.rs: TableName::with_suffix(\"_instances\"), a validated identifier",
    ),
    (
        "registrations",
        "controls_sql/instances.rs: the `_handlers` or `_jobs` table, TableName::with_suffix()",
    ),
    (
        "column",
        "controls_sql/instances.rs: one of two literal column names (\"handler\", \"job\")",
    ),
    (
        "channel",
        "controls_sql.rs: channel(): a validated TableName's parts (lowercase ASCII letters, \
         digits, `_`, `.`) or a hex hash, spliced as a string literal",
    ),
    (
        "notify",
        "controls_sql.rs: `pg_notify('{channel}', version::text)`, built from `{channel}` only",
    ),
    (
        "RECORD",
        "controls_sql.rs: the audit table's column list, a literal constant",
    ),
    (
        "TRIGGER",
        "controls_sql.rs: the trigger table's column list, a literal constant",
    ),
    (
        "SCHEDULE",
        "controls_sql.rs: the schedule table's column list, a literal constant",
    ),
    (
        "run_columns",
        "controls_sql.rs: the run history's column list, a literal",
    ),
    (
        "cursor",
        "controls/listing.rs: a placeholder ($1, $2, …) from Values::bind",
    ),
    (
        "pattern",
        "controls/listing.rs: a placeholder from Values::bind",
    ),
    (
        "with_two",
        "controls/listing.rs: a placeholder from Values::bind",
    ),
    (
        "with_three",
        "controls/listing.rs: a placeholder from Values::bind",
    ),
    (
        "handler_param",
        "controls/listing.rs: a placeholder from Values::bind",
    ),
    (
        "before_param",
        "controls/listing.rs: a placeholder from Values::bind",
    ),
    (
        "job_param",
        "controls/listing.rs: a placeholder from Values::bind",
    ),
    (
        "node_param",
        "controls/listing.rs: a placeholder from Values::bind",
    ),
    (
        "limit_param",
        "controls/listing.rs: a placeholder from Values::bind",
    ),
    (
        "filters",
        "controls/listing.rs: conditions built from literals and placeholders, joined by AND",
    ),
    (
        "job_rows",
        "controls/listing.rs: `($1), ($2), …`, placeholders from Values::bind",
    ),
    (
        "other_side",
        "controls/listing.rs: a condition built from a literal and a placeholder",
    ),
    (
        "other_expr",
        "controls/listing.rs: `false`, or an EXISTS built from `{table}`, `{filters}`, `{other_side}`",
    ),
    (
        "page_range",
        "controls/listing.rs: \"\", or a condition built from a literal and a placeholder",
    ),
    (
        "direction",
        "controls/listing.rs: one of two literals (\"\", \"DESC\")",
    ),
    (
        "columns",
        "controls/listing.rs: a column list, a literal constant (LEASE, SCHEDULE)",
    ),
    (
        "negation",
        "controls/listing.rs: one of two literals (\"\", \"NOT \")",
    ),
    (
        "FOLDED_NAME",
        "controls/listing.rs: a literal expression on the name column",
    ),
    (
        "RUN",
        "controls/listing.rs: the run history's column list, a literal constant",
    ),
    (
        "failed_run",
        "controls/listing.rs: scheduler_migrations::failed_run(), literal outcome words",
    ),
    ("STRIPE_LOCK_CLASS", "keyed/locks.rs: an integer constant"),
    (
        "idle_ms",
        "session.rs: an integer of milliseconds from PostgresOptions' Duration",
    ),
    (
        "self.idle_guard",
        "session.rs: the SET LOCAL statement built from `{idle_ms}` only",
    ),
    (
        "idle_guard",
        "session.rs: the same SET LOCAL statement, before it is stored",
    ),
    (
        "bound_ms",
        "session.rs: an integer of milliseconds from a Duration (statement_timeout)",
    ),
    (
        "LEASE_COLUMNS",
        "diagnostics/status.rs: the lease columns the status reads, a literal constant",
    ),
    (
        "runs",
        "diagnostics/status.rs, controls_sql.rs: HistoryTable::quoted(), a validated identifier",
    ),
    ("self.table().quoted()", "fenced.rs: TableName::quoted()"),
    // Hints: text shown to a person, naming the grant to run; never executed.
    ("user", "migrate.rs hint: current_user, quoted by ident()"),
    (
        "database",
        "migrate.rs hint: current_database(), quoted by ident()",
    ),
    ("migration", "migrate.rs hint: a migration's name"),
    ("instead", "migrate.rs hint: a literal"),
    (
        "server.book",
        "migrate.rs hint: `{table}_migrations`, a validated identifier",
    ),
];

/// SQL words whose presence marks a format string as SQL.
const SQL_WORDS: &[&str] = &[
    "SELECT",
    "INSERT",
    "UPDATE",
    "DELETE",
    "CREATE",
    "ALTER",
    "DROP",
    "GRANT",
    "FROM",
    "WHERE",
    "VALUES",
    "WITH",
    "RETURNING",
    "SET",
];

/// Every `format!` call in `source`: its format string and its arguments.
fn format_calls(source: &str) -> Vec<(String, Vec<String>)> {
    let mut calls = Vec::new();
    let mut rest = source;
    while let Some(at) = rest.find("format!(") {
        rest = &rest[at + "format!(".len()..];
        let body = balanced(rest);
        let body = body.trim_start();
        let Some(literal) = body.strip_prefix('"') else {
            continue;
        };
        let end = literal_end(literal);
        let (text, args) = (&literal[..end], &literal[end + 1..]);
        let args = split_args(args);
        calls.push((text.to_owned(), args));
    }
    calls
}

/// The text up to the parenthesis closing the one just opened.
fn balanced(text: &str) -> &str {
    let (mut depth, mut in_str, mut escaped) = (0usize, false, false);
    for (i, c) in text.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if in_str => escaped = true,
            '"' => in_str = !in_str,
            '(' if !in_str => depth += 1,
            ')' if !in_str && depth == 0 => return &text[..i],
            ')' if !in_str => depth -= 1,
            _ => {}
        }
    }
    text
}

/// Where a string literal (after its opening quote) ends.
fn literal_end(text: &str) -> usize {
    let mut escaped = false;
    for (i, c) in text.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            '"' => return i,
            _ => {}
        }
    }
    text.len()
}

/// The comma-separated arguments after the format string, at nesting depth 0.
fn split_args(text: &str) -> Vec<String> {
    let mut args = Vec::new();
    let (mut depth, mut current) = (0i32, String::new());
    for c in text.chars() {
        match c {
            '(' | '[' => depth += 1,
            ')' | ']' => depth -= 1,
            ',' if depth == 0 => {
                args.push(std::mem::take(&mut current));
                continue;
            }
            _ => {}
        }
        current.push(c);
    }
    args.push(current);
    args.into_iter()
        .map(|a| a.trim().to_owned())
        .filter(|a| !a.is_empty())
        .collect()
}

/// The names interpolated by a format string (`{name}`, `{name:?}`; `{}` takes the
/// next positional argument).
fn interpolations(text: &str, args: &[String]) -> Vec<String> {
    let mut names = Vec::new();
    let mut positional = args.iter().filter(|a| !a.contains('='));
    let mut chars = text.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        if c != '{' {
            continue;
        }
        if chars.peek().is_some_and(|&(_, c)| c == '{') {
            chars.next();
            continue;
        }
        let end = text[i..].find('}').map_or(text.len(), |e| i + e);
        let inner = text[i + 1..end].split(':').next().unwrap_or_default();
        if inner.is_empty() {
            names.push(positional.next().cloned().unwrap_or_default());
        } else {
            // Inline (`{t}`) or named (`{pre}`, with `pre = …` among the arguments):
            // the allow-list vouches for the name.
            names.push(inner.to_owned());
        }
    }
    names
}

#[test]
fn sql_is_only_ever_formatted_with_identifiers() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut checked = 0;
    // Every module, in folders too (`keyed/`, `controls/`, …).
    let mut files = Vec::new();
    let mut dirs = vec![src];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("src") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    files.sort();
    assert!(files.len() >= 6, "{files:?}");
    for file in files {
        let source = std::fs::read_to_string(&file).expect("read");
        // Only the library: doc examples and unit tests do not run in production.
        let source = source.split("#[cfg(test)]").next().unwrap_or_default();
        let code: String = source
            .lines()
            .filter(|l| !l.trim_start().starts_with("//"))
            .collect::<Vec<_>>()
            .join("\n");
        for (text, args) in format_calls(&code) {
            let is_sql = text
                .split(|c: char| !c.is_ascii_alphabetic())
                .any(|word| SQL_WORDS.contains(&word));
            if !is_sql {
                continue;
            }
            checked += 1;
            for name in interpolations(&text, &args) {
                assert!(
                    SQL_INTERPOLATIONS
                        .iter()
                        .any(|(allowed, _)| *allowed == name),
                    "{}: `{name}` is formatted into SQL text: {text:?}\n\
                     bind values as parameters ($1, $2, …); only identifiers may be spliced",
                    file.display()
                );
            }
        }
        // Nothing else builds SQL text piecewise.
        assert!(
            !code.contains("push_str("),
            "{}: push_str builds text",
            file.display()
        );
    }
    // The statements of store.rs, fenced.rs, keyed.rs, history.rs and migrate.rs.
    assert!(
        checked >= 12,
        "only {checked} SQL format strings found: is the scan broken?"
    );
}

#[test]
fn the_source_scan_catches_a_spliced_value() {
    let source = r#"let sql = format!("SELECT * FROM {t} WHERE name = '{name}'", t = table.quoted());
                    let ok = format!("UPDATE {} SET x = $1", self.table().quoted());"#;
    let calls = format_calls(source);
    assert_eq!(calls.len(), 2);
    assert_eq!(interpolations(&calls[0].0, &calls[0].1), ["t", "name"]);
    assert_eq!(
        interpolations(&calls[1].0, &calls[1].1),
        ["self.table().quoted()"]
    );
}
