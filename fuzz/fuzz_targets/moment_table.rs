//! Calibration moment files on arbitrary bytes: refused with an error, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use qada_stats::MomentTable;

fuzz_target!(|data: &[u8]| {
    // with length and checksum made right, mutations reach the payload parser
    let _ = MomentTable::from_bytes(&qada_stats::codec::reseal(data), None);
    if let Ok(t) = MomentTable::from_bytes(data, None) {
        // what was accepted encodes back to the same bytes and looks up without panicking
        assert_eq!(t.to_bytes(), data);
        let _ = t.lookup(8192, 1024);
    }
});
