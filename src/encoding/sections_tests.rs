use fe2o3_amqp_types::messaging::{Header, MessageId, Properties};
use fe2o3_amqp_types::primitives::{Binary, Symbol, Timestamp, Uuid};

use super::system_values;
use super::*;

fn whole(bytes: &[u8]) -> Range<usize> {
    0..bytes.len()
}

fn full_properties(message_id: Option<MessageId>) -> Properties {
    Properties {
        message_id,
        user_id: Some(Binary::from(vec![1, 2, 3])),
        to: Some("queue-a".into()),
        subject: Some("subject".into()),
        reply_to: Some("reply".into()),
        correlation_id: Some(MessageId::Ulong(42)),
        content_type: Some(Symbol::from("application/json")),
        content_encoding: Some(Symbol::from("utf-8")),
        absolute_expiry_time: Some(Timestamp::from_milliseconds(1_000)),
        creation_time: Some(Timestamp::from_milliseconds(2_000)),
        group_id: Some("session-1".into()),
        group_sequence: Some(7),
        reply_to_group_id: Some("reply-session".into()),
    }
}

#[test]
fn properties_read_in_place_match_the_decoded_values() {
    let ids = [
        None,
        Some(MessageId::String("id-1".into())),
        Some(MessageId::Ulong(5)),
        Some(MessageId::Ulong(u64::MAX)),
        Some(MessageId::Uuid(Uuid::from([7; 16]))),
        Some(MessageId::Binary(Binary::from(vec![0xab, 0x01]))),
    ];
    for id in ids {
        for properties in [
            Properties {
                message_id: id.clone(),
                ..Properties::default()
            },
            full_properties(id.clone()),
        ] {
            let bytes = serde_amqp::to_vec(&properties).expect("encoded");
            let read = read_properties(&bytes, &whole(&bytes)).expect("read");
            assert_eq!(read, system_values(&properties), "{properties:?}");
        }
    }
}

#[test]
fn a_section_of_32_bit_encodings_reads_the_same() {
    // list32, str32 and sym32: what a client with a long field might send.
    let mut bytes = vec![0x00, 0x53, 0x73, 0xd0];
    let mut content = Vec::new();
    content.extend_from_slice(&[0xb1, 0, 0, 0, 2, b'i', b'd']); // message-id
    content.push(0x40); // user-id
    content.extend_from_slice(&[0xb1, 0, 0, 0, 1, b't']); // to
    bytes.extend_from_slice(&((content.len() + 4) as u32).to_be_bytes());
    bytes.extend_from_slice(&3u32.to_be_bytes());
    bytes.extend_from_slice(&content);
    let read = read_properties(&bytes, &whole(&bytes)).expect("read");
    assert_eq!(read[0].as_deref(), Some("id"));
    assert_eq!(read[2].as_deref(), Some("t"));
}

#[test]
fn malformed_properties_are_refused_naming_the_field() {
    // `to` as an int, a timestamp as a string, an invalid UTF-8 subject, 14 fields, a map.
    let cases: [(&[u8], &str); 5] = [
        (&[0x00, 0x53, 0x73, 0xc0, 5, 3, 0x40, 0x40, 0x54, 1], "to"),
        (
            &[
                0x00, 0x53, 0x73, 0xc0, 12, 9, 0x40, 0x40, 0x40, 0x40, 0x40, 0x40, 0x40, 0x40,
                0xa1, 1, b'x',
            ],
            "absolute-expiry-time",
        ),
        (
            &[
                0x00, 0x53, 0x73, 0xc0, 7, 4, 0x40, 0x40, 0x40, 0xa1, 1, 0xff,
            ],
            "subject",
        ),
        (
            &[
                0x00, 0x53, 0x73, 0xc0, 15, 14, 0x40, 0x40, 0x40, 0x40, 0x40, 0x40, 0x40, 0x40,
                0x40, 0x40, 0x40, 0x40, 0x40, 0x40,
            ],
            "14 fields",
        ),
        (&[0x00, 0x53, 0x73, 0xc1, 1, 0], "not a list"),
    ];
    for (bytes, named) in cases {
        let error = read_properties(bytes, &whole(bytes)).expect_err("refused");
        assert!(error.to_string().contains(named), "{error} names {named}");
    }
}

#[test]
fn headers_read_in_place_match_the_decoded_fields() {
    let headers = [
        Header::default(),
        Header {
            durable: true,
            priority: 9.into(),
            ttl: Some(60_000),
            first_acquirer: true,
            delivery_count: 3,
        },
        Header {
            ttl: Some(0),
            ..Header::default()
        },
        Header {
            ttl: Some(u32::MAX),
            priority: 0.into(),
            ..Header::default()
        },
    ];
    for header in headers {
        let bytes = serde_amqp::to_vec(&header).expect("encoded");
        let read = read_header(&bytes, &whole(&bytes)).expect("read");
        assert_eq!(read.durable, header.durable, "{header:?}");
        assert_eq!(read.priority, header.priority.0, "{header:?}");
        assert_eq!(
            read.time_to_live,
            header
                .ttl
                .map(|ttl| std::time::Duration::from_millis(ttl as u64)),
            "{header:?}"
        );
    }
    // An empty header (list0) and one with nulls: the AMQP defaults.
    for bytes in [
        &[0x00, 0x53, 0x70, 0x45][..],
        &[0x00, 0x53, 0x70, 0xc0, 4, 3, 0x40, 0x40, 0x40],
    ] {
        let read = read_header(bytes, &whole(bytes)).expect("read");
        assert_eq!(
            (read.durable, read.priority, read.time_to_live),
            (false, 4, None)
        );
    }
}

#[test]
fn malformed_headers_are_refused_naming_the_field() {
    let cases: [(&[u8], &str); 4] = [
        (&[0x00, 0x53, 0x70, 0xc0, 3, 1, 0x52, 1], "durable"),
        (&[0x00, 0x53, 0x70, 0xc0, 4, 2, 0x40, 0x52, 1], "priority"),
        (&[0x00, 0x53, 0x70, 0xc0, 3, 1, 0x56, 2], "durable"),
        (&[0x00, 0x53, 0x70, 0xc0, 5, 3, 0x40, 0x40, 0xa1, 0], "ttl"),
    ];
    for (bytes, named) in cases {
        let error = read_header(bytes, &whole(bytes)).expect_err("refused");
        assert!(error.to_string().contains(named), "{error} names {named}");
    }
}

#[test]
fn an_assigned_message_id_goes_first_and_keeps_the_other_fields() {
    let id = "0123456789abcdef0123456789abcdef0123";
    // No section at all.
    let section = with_message_id(&[], &(0..0), id);
    let decoded: Properties = serde_amqp::from_slice(section.as_slice()).expect("decodes");
    assert_eq!(decoded.message_id, Some(MessageId::String(id.into())));
    assert_eq!(
        Properties {
            message_id: None,
            ..decoded
        },
        Properties::default()
    );
    // A section with every other field, a null message-id, one with a long subject (list32)
    // and an empty list.
    let long = Properties {
        subject: Some("s".repeat(300)),
        ..Properties::default()
    };
    for properties in [full_properties(None), long, Properties::default()] {
        let bytes = serde_amqp::to_vec(&properties).expect("encoded");
        let section = with_message_id(&bytes, &whole(&bytes), id);
        let decoded: Properties = serde_amqp::from_slice(section.as_slice()).expect("decodes");
        assert_eq!(
            decoded,
            Properties {
                message_id: Some(MessageId::String(id.into())),
                ..properties
            }
        );
    }
    // An id longer than 255 bytes takes a str32.
    let long_id = "i".repeat(300);
    let section = with_message_id(&[], &(0..0), &long_id);
    let decoded: Properties = serde_amqp::from_slice(section.as_slice()).expect("decodes");
    assert_eq!(decoded.message_id, Some(MessageId::String(long_id)));
}

#[test]
fn empty_properties_hold_no_system_property() {
    // list0 (as Proton-C sends) and an empty list8.
    for bytes in [
        &[0x00, 0x53, 0x73, 0x45][..],
        &[0x00, 0x53, 0x73, 0xc0, 1, 0],
    ] {
        let values = read_properties(bytes, &whole(bytes)).expect("read");
        assert!(values.iter().all(Option::is_none), "{values:?}");
    }
}
