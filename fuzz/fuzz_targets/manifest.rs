#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| ipu_fuzz::expect_clean(ipu_fuzz::manifest, data));
