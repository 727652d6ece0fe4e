#![no_main]
//! cargo-fuzz entry of `pdgate_fuzzing::request_body` (its docs say what it checks).
libfuzzer_sys::fuzz_target!(|data: &[u8]| pdgate_fuzzing::request_body(data));
