//! Static criterion files on arbitrary bytes: refused with an error, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use qada_core::{Static, StaticTable};

fuzz_target!(|data: &[u8]| {
    // with length and checksum made right, mutations reach the payload parser
    let _ = StaticTable::from_bytes(&qada_stats::codec::reseal(data), None);
    if let Ok(t) = StaticTable::from_bytes(data, None) {
        assert_eq!(t.to_bytes(), data);
        let _ = Static::from_table(&t, 0.5);
        let _ = t.frequencies();
    }
});
