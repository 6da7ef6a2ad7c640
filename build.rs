//! One line when the PostgreSQL tests will not run: without `EXACTLY_TEST_PG` the `postgres::`
//! integration tests (tests/support/backend.rs) pass without running; on CI they fail.
fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=EXACTLY_TEST_PG");
    println!("cargo:rerun-if-env-changed=CI");
    let set = std::env::var("EXACTLY_TEST_PG").is_ok_and(|u| !u.trim().is_empty());
    let ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && !v.eq_ignore_ascii_case("false"));
    if !set && ci {
        println!(
            "cargo:warning=PostgreSQL tests will fail: CI is set and EXACTLY_TEST_PG is not (see \
             .ci/run)"
        );
    } else if !set {
        println!(
            "cargo:warning=PostgreSQL tests did not run: set EXACTLY_TEST_PG=postgres://... (see \
             CONTRIBUTING.md) to run them"
        );
    }
}
