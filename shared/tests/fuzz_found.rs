//! Cases the fuzz targets of `fuzz/` found (docs/reliability.md), kept as regression tests
//! of the normal suite: each failed before its fix.

use cronq_shared::signing::{self, KeySource, Keyring};

fn ring() -> Keyring {
    Keyring::parse("k1:fuzz-secret-0123456789", KeySource::Variable).expect("a valid key list")
}

/// fuzz/artifacts/message/crash-7ae5a5c19b16f9ee3b00ca36fc729536fb5e7307: a JSON body with
/// whitespace around its value sealed into a body its own keyring refused (the MAC was made
/// over the whitespace, the opened value has none).
#[test]
fn a_sealed_body_with_whitespace_around_it_opens() {
    for body in [&b" 0"[..], b"{\"a\":1}\n", b"\r\n\t[1, 2] "] {
        let sealed = ring().seal(body);
        let value = body.trim_ascii();
        assert_eq!(
            ring().open(&sealed),
            Ok(value),
            "{:?}",
            String::from_utf8_lossy(body)
        );
        assert_eq!(signing::unwrap(&sealed), value);
    }
}
