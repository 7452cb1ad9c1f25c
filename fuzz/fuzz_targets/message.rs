//! Message section parsing (single messages and Service Bus batches).
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let payload = bytes::Bytes::copy_from_slice(data);
    let _ = ferrobus::amqp::message::parse_transfer(payload.clone(), 0);
    let _ = ferrobus::amqp::message::parse_transfer(payload, 0x8001_3700);
});
