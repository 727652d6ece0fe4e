#![no_main]
//! cargo-fuzz entry of `pdgate_fuzzing::hint_headers` (its docs say what it checks).
libfuzzer_sys::fuzz_target!(|data: &[u8]| pdgate_fuzzing::hint_headers(data));
