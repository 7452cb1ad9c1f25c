//! The one-allocation message (issue 16): where the system properties are read from, what
//! a change does to the other copies, what the fixed fields keep.

use std::time::Duration;

use fe2o3_amqp_types::messaging::{MessageId, Properties};
use fe2o3_amqp_types::primitives::{Binary, Symbol, Uuid};

use super::*;

fn encoded(properties: &Properties) -> Vec<u8> {
    serde_amqp::to_vec(properties).expect("encodes")
}

fn with_properties(properties: &Properties) -> Message {
    let section = encoded(properties);
    let values = crate::encoding::sections::system_values(properties);
    Message::from_parts(
        [b"", &section, b"", b"\x00\x53\x75\xa0\x02hi"],
        values.each_ref().map(|value| value.as_deref()),
    )
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

#[test]
fn string_properties_are_read_from_the_section_without_a_copy() {
    let message = with_properties(&full_properties());
    let system = message.system();
    assert_eq!(system.message_id(), Some("id-1"));
    assert_eq!(system.to(), Some("to-1"));
    assert_eq!(system.subject(), Some("label"));
    assert_eq!(system.reply_to(), Some("reply-q"));
    assert_eq!(system.correlation_id(), Some("corr-1"));
    assert_eq!(system.content_type(), Some("application/json"));
    assert_eq!(system.session_id(), Some("session-1"));
    assert_eq!(system.reply_to_session_id(), Some("reply-session"));
    assert_eq!(message.system_text_len(), 0, "no text beside the section");
    assert_eq!(message.body(), b"\x00\x53\x75\xa0\x02hi");
}

#[test]
fn identifiers_that_are_not_strings_keep_their_text_beside_the_section() {
    let properties = Properties {
        message_id: Some(MessageId::Ulong(42)),
        correlation_id: Some(MessageId::Uuid(Uuid::from([7u8; 16]))),
        group_id: Some("s".into()),
        ..Properties::default()
    };
    let message = with_properties(&properties);
    let expected = crate::encoding::sections::system_values(&properties);
    assert_eq!(message.system().message_id(), expected[0].as_deref());
    assert_eq!(message.system().message_id(), Some("42"));
    assert_eq!(message.system().correlation_id(), expected[1].as_deref());
    assert_eq!(message.system().session_id(), Some("s"));
    // Each kept apart with its 2-byte length, then the text's 4-byte length.
    let text = expected[0].as_deref().unwrap().len() + expected[1].as_deref().unwrap().len();
    assert_eq!(message.system_text_len(), text + 2 * 2 + 4);
    assert_eq!(
        message.body(),
        b"\x00\x53\x75\xa0\x02hi",
        "the body ends before the text"
    );
    assert_eq!(message.system().to(), None);
}

#[test]
fn a_binary_message_id_and_values_the_section_does_not_hold_are_kept_as_text() {
    let properties = Properties {
        message_id: Some(MessageId::Binary(Binary::from(vec![1, 2, 3]))),
        ..Properties::default()
    };
    let mut message = with_properties(&properties);
    let id = crate::encoding::sections::system_values(&properties)[0]
        .clone()
        .map(|text| text.into_owned());
    assert_eq!(message.system().message_id(), id.as_deref());
    // A value set apart from the section (a rule action, a test) is text of its own.
    let changed = message.system().with(SystemField::Subject, Some("set"));
    message.set_system(changed);
    assert_eq!(message.system().subject(), Some("set"));
    assert_eq!(message.system().message_id(), id.as_deref());
}

#[test]
fn values_far_into_a_long_section_are_read_from_it() {
    // The user id comes before `to` in the list: 70,000 bytes of it push `to` past what a
    // 16-bit offset reaches (no offset is kept: the section is read when asked).
    let properties = Properties {
        user_id: Some(Binary::from(vec![0u8; 70_000])),
        to: Some("far".into()),
        message_id: Some(MessageId::String("near".into())),
        ..Properties::default()
    };
    let message = with_properties(&properties);
    assert_eq!(message.system().to(), Some("far"));
    assert_eq!(message.system().message_id(), Some("near"));
    assert_eq!(message.system_text_len(), 0);
}

#[test]
fn a_section_that_is_not_a_properties_list_does_not_hide_the_values() {
    for section in [
        &b"\x00\x53\x73\xc0\xff\x05"[..],
        b"\x00",
        b"\x12\x34",
        b"\x00\x53\x73\x45",
    ] {
        let message = Message::from_parts(
            [b"", section, b"", b"body"],
            [Some("id"), None, None, None, None, Some("s"), None, None],
        );
        assert_eq!(message.system().message_id(), Some("id"));
        assert_eq!(message.system().session_id(), Some("s"));
        assert_eq!(message.properties_section(), section);
    }
}

#[test]
fn sections_back_to_back_build_the_same_message_as_sections_apart() {
    let section = encoded(&full_properties());
    let application = b"\x00\x53\x74\xc1\x01\x00";
    let body = b"\x00\x53\x75\xa0\x03abc";
    let joined = [&section[..], application, body].concat();
    let properties = full_properties();
    let values = crate::encoding::sections::system_values(&properties);
    let values = values.each_ref().map(|value| value.as_deref());
    let apart = Message::from_parts([b"", &section, application, body], values);
    let together = Message::from_joined(
        HeaderFields::default(),
        &joined,
        [0, section.len(), application.len(), body.len()],
        values,
        None,
    );
    for message in [&apart, &together] {
        assert_eq!(message.properties_section(), &section[..]);
        assert_eq!(message.application_properties_section(), application);
        assert_eq!(message.body(), body);
        assert_eq!(message.system().values(), apart.system().values());
        assert_eq!(message.encoded_size(), joined.len() + 16);
    }
}

#[test]
fn a_change_to_one_copy_leaves_the_others_as_they_were() {
    let original = with_properties(&full_properties());
    let mut copy = original.clone();
    copy.edit_extras(|extras| extras.original_sequence_number = Some(9));
    copy.set_hop_count(2);
    copy.set_header(HeaderFields {
        durable: true,
        priority: 9,
        time_to_live: Some(Duration::from_millis(1500)),
    });
    assert_eq!(copy.extras().original_sequence_number, Some(9));
    assert_eq!(copy.hop_count(), 2);
    assert_eq!(
        copy.header().time_to_live,
        Some(Duration::from_millis(1500))
    );
    assert_eq!(original.extras().original_sequence_number, None);
    assert_eq!(original.hop_count(), 0);
    assert_eq!(original.header(), HeaderFields::default());
    assert_eq!(copy.body(), original.body());
    assert_eq!(copy.system().values(), original.system().values());

    let mut replaced = copy.clone();
    replaced.set_properties_section(&encoded(&Properties {
        message_id: Some(MessageId::String("id-2".into())),
        ..Properties::default()
    }));
    assert_eq!(copy.properties_section(), original.properties_section());
    // The values stay what they were, now as text beside the new section.
    assert_eq!(replaced.system().message_id(), Some("id-1"));
    assert_eq!(replaced.extras().original_sequence_number, Some(9));
    assert_eq!(replaced.hop_count(), 2);
}

#[test]
fn the_only_copy_changes_in_place() {
    let mut message = with_properties(&full_properties());
    let before = message.body().as_ptr();
    message.set_hop_count(1);
    assert_eq!(message.body().as_ptr(), before, "no new allocation");
    // The first rare field makes room for their pointer (a new allocation); after that
    // they change in place too.
    message.edit_extras(|extras| extras.dead_letter_source = Some("q".into()));
    let with_extras = message.body().as_ptr();
    message.edit_extras(|extras| extras.original_sequence_number = Some(4));
    message.set_hop_count(2);
    assert_eq!(message.body().as_ptr(), with_extras, "no new allocation");
    assert_eq!(message.extras().dead_letter_source.as_deref(), Some("q"));
    assert_eq!(message.extras().original_sequence_number, Some(4));
    assert_eq!(message.hop_count(), 2);
    assert_eq!(message.body(), b"\x00\x53\x75\xa0\x02hi");
}

#[test]
fn a_time_to_live_is_kept_in_whole_milliseconds_and_none_stays_none() {
    let mut message = Message::with_body(b"x");
    assert_eq!(message.header().time_to_live, None);
    for ttl in [
        Duration::ZERO,
        Duration::from_millis(1),
        Duration::from_millis(u32::MAX.into()),
    ] {
        message.set_header(HeaderFields {
            time_to_live: Some(ttl),
            ..HeaderFields::default()
        });
        assert_eq!(message.header().time_to_live, Some(ttl));
    }
    // `header.ttl` is a `uint` of milliseconds: a longer one is the longest AMQP carries.
    message.set_header(HeaderFields {
        time_to_live: Some(Duration::from_secs(86_400 * 365 * 1000)),
        ..HeaderFields::default()
    });
    assert_eq!(
        message.header().time_to_live,
        Some(Duration::from_millis(u32::MAX.into()))
    );
    message.set_header(HeaderFields::default());
    assert_eq!(message.header().time_to_live, None);
}

#[test]
fn a_value_the_message_no_longer_has_is_absent_though_the_section_holds_it() {
    let mut message = with_properties(&full_properties());
    let changed = message.system().with(SystemField::Subject, None);
    message.set_system(changed);
    assert_eq!(message.system().subject(), None);
    assert_eq!(message.system().to(), Some("to-1"));
    assert_eq!(message.system().session_id(), Some("session-1"));
    let system = message.system();
    let values = system.values();
    assert_eq!(values[SystemField::Subject as usize], None);
    assert_eq!(
        values[SystemField::ContentType as usize],
        Some("application/json")
    );
    // A length marking it absent, then the text's length.
    assert_eq!(message.system_text_len(), 2 + 4);
    assert_eq!(message.body(), b"\x00\x53\x75\xa0\x02hi");
    assert_eq!(
        message.encoded_size(),
        with_properties(&full_properties()).encoded_size()
    );
}

#[test]
fn the_fixed_fields_fit_in_2_bytes() {
    // Issues 16 and 43: the head rides in front of the bytes of every stored message; with
    // the count and the length, 8 bytes.
    assert_eq!(std::mem::size_of::<Head>(), 2);
    assert_eq!(std::mem::size_of::<Message>(), 8);
    let message = Message::with_body(b"\x00\x53\x75\xa0\x02hi");
    let start = message.0.head() as *const Head as usize;
    assert_eq!(
        message.bytes().as_ptr() as usize - start,
        6,
        "bytes 8 after the count"
    );
}

/// The sections of a message as an SDK sends them: properties, application properties, a
/// data section.
fn sdk_sections() -> (Vec<u8>, Vec<u8>, Vec<u8>) {
    let properties = encoded(&full_properties());
    let application = b"\x00\x53\x74\xc1\x05\x02\xa1\x01k\x41".to_vec();
    let body = [&b"\x00\x53\x75\xb0\x00\x00\x04\x00"[..], &[7; 1024]].concat();
    (properties, application, body)
}

#[test]
fn sections_found_by_their_descriptors_keep_no_ends() {
    // Issue 16: a message without annotations whose properties and application properties
    // are whole sections holds its bytes and nothing else (no ends, no time to live).
    let (properties, application, body) = sdk_sections();
    let all = full_properties();
    let values = crate::encoding::sections::system_values(&all);
    let values = values.each_ref().map(|value| value.as_deref());
    for sections in [
        [&[][..], &properties, &application, &body],
        [&[], &properties, &[], &body],
        [&[], &[], &application, &body],
        [&[], &[], &[], &body],
    ] {
        let message = Message::from_parts(sections, values);
        assert_eq!(message.head().bits & ENDS_KEPT, 0, "{sections:?}");
        let held: usize = sections.iter().map(|section| section.len()).sum();
        assert_eq!(
            message.bytes().len(),
            held + message.system_text_len(),
            "only the bytes"
        );
        assert_eq!(message.sections(), sections);
        assert_eq!(message.properties_section(), sections[1]);
        assert_eq!(message.application_properties_section(), sections[2]);
        assert_eq!(message.body(), sections[3]);
    }
}

#[test]
fn the_long_descriptor_form_is_found_as_well() {
    // `0x00 0x80 <ulong>` describes a section as `0x00 0x53 <ubyte>` does.
    let properties = b"\x00\x80\x00\x00\x00\x00\x00\x00\x00\x73\xc0\x04\x01\xa1\x01a";
    let application = b"\x00\x80\x00\x00\x00\x00\x00\x00\x00\x74\xc1\x01\x00";
    let body = b"\x00\x53\x77\x40";
    let message = Message::from_parts([&[], properties, application, body], [None; 8]);
    assert_eq!(message.head().bits & ENDS_KEPT, 0);
    assert_eq!(
        message.sections(),
        [&[][..], &properties[..], &application[..], &body[..]]
    );
}

#[test]
fn sections_that_do_not_delimit_themselves_keep_their_ends() {
    let (properties, application, body) = sdk_sections();
    let annotations = [0xa3, 0x01, b'k', 0x41];
    for sections in [
        // Annotations have no section of their own here (their entries only).
        [&annotations[..], &properties, &application, &body],
        // Not a whole properties section; not one at all.
        [&[], &properties[..properties.len() - 1], &[], &body],
        [&[], b"\x12\x34", &[], &body],
        // Absent properties, and a body that starts as if it were some.
        [&[], &[], &[], &properties],
        [&[], &[], &[], &[&properties[..], &body].concat()],
        // Absent application properties, and a body that starts as if it were some.
        [&[], &properties, &[], &application],
        // Application properties with something after them in the same part.
        [
            &[],
            &properties,
            &[&application[..], &[0x40]].concat(),
            &body,
        ],
    ] {
        let message = Message::from_parts(sections, [None; 8]);
        assert_ne!(message.head().bits & ENDS_KEPT, 0, "{sections:?}");
        assert_eq!(message.sections(), sections, "read back where given");
        assert_eq!(message.encoded_size(), sections.concat().len() + 16);
    }
}

#[test]
fn a_time_to_live_follows_the_text_and_the_ends_precede_nothing() {
    let (properties, application, body) = sdk_sections();
    let ttl = HeaderFields {
        durable: true,
        priority: 9,
        time_to_live: Some(Duration::from_millis(0x0102_0304)),
    };
    let annotations = [0xa3, 0x01, b'k', 0x41];
    for annotated in [false, true] {
        let sections = [
            if annotated { &annotations[..] } else { &[] },
            &properties[..],
            &application[..],
            &body[..],
        ];
        // A value kept apart as text: the text, then the time to live, then the ends.
        let mut message = Message::from_parts_apart(
            ttl,
            sections,
            [Some("7"), None, None, None, None, None, None, None],
            None,
        );
        assert_eq!(message.header(), ttl);
        assert_eq!(message.system().message_id(), Some("7"));
        assert_eq!(message.sections(), sections);
        assert_eq!(
            message.bytes().len(),
            sections.concat().len()
                + message.system_text_len()
                + TTL_LEN
                + if annotated { ENDS_LEN } else { 0 }
        );
        // A shared copy changed: the other keeps its time to live.
        let copy = message.clone();
        message.set_header(HeaderFields {
            time_to_live: None,
            ..ttl
        });
        assert_eq!(message.header().time_to_live, None);
        assert!(message.header().durable);
        assert_eq!(copy.header(), ttl);
        assert_eq!(message.sections(), sections);
        assert_eq!(message.system().message_id(), Some("7"));
        // Rebuilt with another section or other system properties, it keeps it.
        let mut rebuilt = copy.clone();
        rebuilt.set_application_properties_section(b"");
        assert_eq!(rebuilt.header(), ttl);
        assert_eq!(rebuilt.body(), &body[..]);
        let changed = rebuilt.system().with(SystemField::Subject, Some("s"));
        rebuilt.set_system(changed);
        assert_eq!(rebuilt.header(), ttl);
        assert_eq!(rebuilt.system().subject(), Some("s"));
        assert_eq!(rebuilt.system().message_id(), Some("7"));
        assert_eq!(rebuilt.annotation_entries(), sections[0]);
        assert_eq!(rebuilt.body(), &body[..]);
    }
}

#[test]
fn header_fields_and_hop_count_share_a_byte_without_disturbing_each_other() {
    let mut message = with_properties(&full_properties());
    let header = HeaderFields {
        durable: true,
        priority: 200,
        time_to_live: Some(Duration::from_millis(7)),
    };
    message.set_header(header);
    message.set_hop_count(3);
    assert_eq!(message.header(), header);
    assert_eq!(message.hop_count(), 3);
    message.set_header(HeaderFields::default());
    assert_eq!(message.hop_count(), 3, "the header leaves the hops alone");
    message.set_hop_count(u8::MAX);
    assert_eq!(
        message.hop_count(),
        MAX_HOPS,
        "hops saturate at what the head holds"
    );
    assert_eq!(message.header(), HeaderFields::default());
    assert_eq!(message.system().message_id(), Some("id-1"));
    // Beside everything else the head says follows the body: a text kept apart (a ulong
    // correlation id), a time to live, an assigned id's word and kept section ends
    // (annotations).
    let section = encoded(&Properties {
        correlation_id: Some(MessageId::Ulong(7)),
        ..Properties::default()
    });
    let mut apart = [None; 8];
    apart[SystemField::CorrelationId as usize] = Some("7");
    let id = crate::encoding::ids::unique_guid_bytes();
    let annotations = b"\xa3\x01k\xa1\x01v";
    let mut full = Message::from_parts_apart(
        header,
        [annotations, &section, b"", b"\x00\x53\x75\xa0\x02hi"],
        apart,
        Some(id),
    );
    assert!(full.keeps_section_ends());
    for hops in 0..=MAX_HOPS {
        full.set_hop_count(hops);
        assert_eq!(full.hop_count(), hops);
        assert_eq!(full.header(), header);
        assert_eq!(full.assigned_id(), Some(id));
        assert_eq!(full.system().correlation_id(), Some("7"));
        assert_eq!(full.annotation_entries(), annotations);
        assert_eq!(full.body(), b"\x00\x53\x75\xa0\x02hi");
    }
}

#[test]
fn section_ends_are_kept_in_24_bits_up_to_the_header_limit() {
    // Annotations, properties and application properties right up to MAX_HEADER_SECTIONS
    // still come back whole, and the body after them.
    let annotations = [0xa3, 0x01, b'k', 0x41].repeat(2);
    let application = vec![0x40; MAX_HEADER_SECTIONS - annotations.len() - 100];
    let message = Message::from_parts([&annotations, &[], &application, b"body"], [None; 8]);
    assert_eq!(message.annotation_entries(), &annotations[..]);
    assert_eq!(
        message.application_properties_section().len(),
        application.len()
    );
    assert_eq!(message.body(), b"body");
}

#[test]
fn the_annotation_element_count_is_counted_from_the_entries() {
    for (entries, count) in [
        (Vec::new(), 0),
        // symbol "k" -> true
        (vec![0xa3, 0x01, b'k', 0x41], 2),
        // symbol "k" -> true, symbol "long" -> a 300-byte binary
        (
            [
                &[0xa3, 0x01, b'k', 0x41][..],
                &[0xa3, 0x04, b'l', b'o', b'n', b'g', 0xb0, 0, 0, 1, 44][..],
                &[7; 300][..],
            ]
            .concat(),
            4,
        ),
    ] {
        let message = Message::from_parts([&entries, &[], &[], b"\x00\x53\x77\x40"], [None; 8]);
        assert_eq!(message.annotation_element_count(), count);
    }
}

#[test]
fn broker_properties_merge_into_the_section_after_those_carried_from_a_source() {
    use crate::broker::message::application_property_text;
    use crate::broker::types::PropertyValue;
    let mut message = with_properties(&full_properties());
    // Carried from a forwarding source's dead-letter queue, merged on delivery.
    message.edit_extras(|extras| {
        extras.extra_properties = vec![
            (
                "DeadLetterReason".into(),
                PropertyValue::String("first".into()),
            ),
            ("kept".into(), PropertyValue::Long(1)),
        ]
    });
    let before = message.size();
    let grown = message.merge_application_properties(&[(
        "DeadLetterReason".into(),
        PropertyValue::String("second".into()),
    )]);
    assert_eq!(message.size() as i64 - before as i64, grown);
    assert!(grown > 0);
    assert_eq!(
        application_property_text(&message, "DeadLetterReason").as_deref(),
        Some("second"),
        "the later reason wins"
    );
    assert!(message.extras().extra_properties.is_empty());
    assert!(
        !message.application_properties_section().is_empty(),
        "the carried ones are in the section now"
    );
    assert_eq!(message.system().message_id(), Some("id-1"));
    // Nothing to merge changes nothing.
    let same = message.clone();
    assert_eq!(message.merge_application_properties(&[]), 0);
    assert_eq!(
        message.application_properties_section(),
        same.application_properties_section()
    );
}

#[test]
fn named_application_properties_come_out_and_the_rest_stay() {
    use crate::broker::message::application_property_text;
    use crate::broker::types::PropertyValue;
    let mut message = with_properties(&full_properties());
    message.merge_application_properties(&[
        (
            "DeadLetterReason".into(),
            PropertyValue::String("why".into()),
        ),
        ("kept".into(), PropertyValue::String("yes".into())),
        ("DeadLetterErrorDescription".into(), PropertyValue::Long(3)),
    ]);
    message.remove_application_properties(&["DeadLetterReason", "DeadLetterErrorDescription"]);
    assert_eq!(
        application_property_text(&message, "DeadLetterReason"),
        None
    );
    assert_eq!(
        application_property_text(&message, "kept").as_deref(),
        Some("yes")
    );
    let kept_only = message.application_properties_section().to_vec();
    message.remove_application_properties(&["kept"]);
    assert!(
        message.application_properties_section().is_empty(),
        "no section left"
    );
    assert!(kept_only.len() > 4);
    assert_eq!(message.system().message_id(), Some("id-1"));
    // A section that is not a readable map is left as it was.
    let unreadable = b"\x00\x53\x74\xc1\x09\x02";
    let mut odd = Message::from_parts([&[], &[], unreadable, b"\x00\x53\x77\x40"], [None; 8]);
    odd.remove_application_properties(&["DeadLetterReason"]);
    assert_eq!(odd.application_properties_section(), unreadable);
}

#[test]
fn merged_properties_never_take_the_header_sections_past_their_limit() {
    use crate::broker::message::application_property_text;
    use crate::broker::types::PropertyValue;
    let mut message = with_properties(&full_properties());
    let big = |name: &str| {
        vec![(
            name.to_string(),
            PropertyValue::String("v".repeat(MAX_HEADER_SECTIONS / 2)),
        )]
    };
    assert!(message.merge_application_properties(&big("first")) > 0);
    let section = message.application_properties_section().to_vec();
    assert_eq!(message.merge_application_properties(&big("second")), 0);
    assert_eq!(
        message.application_properties_section(),
        &section[..],
        "left as it was"
    );
    assert!(application_property_text(&message, "first").is_some());
    assert_eq!(application_property_text(&message, "second"), None);
    assert_eq!(message.system().message_id(), Some("id-1"));
}

#[test]
fn a_leading_section_is_measured_as_the_codec_measures_it() {
    use crate::encoding::codec::value_length;
    let map32 = b"\x00\x53\x74\xd1\x00\x00\x00\x08\x00\x00\x00\x02\xa1\x01k\x41\x40";
    for (bytes, code) in [
        (&b"\x00\x53\x73\x45"[..], PROPERTIES),
        (b"\x00\x53\x73\xc0\x02\x01\x40\x00\x53\x75", PROPERTIES),
        (
            b"\x00\x53\x73\xd0\x00\x00\x00\x05\x00\x00\x00\x01\x40",
            PROPERTIES,
        ),
        (b"\x00\x53\x74\xc1\x01\x00", APPLICATION_PROPERTIES),
        (&map32[..], APPLICATION_PROPERTIES),
        // A described null: the codec's path.
        (b"\x00\x53\x73\x40", PROPERTIES),
    ] {
        let length = value_length(bytes, 0).expect("whole");
        assert_eq!(leading_section(bytes, code), length, "{bytes:x?}");
        // Another kind of section: none of this kind.
        assert_eq!(leading_section(bytes, code + 1), 0);
        // Cut short: nothing readable.
        assert_eq!(leading_section(&bytes[..length - 1], code), 0);
    }
}

/// A delivered properties section, decoded.
fn delivered(message: &Message) -> Properties {
    let section = message.properties_section();
    serde_amqp::from_slice(message.delivered_properties(section).as_slice())
        .expect("a properties section")
}

#[test]
fn an_assigned_id_stays_the_same_through_every_change_to_the_message() {
    // A properties section holding a null message-id.
    let mut sent = b"\x00\x53\x73\xc0\x02\x01\x40".to_vec();
    sent.extend_from_slice(b"\x00\x53\x75\xa0\x02hi");
    // As ingress builds it: the id the broker assigned kept beside the sections.
    let original = Message::from_joined(
        HeaderFields::default(),
        &sent,
        [0, 7, 0, sent.len() - 7],
        [None; 8],
        Some(crate::encoding::ids::unique_guid_bytes()),
    );
    let id = original.assigned_id();
    assert!(id.is_some());
    let mut message = original.clone();
    let ttl = HeaderFields {
        durable: true,
        priority: 7,
        time_to_live: Some(Duration::from_millis(1500)),
    };
    message.set_header(ttl);
    assert_eq!(message.assigned_id(), id, "a time to live added");
    assert_eq!(message.header(), ttl);
    message.merge_application_properties(&[(
        "DeadLetterReason".to_string(),
        crate::broker::types::PropertyValue::String("why".into()),
    )]);
    assert_eq!(message.assigned_id(), id, "application properties merged");
    let changed = message.system().with(SystemField::Subject, Some("s"));
    message.set_system(changed);
    assert_eq!(message.assigned_id(), id, "another system property set");
    assert_eq!(message.system().subject(), Some("s"));
    message.set_hop_count(3);
    assert_eq!(message.assigned_id(), id);
    assert_eq!(message.header(), ttl, "the time to live beside the id");
    assert_eq!(message.body(), b"\x00\x53\x75\xa0\x02hi");
    let text = crate::encoding::ids::GuidText::new(&id.unwrap());
    assert_eq!(
        delivered(&message).message_id,
        Some(MessageId::String(text.as_str().to_string()))
    );
    // The first copy was not changed.
    assert_eq!(original.header(), HeaderFields::default());
    assert_eq!(original.assigned_id(), id);
    // Built again from its stored parts (recovery: the sections and the system values),
    // it keeps the id as its 8-byte word.
    let system = message.system();
    let values = system.values();
    let recovered = Message::from_parts_with_header(message.header(), message.sections(), values);
    assert_eq!(recovered.assigned_id(), id);
    assert_eq!(recovered.system().values(), values);
    assert_eq!(recovered.bytes(), message.bytes());
}

#[test]
fn an_assigned_id_is_kept_as_the_word_its_guid_is_made_of() {
    let body = b"\x00\x53\x75\xa0\x02hi";
    let id = crate::encoding::ids::unique_guid_bytes();
    let message = Message::from_joined(
        HeaderFields::default(),
        body,
        [0, 0, 0, 7],
        [None; 8],
        Some(id),
    );
    assert_eq!(message.assigned_id(), Some(id));
    assert_eq!(
        message.held_bytes().len(),
        body.len() + 8,
        "the body and the word"
    );
    assert_eq!(message.body(), body);
    let text = crate::encoding::ids::GuidText::new(&id);
    assert_eq!(message.system().message_id(), Some(text.as_str()));
}

#[test]
fn an_assigned_guid_made_elsewhere_is_written_into_the_properties_section() {
    // An older build's random GUID, read back from its log (recovery gives the system
    // values), or one given to ingress: no word makes it, so the section holds it.
    let guid = "60b1549f-3f8d-4cad-a813-01cca7b60a70";
    let bytes = crate::encoding::ids::parse_guid_text(guid).expect("a GUID");
    assert_eq!(crate::encoding::ids::guid_word(&bytes), None);
    let expected = Properties {
        message_id: Some(MessageId::String(guid.into())),
        subject: Some("s".into()),
        ..Properties::default()
    };
    let sent = Properties {
        message_id: None,
        ..expected.clone()
    };
    let section = encoded(&sent);
    let mut values = [None; 8];
    values[SystemField::MessageId as usize] = Some(guid);
    values[SystemField::Subject as usize] = Some("s");
    let recovered = Message::from_parts([b"", &section, b"", b"\x00\x53\x75\xa0\x02hi"], values);
    // Ingress with the id given (the subject read from the section, a ulong correlation
    // id kept apart as text).
    let with_ulong = Properties {
        correlation_id: Some(MessageId::Ulong(7)),
        ..sent.clone()
    };
    let section_with_ulong = encoded(&with_ulong);
    let mut apart = [None; 8];
    apart[SystemField::CorrelationId as usize] = Some("7");
    let ingress = Message::from_parts_apart(
        HeaderFields::default(),
        [b"", &section_with_ulong, b"", b"\x00\x53\x75\xa0\x02hi"],
        apart,
        Some(bytes),
    );
    for (message, expected) in [
        (&recovered, expected.clone()),
        (
            &ingress,
            Properties {
                correlation_id: Some(MessageId::Ulong(7)),
                ..expected
            },
        ),
    ] {
        assert_eq!(message.assigned_id(), None);
        assert_eq!(message.system().message_id(), Some(guid));
        assert_eq!(message.system().subject(), Some("s"));
        let section: Properties =
            serde_amqp::from_slice(message.properties_section()).expect("a properties section");
        assert_eq!(section, expected, "the section holds it");
        assert_eq!(delivered(message), expected);
        assert_eq!(message.body(), b"\x00\x53\x75\xa0\x02hi");
    }
    assert_eq!(ingress.system().correlation_id(), Some("7"));
}

#[test]
fn an_id_the_section_holds_is_never_taken_for_an_assigned_one() {
    let guid = "0f203142-5364-4586-97a8-b9cadbecfd0e";
    let uuid = Properties {
        message_id: Some(MessageId::Uuid(Uuid::from(
            crate::encoding::ids::parse_guid_text(guid).unwrap(),
        ))),
        ..Properties::default()
    };
    let string = Properties {
        message_id: Some(MessageId::String(guid.into())),
        ..Properties::default()
    };
    for properties in [uuid, string] {
        let message = with_properties(&properties);
        assert_eq!(message.system().message_id(), Some(guid));
        assert_eq!(message.assigned_id(), None, "{properties:?}");
        assert_eq!(delivered(&message), properties, "delivered as sent");
    }
    // Text the broker would not have written (upper case) stays text.
    let upper = guid.to_uppercase();
    let message = Message::from_parts(
        [b"", b"", b"", b"\x00\x53\x75\xa0\x02hi"],
        [
            Some(upper.as_str()),
            None,
            None,
            None,
            None,
            None,
            None,
            None,
        ],
    );
    assert_eq!(message.assigned_id(), None);
    assert_eq!(message.system().message_id(), Some(upper.as_str()));
}
