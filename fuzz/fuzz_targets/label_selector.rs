#![no_main]
//! cargo-fuzz entry of `pdgate_fuzzing::label_selector` (its docs say what it checks).
libfuzzer_sys::fuzz_target!(|data: &[u8]| pdgate_fuzzing::label_selector(data));
