//! Cases the fuzz targets of `fuzz/` found (docs/reliability.md), kept as regression tests
//! of the normal suite: each failed before its fix.

use cronq_shared::message::Occurrence;
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

/// fuzz/artifacts/message/crash-b0ba94b634759a2d21feb5d85e933acbe415401c: a payload number
/// of many digits changed in its last bit between a decode and the decode of its re-encoding
/// (serde_json's fast float parsing is not exact), so the payload a handler got could differ
/// from the one published, and drift further with each hop (retry, dead letter, replay).
#[test]
fn a_payload_number_survives_decode_and_encode_unchanged() {
    let digits = format!("3{}1", "3".repeat(100));
    let body = format!(
        r#"{{"kind":"occurrence.v1","key":"a@2026-11-29T19:30:00Z","job":"a","scheduled_at":"2026-11-29T19:30:00Z","scheduled_local":"2026-11-29T19:30:00Z","timezone":"UTC","trigger":"schedule","attempt":1,"payload":{{"n":{digits}}},"published_at":"2026-11-29T19:30:00Z"}}"#
    );
    let occ = Occurrence::decode(body.as_bytes()).unwrap();
    let again = Occurrence::decode(&occ.encode()).unwrap();
    assert_eq!(again.payload, occ.payload);
    let exact: f64 = digits.parse().unwrap();
    assert_eq!(occ.payload["n"].as_f64(), Some(exact));
}
