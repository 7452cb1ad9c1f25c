//! Configuration parsing and validation.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = ferrobus::config::Config::from_toml_str(text, "fuzz.toml");
    }
});
