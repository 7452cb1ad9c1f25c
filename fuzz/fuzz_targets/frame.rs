//! Frame splitting and performative decoding: whatever the bytes, no panic, no overflow.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let mut input = bytes::BytesMut::from(data);
    while let Ok(Some(frame)) = ferrobus::server::frame::take_frame(&mut input, 1 << 20) {
        let _ = ferrobus::server::frame::decode_transfer(&frame.body);
        let _ = ferrobus::server::frame::decode_performative(&frame.body);
    }
});
