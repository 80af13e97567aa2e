//! A database user without the rights to migrate, or to run the lease statements, is
//! told which grant each step needs, never left with a bare "permission denied"; a
//! user with CREATE on an existing schema migrates without CREATE on the database.
//!
//! `pgbouncer.rs` runs these tests again through PgBouncer in transaction pooling
//! mode: the stores under test connect to `db.url()`, while the tests' own set-up and
//! inspection statements go to the server directly (`admin`).
#![allow(clippy::expect_used, clippy::unwrap_used)]

mod support;

use scheduler_core::{Release, Store};
use scheduler_postgres::{Error, PostgresOptions};
use sea_orm::{ConnectionTrait, DatabaseConnection, DbBackend, Statement};
use support::hostile::{
    CREATE_LEASES, admin, connect, exec, exists, pg, store, store_with, strings, take, tick, ttl,
};
use test_postgres::TestDb;

/// `url` with its user (and password) replaced.
fn as_user(url: &str, user: &str, password: &str) -> String {
    let start = url.find("://").expect("scheme") + 3;
    let end = url[start..].find('/').map_or(url.len(), |i| start + i);
    let host = match url[start..end].rfind('@') {
        Some(at) => &url[start + at + 1..end],
        None => &url[start..end],
    };
    format!("{}{user}:{password}@{host}{}", &url[..start], &url[end..])
}

const WEAK_PASSWORD: &str = "weak-password";

/// The hint of a take refused for a missing right.
const RIGHTS_HINT: &str = "; the database user lacks a right: it needs SELECT, INSERT and UPDATE \
                           on the lease table, SELECT on the lease table's _controls and \
                           _triggers tables (every take reads the pauses and the triggered runs \
                           there), and USAGE on their schema";

/// A role that may only log in and connect to `db` (PostgreSQL 15 no longer lets
/// PUBLIC create in schema `public`; older servers are made to match).
async fn weak_role(admin: &DatabaseConnection, db: &TestDb) -> (String, String) {
    let role = format!("weak_{}", db.name());
    let database = db.name();
    exec(
        admin,
        &format!(
            "CREATE ROLE {role} LOGIN PASSWORD '{WEAK_PASSWORD}';
             REVOKE ALL ON DATABASE {database} FROM PUBLIC;
             GRANT CONNECT ON DATABASE {database} TO {role};
             REVOKE CREATE ON SCHEMA public FROM PUBLIC"
        ),
    )
    .await;
    let url = as_user(db.url(), &role, WEAK_PASSWORD);
    (role, url)
}

#[tokio::test]
async fn a_user_without_create_rights_is_told_which_grant_each_migration_needs() {
    let db = TestDb::new().await;
    let admin = admin(db.url()).await;
    let (role, weak) = weak_role(&admin, &db).await;
    let database = db.name();

    // A fresh database: the migration needs CREATE on schema public.
    let err = connect(&weak, PostgresOptions::default()).await.err();
    let Some(Error::Migrate { migration, .. }) = &err else {
        panic!("expected a migration error: {err:?}");
    };
    assert_eq!(migration, CREATE_LEASES);
    let msg = err.as_ref().unwrap().to_string();
    assert!(
        msg.starts_with(&format!("migration {CREATE_LEASES} failed: ")),
        "{msg}"
    );
    assert!(msg.contains("permission denied for schema public"), "{msg}");
    assert!(
        msg.ends_with(&format!(
            "; migration {CREATE_LEASES} needs CREATE on schema public: GRANT CREATE ON SCHEMA public TO {role}; \
             or run the migrations once as a user that has it and open the store with migrate(false)"
        )),
        "{msg}"
    );
    println!("no CREATE on public: {msg}");
    // Nothing was left behind (one transaction).
    assert!(!exists(&admin, "scheduler_leases_migrations").await);
    assert!(!exists(&admin, "scheduler_leases").await);

    // A schema-qualified table whose schema does not exist: CREATE on the database, to create it.
    let options = PostgresOptions::default()
        .table("weak_app.leases")
        .expect("name")
        .create_schema(true);
    let err = connect(&weak, options).await.expect_err("refused");
    let msg = err.to_string();
    assert!(
        matches!(&err, Error::Migrate { migration, .. } if migration == CREATE_LEASES),
        "{msg}"
    );
    assert!(
        msg.contains(&format!("permission denied for database {database}")),
        "{msg}"
    );
    assert!(
        msg.ends_with(&format!(
            "; migration {CREATE_LEASES} needs CREATE on schema weak_app (GRANT CREATE ON SCHEMA weak_app TO {role}) \
             or, while schema weak_app does not exist, CREATE on database {database} to create it \
             (GRANT CREATE ON DATABASE {database} TO {role}); \
             or run the migrations once as a user that has it and open the store with migrate(false)"
        )),
        "{msg}"
    );
    println!("no CREATE on the database: {msg}");

    // A privileged user migrates and grants only what the lease statements need.
    drop(store(db.url()).await);
    exec(
        &admin,
        &format!("GRANT SELECT, INSERT, UPDATE ON scheduler_leases TO {role}"),
    )
    .await;
    let weak_store = connect(&weak, PostgresOptions::default().migrate(false))
        .await
        .expect("opens without migrating");
    let t = tick(&weak_store, 0).await;
    // Every take reads the pauses: the user needs SELECT on the controls table too.
    let err = take(&weak_store, &["weak job"], t)
        .await
        .expect_err("no SELECT on the controls");
    let msg = err.to_string();
    assert!(
        msg.contains("permission denied for table scheduler_leases_controls"),
        "{msg}"
    );
    assert!(msg.ends_with(RIGHTS_HINT), "{msg}");
    exec(
        &admin,
        &format!("GRANT SELECT ON scheduler_leases_controls TO {role}"),
    )
    .await;
    // And the triggered runs (a claim keeps the completion of the tick it took the
    // lease from there): SELECT on the triggers table.
    let err = take(&weak_store, &["weak job"], t)
        .await
        .expect_err("no SELECT on the triggers");
    let msg = err.to_string();
    assert!(
        msg.contains("permission denied for table scheduler_leases_triggers"),
        "{msg}"
    );
    assert!(msg.ends_with(RIGHTS_HINT), "{msg}");
    exec(
        &admin,
        &format!("GRANT SELECT ON scheduler_leases_triggers TO {role}"),
    )
    .await;
    let keys = take(&weak_store, &["weak job"], t).await.expect("take");
    assert_eq!(keys.len(), 1);
    assert_eq!(
        weak_store.renew(&keys, ttl()).await.expect("renew").len(),
        1
    );
    assert_eq!(
        weak_store
            .release(&keys, Release::Completed)
            .await
            .expect("release")
            .len(),
        1
    );

    // Opening with migrate(true) when nothing is pending needs no CREATE, only to
    // read the bookkeeping table.
    let err = connect(&weak, PostgresOptions::default())
        .await
        .expect_err("refused");
    let msg = err.to_string();
    assert!(
        matches!(&err, Error::Migrate { migration, .. } if migration == "setup"),
        "{msg}"
    );
    assert!(
        msg.contains("permission denied for table scheduler_leases_migrations"),
        "{msg}"
    );
    assert!(
        msg.ends_with(&format!(
            "; finding the pending migrations needs SELECT on scheduler_leases_migrations: \
             GRANT SELECT ON scheduler_leases_migrations TO {role}; or open the store with migrate(false)"
        )),
        "{msg}"
    );
    println!("no SELECT on the bookkeeping table: {msg}");
    exec(
        &admin,
        &format!("GRANT SELECT ON scheduler_leases_migrations TO {role}"),
    )
    .await;
    let migrated = connect(&weak, PostgresOptions::default())
        .await
        .expect("a fully migrated database needs no CREATE right");
    let row = admin
        .query_one_raw(Statement::from_sql_and_values(
            DbBackend::Postgres,
            "SELECT has_schema_privilege($1, 'public', 'CREATE') AS can_create",
            [role.clone().into()],
        ))
        .await
        .expect("query")
        .expect("row");
    assert!(!row.try_get::<bool>("", "can_create").expect("bool"));

    // Without UPDATE a take (an upsert) fails, saying which rights the store needs.
    exec(
        &admin,
        &format!("REVOKE UPDATE ON scheduler_leases FROM {role}"),
    )
    .await;
    let t = tick(&migrated, 1).await;
    let err = take(&migrated, &["weak job"], t)
        .await
        .expect_err("no UPDATE");
    let msg = err.to_string();
    assert!(
        matches!(
            pg(&err),
            Error::Statement {
                operation: "take leases",
                ..
            }
        ),
        "{msg}"
    );
    assert!(
        msg.contains("permission denied for table scheduler_leases"),
        "{msg}"
    );
    assert!(msg.ends_with(RIGHTS_HINT), "{msg}");
    println!("no UPDATE on the lease table: {msg}");

    // A table in a schema the user may not even look into.
    let locked = PostgresOptions::default()
        .table("locked.leases")
        .expect("name")
        .create_schema(true);
    drop(store_with(db.url(), locked.clone()).await);
    exec(
        &admin,
        &format!("GRANT SELECT, INSERT, UPDATE ON locked.leases TO {role}"),
    )
    .await;
    let err = connect(&weak, locked.clone()).await.expect_err("refused");
    let msg = err.to_string();
    assert!(msg.contains("permission denied for schema locked"), "{msg}");
    assert!(
        msg.ends_with(&format!(
            "; the user needs USAGE on schema locked: GRANT USAGE ON SCHEMA locked TO {role}"
        )),
        "{msg}"
    );
    println!("no USAGE on the schema: {msg}");
    let weak_locked = connect(&weak, locked.migrate(false))
        .await
        .expect("opens without migrating");
    let t = tick(&weak_locked, 0).await;
    let err = take(&weak_locked, &["job"], t).await.expect_err("no USAGE");
    let msg = err.to_string();
    assert!(msg.contains("permission denied for schema locked"), "{msg}");
    assert!(msg.ends_with(RIGHTS_HINT), "{msg}");
}

/// Whether `role` holds a right, as the `has_*_privilege($1, …)` call `check` says.
async fn holds(admin: &DatabaseConnection, check: &str, role: &str) -> bool {
    let row = admin
        .query_one_raw(Statement::from_sql_and_values(
            DbBackend::Postgres,
            format!("SELECT {check} AS holds"),
            [role.into()],
        ))
        .await
        .expect("query")
        .expect("row");
    row.try_get("", "holds").expect("bool")
}

#[tokio::test]
async fn a_user_with_create_on_an_existing_schema_needs_no_create_on_the_database() {
    let db = TestDb::new().await;
    let admin = admin(db.url()).await;
    let (role, weak) = weak_role(&admin, &db).await;
    let database = db.name();
    exec(
        &admin,
        &format!("CREATE SCHEMA app_b; GRANT USAGE ON SCHEMA app_b TO {role}"),
    )
    .await;
    let on_database = "has_database_privilege($1, current_database(), 'CREATE')";
    let on_schema = "has_schema_privilege($1, 'app_b', 'CREATE')";
    assert!(!holds(&admin, on_database, &role).await);
    assert!(!holds(&admin, on_schema, &role).await);
    let options = PostgresOptions::default()
        .table("app_b.leases")
        .expect("name")
        .create_schema(true);

    // USAGE alone: the lease table cannot be created in the schema.
    let err = connect(&weak, options.clone()).await.expect_err("refused");
    let msg = err.to_string();
    assert!(
        matches!(&err, Error::Migrate { migration, .. } if migration == CREATE_LEASES),
        "{msg}"
    );
    assert!(msg.contains("permission denied for schema app_b"), "{msg}");
    assert!(
        msg.ends_with(&format!(
            "; migration {CREATE_LEASES} needs CREATE on schema app_b (GRANT CREATE ON SCHEMA app_b TO {role}) \
             or, while schema app_b does not exist, CREATE on database {database} to create it \
             (GRANT CREATE ON DATABASE {database} TO {role}); \
             or run the migrations once as a user that has it and open the store with migrate(false)"
        )),
        "{msg}"
    );
    println!("no CREATE on an existing schema: {msg}");

    // With CREATE on the schema, and still none on the database, it migrates: the
    // schema exists, so nothing asks to create it.
    exec(&admin, &format!("GRANT CREATE ON SCHEMA app_b TO {role}")).await;
    assert!(holds(&admin, on_schema, &role).await);
    let migrated = connect(&weak, options)
        .await
        .expect("migrates with CREATE on the schema alone");
    assert!(!holds(&admin, on_database, &role).await);
    assert!(exists(&admin, "app_b.leases").await);
    assert!(exists(&admin, "app_b.leases_migrations").await);
    let t = tick(&migrated, 0).await;
    let keys = take(&migrated, &["weak job"], t).await.expect("take");
    assert_eq!(keys.len(), 1);
    let owner = strings(
        &admin,
        "SELECT tableowner::text FROM pg_tables WHERE schemaname = 'app_b' AND tablename = 'leases'",
    )
    .await;
    assert_eq!(owner, [Some(role.clone())]);
}
