// In-server tests of the core API, compiled into the extension with the pg_test feature.
// Each #[pg_test] runs inside one transaction that is rolled back afterwards; behaviour across
// sessions is tested through real client connections in tests/.

use pgrx::prelude::*;

#[pg_test]
fn claim_then_replay() {
    let first = Spi::get_one::<String>("SELECT outcome FROM idem_claim('t', 'k1', 'h')").unwrap();
    assert_eq!(first.as_deref(), Some("claimed"));
}
