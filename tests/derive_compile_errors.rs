//! Misuse of `#[derive(Entity)]` fails to compile with errors at the offending tokens; the
//! expected messages are checked in next to each case (`TRYBUILD=overwrite` regenerates them).

#[test]
fn derive_misuse_is_reported() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/*.rs");
}
