//! The tests' own PostgreSQL plumbing (tests/support/backend.rs): a site's schema is the search
//! path of the URL the binary is given, SQL reads convert each column type or fail, and the
//! schema goes when the site does. PostgreSQL parts run with `EXACTLY_TEST_PG` (required on CI).
use crate::support;
use std::path::Path;
use support::backend::{self, Backend, PgSchema};

#[test]
fn the_schema_is_added_to_the_urls_query() {
    assert_eq!(
        backend::with_search_path("postgres://u:p@h:5432/db", "t_1_2_3"),
        "postgres://u:p@h:5432/db?options=-csearch_path%3Dt_1_2_3"
    );
    assert_eq!(
        backend::with_search_path("postgres://u:p@h:5432/db?sslmode=disable", "t_1_2_3"),
        "postgres://u:p@h:5432/db?sslmode=disable&options=-csearch_path%3Dt_1_2_3"
    );
    assert_eq!(
        backend::redact("postgres://u:secret@h:5432/db"),
        "postgres://u:***@h:5432/db"
    );
}

#[test]
fn sites_follow_the_threads_backend_and_a_guard_restores_it() {
    assert_eq!(backend::current(), Backend::Sqlite);
    {
        let _g = backend::using(Backend::Postgres);
        assert_eq!(backend::current(), Backend::Postgres);
    }
    assert_eq!(backend::current(), Backend::Sqlite);
    let env = support::cli::Env::new();
    assert_eq!(env.db, env.dir.path().join("exactly.db"));
    assert!(env.pg.is_none());
}

#[test]
#[cfg_attr(
    exactly_no_pg,
    ignore = "no PostgreSQL: set EXACTLY_TEST_PG or install the server (CONTRIBUTING.md)"
)]
fn a_sites_schema_is_its_search_path_and_is_dropped_with_it() {
    let _pg = backend::enter_postgres();
    let base = backend::pg_url().expect("url");
    let site = support::runner::Site::new();
    let schema = site.pg.as_ref().expect("a schema").name.clone();
    assert!(schema.starts_with("t_"), "{schema}");
    assert_eq!(schema, schema.to_lowercase());
    let url = site.db();
    assert!(url.contains("options=-csearch_path%3D"), "{url}");
    let mut c = postgres::Client::connect(&url, postgres::NoTls).expect("connect");
    let path: String = c.query_one("SHOW search_path", &[]).expect("show").get(0);
    assert_eq!(path, schema);
    c.batch_execute("CREATE TABLE made_here (x BIGINT)")
        .expect("create");
    let in_schema = |name: &str| {
        support::count(
            Path::new(&base),
            &format!(
                "SELECT count(*) FROM information_schema.tables \
                 WHERE table_schema = '{schema}' AND table_name = '{name}'"
            ),
        )
    };
    assert_eq!(
        in_schema("made_here"),
        1,
        "unqualified names land in the schema"
    );
    assert!(site.db_exists());
    drop(c);
    drop(site);
    assert_eq!(
        support::count(
            Path::new(&base),
            &format!("SELECT count(*) FROM pg_namespace WHERE nspname = '{schema}'"),
        ),
        0,
        "the schema was dropped with its site"
    );
}

#[test]
#[cfg_attr(
    exactly_no_pg,
    ignore = "no PostgreSQL: set EXACTLY_TEST_PG or install the server (CONTRIBUTING.md)"
)]
fn reads_convert_each_column_type_and_fail_loudly() {
    let _pg = backend::enter_postgres();
    let schema = PgSchema::create();
    let db = Path::new(&schema.url);
    support::execute(
        db,
        "CREATE TABLE t (a SMALLINT, b INTEGER, c BIGINT, d TEXT, e VARCHAR(5), f NUMERIC);
         INSERT INTO t VALUES (2, 40000, 5000000000, 'x', 'y', 12), (3, 1, 1, 'z', 'w', 1.5)",
    );
    let one = |sql: &str| support::count(db, sql);
    assert_eq!(one("SELECT a FROM t ORDER BY a"), 2);
    assert_eq!(one("SELECT b FROM t ORDER BY a"), 40000);
    assert_eq!(one("SELECT c FROM t ORDER BY a"), 5_000_000_000);
    assert_eq!(one("SELECT count(*) FROM t"), 2);
    // sum(bigint) is numeric on PostgreSQL.
    assert_eq!(one("SELECT coalesce(sum(c), 0) FROM t"), 5_000_000_001);
    assert_eq!(one("SELECT f FROM t WHERE a = 2"), 12);
    assert_eq!(
        support::strings(db, "SELECT d FROM t ORDER BY a"),
        ["x", "z"]
    );
    assert_eq!(
        support::strings(db, "SELECT e FROM t ORDER BY a"),
        ["y", "w"]
    );
    assert_eq!(
        support::strings(db, "SELECT a || ' ' || c FROM t ORDER BY a"),
        ["2 5000000000", "3 1"]
    );
    assert_eq!(
        support::strings(db, "SELECT c FROM t ORDER BY a"),
        ["5000000000", "1"]
    );
    // A site's poll reads a table not made yet as 0, and nothing else.
    let _g = backend::using(Backend::Postgres);
    let site = support::runner::Site::new();
    assert_eq!(site.count("SELECT count(*) FROM exactly_runs"), 0);
    for bad in [
        "SELECT f FROM t WHERE a = 3",        // 1.5 is no integer
        "SELECT d FROM t",                    // text
        "SELECT NULL::bigint",                // NULL
        "SELECT c FROM t WHERE false",        // no row
        "SELECT count(*) FROM no_such_table", // not ours: an error, never 0
        "SELEC 1",                            // a typo
    ] {
        let got = std::panic::catch_unwind(|| support::count(db, bad));
        assert!(got.is_err(), "{bad} read as {got:?}");
        let got = std::panic::catch_unwind(|| site.count(bad));
        assert!(got.is_err(), "{bad} read as {got:?} by a site");
    }
    let got = std::panic::catch_unwind(|| support::strings(db, "SELECT NULL::text"));
    assert!(got.is_err(), "NULL read as {got:?}");
}
