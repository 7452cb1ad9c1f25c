//! SQL filter and rule-action parsing.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = ferrobus::broker::filter::SqlFilter::parse(text);
        let _ = ferrobus::broker::filter::SqlRuleAction::parse(text);
    }
});
