//! Message decoding: `Occurrence::decode` on any body, and the signed wrapper
//! (`shared/src/signing.rs`): never a panic; what decodes re-encodes to a body that decodes
//! to the same occurrence; a sealed body opens to its exact inner bytes, and no change of
//! one byte of it still opens.

#![no_main]

use cronq_shared::message::Occurrence;
use cronq_shared::signing::{self, KeySource, Keyring};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let ring =
        Keyring::parse("k1:fuzz-secret-0123456789", KeySource::Variable).expect("a valid key list");

    // Whatever the bytes, decoding answers; an accepted occurrence survives a round trip.
    if let Ok(occ) = Occurrence::decode(data) {
        let again = Occurrence::decode(&occ.encode()).expect("an encoded occurrence decodes");
        assert_eq!(again, occ);
        let sealed = ring.seal(&occ.encode());
        assert_eq!(
            ring.open(&sealed).expect("own seal opens"),
            occ.encode().as_slice()
        );
        assert_eq!(Occurrence::decode(&sealed).expect("sealed decodes"), occ);
    }
    let _ = signing::unwrap(data);
    // Any body: opening never panics, and what opens is inside the body.
    if let Ok(inner) = ring.open(data) {
        assert!(inner.len() < data.len());
    }

    // The bytes sealed as a message (any JSON value, with whitespace around it or not):
    // opening gives back the value's exact bytes; a flipped byte of it is refused.
    if serde_json::from_slice::<serde_json::Value>(data).is_ok() {
        let value = data.trim_ascii();
        let sealed = ring.seal(data);
        assert_eq!(ring.open(&sealed).expect("own seal opens"), value);
        assert_eq!(signing::unwrap(&sealed), value);
        if !value.is_empty() {
            // The value sits just before the closing brace.
            let at = sealed.len() - 2 - (data[0] as usize % value.len());
            let mut tampered = sealed.clone();
            tampered[at] ^= 0x01;
            // The MAC covers the inner message's exact bytes.
            assert!(ring.open(&tampered).is_err(), "a tampered body opened");
        }
    }
});
