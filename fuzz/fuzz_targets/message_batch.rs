//! A message batch as a send carries it (validated against its declared count) and as a
//! read finds it on disk (verified as stored); a batch that validates is walked frame by
//! frame.

#![no_main]

use libfuzzer_sys::fuzz_target;
use rill_domain::batch;

fuzz_target!(|data: &[u8]| {
    let Some((count, bytes)) = data.split_first_chunk::<4>() else { return };
    let _ = batch::verify_stored(bytes);
    if batch::validate(bytes, u32::from_le_bytes(*count)).is_ok() {
        let frames = batch::frames(bytes).count();
        assert!(frames <= bytes.len(), "more frames than bytes");
    }
});
