//! The handle's clock (crates/store/src/clock.rs).
#[test]
fn a_pinned_clock_is_what_operations_record() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.db");
    let mut store = crate::Store::open(path.to_str().unwrap()).unwrap();
    let noon = exactly_words::time::parse("2026-06-01T12:00:00.000Z").unwrap();
    store.pin_clock(Some(noon));
    assert_eq!(store.now(), noon);
    crate::jobs::pause(&mut store, &exactly_words::JobName::from("j"), "ops", None).unwrap();
    let row = crate::jobs::record(&mut store, &exactly_words::JobName::from("j"))
        .unwrap()
        .unwrap();
    assert_eq!(row.updated_at, Some(noon));
    store.pin_clock(None);
    assert!(store.now() > noon);
    // One operation as at an instant, and the clock given back.
    assert_eq!(store.as_at(noon, |s| s.now()), noon);
    assert!(store.now() > noon);
}
