//! The message adapter: a transfer's sections split and checked at ingress into the core's
//! message, and the delivery written from it.

use fe2o3_amqp_types::messaging::MessageId;
use fe2o3_amqp_types::primitives::{Symbol, Uuid};

use super::*;
use crate::encoding::sections::system_values;

fn encoded(properties: &Properties) -> Vec<u8> {
    serde_amqp::to_vec(properties).expect("encodes")
}

fn full_properties() -> Properties {
    Properties {
        message_id: Some(MessageId::String("id-1".into())),
        to: Some("to-1".into()),
        subject: Some("label".into()),
        reply_to: Some("reply-q".into()),
        correlation_id: Some(MessageId::String("corr-1".into())),
        content_type: Some(Symbol::from("application/json")),
        group_id: Some("session-1".into()),
        reply_to_group_id: Some("reply-session".into()),
        ..Properties::default()
    }
}

/// A delivered properties section, decoded.
fn delivered(message: &Message) -> Properties {
    let section = message.properties_section();
    serde_amqp::from_slice(message.delivered_properties(section).as_slice())
        .expect("a properties section")
}

fn assigned_text(message: &Message) -> String {
    ids::GuidText::new(&message.assigned_id().expect("an assigned id"))
        .as_str()
        .to_string()
}

#[test]
fn sections_back_to_back_are_kept_as_the_transfer_carries_them() {
    // Issue 16: a message without annotations whose properties and application properties
    // are whole sections holds the transfer's bytes and nothing else (no ends kept).
    let properties = encoded(&full_properties());
    let application = b"\x00\x53\x74\xc1\x05\x02\xa1\x01k\x41".to_vec();
    let body = [&b"\x00\x53\x75\xb0\x00\x00\x04\x00"[..], &[7; 1024]].concat();
    let transfer = [&properties[..], &application, &body].concat();
    let parsed = parse_message(Bytes::from(transfer.clone())).expect("parses");
    assert!(!parsed.keeps_section_ends());
    assert_eq!(
        parsed.held_bytes(),
        &transfer[..],
        "the transfer's bytes, no more"
    );
    assert_eq!(parsed.body(), &body[..]);
    assert_eq!(parsed.system().message_id(), Some("id-1"));
}

#[test]
fn ingress_refuses_header_sections_past_the_limit_naming_their_size() {
    let properties = encoded(&Properties {
        message_id: Some(MessageId::String("m".into())),
        ..Properties::default()
    });
    let mut encoded = properties.clone();
    encoded.extend_from_slice(&[0x00, 0x53, 0x74, 0xd1]);
    // An application-properties map of one string key and a binary value past the limit.
    let value = vec![1u8; MAX_HEADER_SECTIONS];
    let inner = 4 + 3 + 5 + value.len();
    encoded.extend_from_slice(&(inner as u32).to_be_bytes());
    encoded.extend_from_slice(&2u32.to_be_bytes());
    encoded.extend_from_slice(&[0xa1, 0x01, b'k', 0xb0]);
    encoded.extend_from_slice(&(value.len() as u32).to_be_bytes());
    encoded.extend_from_slice(&value);
    encoded.extend_from_slice(b"\x00\x53\x75\xa0\x02hi");
    let error = parse_message(Bytes::from(encoded)).expect_err("refused");
    let text = error.to_string();
    assert!(
        text.contains(&format!(
            "take {} bytes; at most {MAX_HEADER_SECTIONS}",
            properties.len() + MAX_HEADER_SECTIONS + 20
        )),
        "{text}"
    );
}

#[test]
fn ingress_keeps_apart_only_the_identifiers_that_are_not_strings() {
    for (properties, apart) in [
        (full_properties(), 0),
        (
            Properties {
                message_id: Some(MessageId::Ulong(42)),
                correlation_id: Some(MessageId::Uuid(Uuid::from([7u8; 16]))),
                subject: Some("label".into()),
                group_id: Some("s".into()),
                ..Properties::default()
            },
            2,
        ),
    ] {
        let mut encoded = encoded(&properties);
        encoded.extend_from_slice(b"\x00\x53\x75\xa0\x02hi");
        let message = parse_message(Bytes::from(encoded)).expect("parses");
        let expected = system_values(&properties);
        assert_eq!(
            message.system().values(),
            expected.each_ref().map(|value| value.as_deref())
        );
        let text: usize = expected
            .iter()
            .filter_map(|value| match value {
                Some(std::borrow::Cow::Owned(text)) => Some(text.len() + 2),
                _ => None,
            })
            .sum();
        assert_eq!(
            message.system_text_len(),
            text + if apart > 0 { 4 } else { 0 }
        );
        assert_eq!(message.body(), b"\x00\x53\x75\xa0\x02hi");
    }
}

#[test]
fn an_id_the_broker_assigns_is_kept_as_8_bytes_and_written_into_the_section_on_the_way_out() {
    let body = b"\x00\x53\x75\xa0\x02hi";
    let sent_fields = Properties {
        subject: Some("created".into()),
        correlation_id: Some(MessageId::String("c-1".into())),
        content_type: Some(Symbol::from("text/plain")),
        ..Properties::default()
    };
    for properties in [None, Some(Properties::default()), Some(sent_fields)] {
        let mut sent = properties.as_ref().map(encoded).unwrap_or_default();
        let section_length = sent.len();
        sent.extend_from_slice(body);
        let message = parse_message(Bytes::from(sent)).expect("parses");
        let id = assigned_text(&message);
        assert_eq!(message.system().message_id(), Some(id.as_str()));
        assert_eq!(
            message.properties_section().len(),
            section_length,
            "the section as sent"
        );
        assert_eq!(message.body(), body);
        assert_eq!(message.system_text_len(), 0, "no text kept for the id");
        // The sections, the 8-byte word the id's GUID is made of and nothing else.
        assert_eq!(message.held_bytes().len(), section_length + body.len() + 8);
        let out = delivered(&message);
        assert_eq!(out.message_id, Some(MessageId::String(id.clone())));
        let mut expected = properties.unwrap_or_default();
        expected.message_id = Some(MessageId::String(id));
        assert_eq!(out, expected, "the sent fields after the id");
    }
}

#[test]
fn the_properties_field_count_is_read_from_the_list_constructor() {
    // rule TTL-2: only a list that reaches creation-time (its tenth field) is decoded to
    // lower absolute-expiry-time.
    let with_times = serde_amqp::to_vec(&Properties {
        message_id: Some(fe2o3_amqp_types::messaging::MessageId::String("m".into())),
        absolute_expiry_time: Some(serde_amqp::primitives::Timestamp::from_milliseconds(9)),
        creation_time: Some(serde_amqp::primitives::Timestamp::from_milliseconds(1)),
        ..Properties::default()
    })
    .expect("encodes");
    assert_eq!(properties_count(&with_times), CREATION_TIME_COUNT);
    let id_only = serde_amqp::to_vec(&Properties {
        message_id: Some(fe2o3_amqp_types::messaging::MessageId::String("m".into())),
        ..Properties::default()
    })
    .expect("encodes");
    assert_eq!(properties_count(&id_only), 1);
    let list32 =
        b"\x00\x53\x73\xd0\x00\x00\x00\x0e\x00\x00\x00\x0a\x40\x40\x40\x40\x40\x40\x40\x40\x40\x40";
    assert_eq!(properties_count(list32), 10);
    for other in [&b""[..], b"\x00\x53\x73\x45", b"\x00\x53\x73\x40", b"\x40"] {
        assert_eq!(properties_count(other), 0, "{other:x?}");
    }
}

/// A data section with this content.
fn data(content: &[u8]) -> Vec<u8> {
    [&[0x00, 0x53, 0x75, 0xa0, content.len() as u8][..], content].concat()
}

#[test]
fn the_body_is_every_body_section_in_order_whatever_lies_between() {
    let application = vec![0x00, 0x53, 0x74, 0xc1, 0x01, 0x00];
    let back_to_back = [data(b"one"), data(b"two")].concat();
    let message = parse_message(Bytes::from(back_to_back.clone())).expect("parsed");
    assert_eq!(message.body(), &back_to_back[..]);
    // A section between two body sections (out of the spec's order, accepted): the
    // body sections are joined without it.
    let apart = [data(b"one"), application.clone(), data(b"two")].concat();
    let message = parse_message(Bytes::from(apart)).expect("parsed");
    assert_eq!(message.body(), &back_to_back[..]);
    assert_eq!(message.application_properties_section(), &application[..]);
    // More body sections than are kept inline, with one section between: all of them,
    // in order.
    let parts: Vec<Vec<u8>> = (0..7u8).map(|index| data(&[b'a' + index; 3])).collect();
    let mut sections = parts[..5].to_vec();
    sections.push(application.clone());
    sections.extend_from_slice(&parts[5..]);
    let message = parse_message(Bytes::from(sections.concat())).expect("parsed");
    assert_eq!(message.body(), &parts.concat()[..]);
}

#[test]
fn the_section_of_an_assigned_id_alone_is_the_one_written_with_the_id() {
    let id = ids::GuidText::new(&ids::unique_guid_bytes());
    let written = sections::with_message_id(&[], &(0..0), id.as_str());
    assert_eq!(
        written.as_slice(),
        &[&ASSIGNED_ID_ONLY[..], id.as_bytes()].concat()[..]
    );
    let decoded: Properties = serde_amqp::from_slice(written.as_slice()).expect("decodes");
    assert_eq!(
        decoded.message_id,
        Some(MessageId::String(id.as_str().to_string()))
    );
}

#[test]
fn a_message_without_a_header_has_the_amqp_defaults() {
    // AMQP 1.0 §3.2.1: priority 4 when there is no header (it was stored as 0).
    let body = b"\x00\x53\x77\xa1\x02hi".to_vec();
    let message = parse_message(Bytes::from(body.clone())).expect("parsed");
    assert_eq!(
        message.header(),
        HeaderFields {
            durable: false,
            priority: 4,
            time_to_live: None,
        }
    );
    // A header with another priority keeps it.
    let mut with_header = vec![0x00, 0x53, 0x70, 0xc0, 0x04, 0x02, 0x41, 0x50, 0x09];
    with_header.extend_from_slice(&body);
    let message = parse_message(Bytes::from(with_header)).expect("parsed");
    assert_eq!(
        (message.header().durable, message.header().priority),
        (true, 9)
    );
}
