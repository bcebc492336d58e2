//! Static criterion files on arbitrary bytes: refused with an error, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use qada_core::{Static, StaticTable};

/// The bytes with their length field and checksum made right, so that mutations get past the
/// container checks into the payload parser.
fn sealed(data: &[u8]) -> Option<Vec<u8>> {
    if data.len() < 28 {
        return None;
    }
    let mut b = data.to_vec();
    let payload = (b.len() - 28) as u64;
    b[12..20].copy_from_slice(&payload.to_le_bytes());
    let end = b.len() - 8;
    let sum = qada_stats::codec::fnv1a64(&b[..end]);
    b[end..].copy_from_slice(&sum.to_le_bytes());
    Some(b)
}

fuzz_target!(|data: &[u8]| {
    if let Some(sealed) = sealed(data) {
        let _ = StaticTable::from_bytes(&sealed, None);
    }
    if let Ok(t) = StaticTable::from_bytes(data, None) {
        assert_eq!(t.to_bytes(), data);
        let _ = Static::from_table(&t, 0.5);
        let _ = t.frequencies();
    }
});
