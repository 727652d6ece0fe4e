#![no_main]
//! cargo-fuzz entry of `pdgate_fuzzing::sse` (its docs say what it checks).
libfuzzer_sys::fuzz_target!(|data: &[u8]| pdgate_fuzzing::sse(data));
