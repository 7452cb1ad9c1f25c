//! Round trips of every command and notification the codec carries, and what does not
//! cross or does not decode.

use std::time::Duration;

use tokio::sync::mpsc;

use super::codec::{self, ClientFrame, ServerFrame, SinkIds};
use super::test_support::{
    Table, assert_comes_back, body, decode_client_frame, in_session, reply_to,
};
use crate::broker::entity::settings::EntitySettings;
use crate::broker::entity::state::{ForwardKey, Lock};
use crate::broker::entity::{
    BatchedSend, Command, Delivery, EntityCounts, Notification, NotificationSender, Record, Reply,
    RequestId, SessionOperation, TransactionWork,
};
use crate::broker::message::Message;
use crate::broker::types::{
    EntityError, LockToken, MessageState, PropertyValue, ReceiveMode, ReceiverId, SequenceNumber,
    Settlement, SubQueue, Timestamp,
};

/// Encodes, decodes and encodes again: the same bytes and the same Debug text.
fn round_trip_command(command: Command) {
    let mut sinks = Table::default();
    let frame = codec::encode_command("queue/path", &command, &mut sinks).expect("encodes");
    let decoded = decode_client_frame(&frame[4..]);
    let ClientFrame::Command {
        path,
        command: back,
    } = decoded
    else {
        panic!("a command frame");
    };
    assert_eq!(path, "queue/path");
    let again = codec::encode_command("queue/path", &back, &mut Table::default()).expect("encodes");
    assert_comes_back(&command, &back, &frame, &again);
    assert_eq!(
        u32::from_be_bytes(frame[..4].try_into().unwrap()) as usize,
        frame.len() - 4
    );
}

fn round_trip_notification(notification: Notification) {
    let frame = codec::encode_notification(9, &notification).expect("encodes");
    let ServerFrame::Notification {
        sink,
        notification: back,
    } = codec::decode_server_frame(&frame[4..]).expect("decodes")
    else {
        panic!("a notification frame");
    };
    assert_eq!(sink, 9);
    assert_eq!(format!("{back:?}"), format!("{notification:?}"));
    assert_eq!(
        codec::encode_notification(9, &back).expect("encodes"),
        frame
    );
}

fn rich_message() -> Message {
    let mut message = in_session("payload", "session-1");
    let mut header = message.header();
    header.durable = true;
    header.priority = 7;
    header.time_to_live = Some(Duration::from_secs(90));
    message.set_header(header);
    message.set_hop_count(2);
    message.edit_extras(|extras| {
        extras.scheduled_enqueue_time = Some(Timestamp(1_800_000_000_000));
        extras.original_sequence_number = Some(41);
        extras.user_properties = vec![("color".into(), PropertyValue::String("red".into()))];
        extras.dead_letter_source = Some("source".into());
        extras.extra_properties = vec![("n".into(), PropertyValue::Long(-3))];
        extras.topic_sequence = Some((SequenceNumber(12), Timestamp(1_700_000_000_123)));
        extras.partition_key = Some("key".into());
    });
    message
}

fn record() -> Record {
    let mut record = Record::new(
        rich_message(),
        SequenceNumber(12),
        Timestamp(1_700_000_000_123),
        Some(Duration::from_secs(60)),
    );
    record.set_delivery_count(3);
    record.set_state(MessageState::Deferred);
    record.set_expires(true);
    record
}

fn lock() -> Lock {
    Lock {
        token: LockToken([7; 16]),
        until: Timestamp(1_700_000_030_000),
    }
}

fn settlements() -> Vec<Settlement> {
    vec![
        Settlement::Complete,
        Settlement::Abandon {
            properties: vec![("a".into(), PropertyValue::Bool(true))],
        },
        Settlement::Defer {
            properties: vec![("d".into(), PropertyValue::Double(1.5))],
        },
        Settlement::DeadLetter {
            reason: Some("reason".into()),
            description: None,
            properties: vec![("u".into(), PropertyValue::Uuid([1; 16]))],
        },
        Settlement::Release,
    ]
}

#[test]
fn every_command_that_crosses_comes_back_the_same() {
    let (sink, _keep) = mpsc::unbounded_channel();
    let (other, _keep_other) = mpsc::unbounded_channel();
    let mut commands = vec![
        Command::Commit {
            work: Box::new(TransactionWork {
                sends: vec![rich_message(), body("b")],
                via: vec![("elsewhere".into(), body("via"))],
                settlements: vec![(LockToken([2; 16]), settlements()[3].clone())],
            }),
            reply: reply_to(&sink, 1),
        },
        Command::Send {
            messages: vec![rich_message(), body("plain")].into(),
            reply: Some(reply_to(&sink, 2)),
        },
        Command::Send {
            messages: vec![body("settled")].into(),
            reply: None,
        },
        Command::SendBatch {
            sends: vec![
                BatchedSend {
                    messages: vec![body("x")].into(),
                    numbers: vec![(SequenceNumber(3), Timestamp(4))].into(),
                    request: Some(RequestId(5)),
                },
                BatchedSend {
                    messages: vec![].into(),
                    numbers: Default::default(),
                    request: None,
                },
            ],
            sink: other.clone(),
        },
        Command::DeadLetterOnArrival {
            messages: vec![(rich_message(), "reason".into(), "description".into())],
        },
        Command::SendForwarded {
            message: rich_message(),
            key: ForwardKey {
                source: "source".into(),
                sequence_number: SequenceNumber(9),
                enqueued_time: Timestamp(10),
            },
            floor: SequenceNumber(-1),
            reply: reply_to(&sink, 3),
        },
        Command::Forwarded {
            sequence_number: SequenceNumber(i64::MAX),
        },
        Command::ForwardFailed {
            sequence_number: SequenceNumber(4),
            reason: "r".into(),
            description: "d".into(),
        },
        Command::Return {
            receiver: Some(ReceiverId(2)),
            sub_queue: SubQueue::DeadLetter,
            record: Box::new(record()),
            lock: Some(lock()),
        },
        Command::Return {
            receiver: None,
            sub_queue: SubQueue::TransferDeadLetter,
            record: Box::new(record()),
            lock: None,
        },
        Command::AttachReceiver {
            receiver: ReceiverId(u64::MAX),
            sub_queue: SubQueue::Main,
            mode: ReceiveMode::ReceiveAndDelete,
            sink: sink.clone(),
        },
        Command::AttachSessionReceiver {
            receiver: ReceiverId(1),
            mode: ReceiveMode::PeekLock,
            session_id: Some("s".into()),
            wait: Duration::new(5, 123),
            sink: other.clone(),
        },
        Command::AttachSessionReceiver {
            receiver: ReceiverId(1),
            mode: ReceiveMode::PeekLock,
            session_id: None,
            wait: Duration::ZERO,
            sink: sink.clone(),
        },
        Command::ListSessions {
            last_updated: i64::MIN,
            skip: 3,
            top: 100,
            reply: reply_to(&sink, 6),
        },
        Command::DetachReceiver {
            receiver: ReceiverId(8),
        },
        Command::Fence {
            receiver: ReceiverId(9),
        },
        Command::Credit {
            receiver: ReceiverId(1),
            delivery_count: Some(u32::MAX),
            link_credit: 50,
            drain: true,
        },
        Command::Credit {
            receiver: ReceiverId(1),
            delivery_count: None,
            link_credit: 0,
            drain: false,
        },
        Command::Settle {
            token: LockToken([3; 16]),
            settlement: Settlement::Complete,
            reply: None,
        },
        Command::Peek {
            sub_queue: SubQueue::DeadLetter,
            from: SequenceNumber(1),
            count: 32,
            session_id: Some("s".into()),
            reply: reply_to(&sink, 7),
        },
        Command::ReceiveDeferred {
            sub_queue: SubQueue::Main,
            sequence_numbers: vec![SequenceNumber(1), SequenceNumber(2)],
            mode: ReceiveMode::PeekLock,
            reply: reply_to(&sink, 8),
        },
        Command::Take {
            sub_queue: SubQueue::Main,
            sequence_numbers: vec![SequenceNumber(3)],
            mode: ReceiveMode::ReceiveAndDelete,
            reply: reply_to(&sink, 9),
        },
        Command::Purge {
            sub_queue: SubQueue::Main,
            before: Some(Timestamp(5)),
            session_id: None,
            max: 1000,
            reply: reply_to(&sink, 10),
        },
        Command::CancelScheduled {
            sequence_numbers: vec![SequenceNumber(4)],
            reply: reply_to(&sink, 11),
        },
        Command::RenewLocks {
            tokens: vec![LockToken([4; 16]), LockToken([5; 16])],
            reply: reply_to(&sink, 12),
        },
        Command::UpdateSettings {
            settings: Box::new({
                let mut settings = EntitySettings::with_defaults("queue/path");
                settings.default_message_time_to_live = Some(Duration::from_millis(1500));
                settings.duplicate_detection_window = Some(Duration::from_secs(600));
                settings.forward_to = Some("next".into());
                settings.status = crate::config::EntityStatus::SendDisabled;
                settings.partitions = 16;
                settings.requires_session = true;
                settings
            }),
            reply: reply_to(&sink, 13),
        },
        Command::Describe {
            reply: reply_to(&sink, 14),
        },
        Command::Delete {
            reply: reply_to(&sink, 15),
        },
    ];
    for operation in [
        SessionOperation::RenewLock,
        SessionOperation::SetState(Some(vec![0, 1, 2])),
        SessionOperation::SetState(None),
        SessionOperation::GetState,
    ] {
        commands.push(Command::Session {
            session_id: "s".into(),
            operation,
            reply: reply_to(&sink, 16),
        });
    }
    for settlement in settlements() {
        commands.push(Command::Settle {
            token: LockToken([6; 16]),
            settlement: settlement.clone(),
            reply: Some(reply_to(&other, 17)),
        });
        commands.push(Command::SettleAll {
            tokens: vec![LockToken([6; 16])],
            settlement,
        });
    }
    for command in commands {
        round_trip_command(command);
    }
}

#[test]
fn sinks_are_named_once_and_what_waits_is_reported() {
    #[derive(Default)]
    struct Recording {
        table: Table,
        waits: Vec<(u64, u64)>,
        attaches: Vec<(u64, u64, bool)>,
    }
    impl SinkIds for Recording {
        fn id(&mut self, sink: &NotificationSender) -> u64 {
            self.table.id(sink)
        }
        fn waits(&mut self, sink: u64, request: RequestId) {
            self.waits.push((sink, request.0));
        }
        fn attaches(&mut self, sink: u64, receiver: ReceiverId, session: bool) {
            self.attaches.push((sink, receiver.0, session));
        }
    }
    let (first, _keep) = mpsc::unbounded_channel();
    let (second, _keep_second) = mpsc::unbounded_channel();
    let mut recording = Recording::default();
    let commands = [
        Command::Describe {
            reply: reply_to(&first, 1),
        },
        Command::AttachSessionReceiver {
            receiver: ReceiverId(4),
            mode: ReceiveMode::PeekLock,
            session_id: None,
            wait: Duration::ZERO,
            sink: second.clone(),
        },
        Command::SendBatch {
            sends: vec![
                BatchedSend {
                    messages: vec![body("x")].into(),
                    numbers: Default::default(),
                    request: Some(RequestId(2)),
                },
                BatchedSend {
                    messages: vec![body("y")].into(),
                    numbers: Default::default(),
                    request: None,
                },
            ],
            sink: first.clone(),
        },
        Command::AttachReceiver {
            receiver: ReceiverId(6),
            sub_queue: SubQueue::Main,
            mode: ReceiveMode::PeekLock,
            sink: first.clone(),
        },
    ];
    for command in &commands {
        codec::encode_command("q", command, &mut recording).expect("encodes");
    }
    assert_eq!(recording.table.0.len(), 2, "one id per channel");
    assert_eq!(recording.waits, [(0, 1), (0, 2)]);
    assert_eq!(recording.attaches, [(1, 4, true), (0, 6, false)]);
}

#[test]
fn every_notification_comes_back_the_same() {
    let delivery = Delivery {
        receiver: Some(ReceiverId(3)),
        record: record(),
        lock: Some(lock()),
        sub_queue: SubQueue::Main,
    };
    let peeked = Delivery {
        receiver: None,
        record: record(),
        lock: None,
        sub_queue: SubQueue::TransferDeadLetter,
    };
    let mut counts = EntityCounts {
        active: 1,
        scheduled: 2,
        deferred: 3,
        dead_letter: 4,
        transfer: 5,
        transfer_dead_letter: 6,
        size_in_bytes: 7,
        next_sequence_number: 8,
        last_activity: Timestamp(9),
        kept_alive: true,
        ..Default::default()
    };
    counts.totals.sent = 10;
    counts.totals.delivered = 11;
    counts.totals.completed = 12;
    counts.totals.abandoned = 13;
    counts.totals.dead_lettered = 14;
    counts.totals.expired = 15;
    counts.totals.scheduled = 16;
    counts.totals.dead_lettered_by_reason.ttl_expired = 17;
    counts.totals.dead_lettered_by_reason.application = 18;
    counts.totals.dead_lettered_by_reason.filter_evaluation = 19;
    counts
        .totals
        .dead_lettered_by_reason
        .max_delivery_count_exceeded = 20;
    counts
        .totals
        .dead_lettered_by_reason
        .max_transfer_hop_count_exceeded = 21;
    counts.totals.dead_lettered_by_reason.session_id_is_null = 22;
    counts.next_sequence_numbers[0] = 23;
    counts.next_sequence_numbers[15] = 24;
    let errors = vec![
        EntityError::LockLost,
        EntityError::QuotaExceeded {
            entity: "q".into(),
            size: 1,
            limit: 2,
        },
        EntityError::NotAllowed("a".into()),
        EntityError::LimitExceeded("b".into()),
        EntityError::MessageNotFound("c".into()),
        EntityError::Argument("d".into()),
        EntityError::AlreadyExists("e".into()),
        EntityError::SessionCannotBeLocked("f".into()),
        EntityError::SessionLockLost("g".into()),
        EntityError::Timeout("h".into()),
        EntityError::Disabled("i".into()),
        EntityError::NotFound("j".into()),
        EntityError::StorageFull("k".into()),
        EntityError::StorageFailed("l".into()),
    ];
    let replies = vec![
        Reply::Done,
        Reply::SequenceNumbers(vec![SequenceNumber(1), SequenceNumber(2)].into()),
        Reply::Expirations(vec![Timestamp(3)]),
        Reply::Messages(vec![delivery.clone(), peeked.clone()]),
        Reply::SessionState(Some(vec![1, 2, 3])),
        Reply::SessionState(None),
        Reply::Sessions(vec!["s1".into(), "s2".into()]),
        Reply::Counts(Box::new(counts)),
        Reply::Count(42),
    ];
    let mut notifications = vec![
        Notification::Deliver(delivery),
        Notification::Deliver(peeked),
        Notification::Fenced {
            receiver: ReceiverId(1),
        },
        Notification::Drained {
            receiver: ReceiverId(1),
            delivery_count: u32::MAX,
        },
        Notification::SessionAccepted {
            receiver: ReceiverId(1),
            session_id: "s".into(),
            locked_until: Timestamp(5),
        },
        Notification::ReceiverDetached {
            receiver: ReceiverId(1),
        },
        Notification::EntityDeleted {
            receiver: ReceiverId(1),
        },
        Notification::Moved {
            receiver: ReceiverId(u64::MAX),
        },
        Notification::SessionLost {
            receiver: ReceiverId(1),
        },
    ];
    for error in &errors {
        notifications.push(Notification::SessionRefused {
            receiver: ReceiverId(2),
            error: error.clone(),
        });
    }
    let mut all = Vec::new();
    for (at, reply) in replies.into_iter().enumerate() {
        all.push((RequestId(at as u64), Ok(reply)));
    }
    for (at, error) in errors.into_iter().enumerate() {
        all.push((RequestId(100 + at as u64), Err(error)));
    }
    for (request, result) in all {
        let copy = match &result {
            Ok(_) => None,
            Err(error) => Some(error.clone()),
        };
        notifications.push(Notification::Reply { request, result });
        if let Some(error) = copy {
            notifications.push(Notification::Replies {
                replies: vec![(request, Err(error)), (RequestId(0), Ok(Reply::Done))],
            });
        }
    }
    for notification in notifications {
        round_trip_notification(notification);
    }
}

#[test]
fn a_message_keeps_what_it_carries_in_transit() {
    let (sink, _keep) = mpsc::unbounded_channel();
    let command = Command::Send {
        messages: vec![rich_message()].into(),
        reply: Some(reply_to(&sink, 1)),
    };
    let frame = codec::encode_command("q", &command, &mut Table::default()).expect("encodes");
    let ClientFrame::Command {
        command: Command::Send { messages, .. },
        ..
    } = codec::decode_client_frame(&frame[4..], &mut |_| sink.clone()).expect("decodes")
    else {
        panic!("a send");
    };
    let message = &messages[0];
    let extras = message.extras();
    assert_eq!(extras.partition_key.as_deref(), Some("key"));
    assert_eq!(
        extras.topic_sequence,
        Some((SequenceNumber(12), Timestamp(1_700_000_000_123)))
    );
    assert_eq!(extras.original_sequence_number, Some(41));
    assert_eq!(message.system().session_id(), Some("session-1"));
    assert_eq!(message.body(), b"payload");
    assert_eq!(message.header().priority, 7);
    assert_eq!(message.hop_count(), 2);
}

#[test]
fn what_does_not_cross_is_refused_and_bad_frames_fail() {
    let (sink, _keep) = mpsc::unbounded_channel();
    let (staged, _) = mpsc::unbounded_channel();
    let stage = Command::Stage {
        sends: Vec::new(),
        dead_letters: Vec::new(),
        sink,
        staged,
    };
    let refused = codec::encode_command("q", &stage, &mut Table::default()).unwrap_err();
    assert!(refused.to_string().contains("Stage"), "{refused}");

    for body in [
        &[][..],
        &[1],
        &[1, 1, b'q', 99],
        &[3, 0, 9, 0],
        &[4, 1, b'q', 1, 0],
        &[77],
    ] {
        assert!(codec::decode_server_frame(body).is_err(), "{body:?}");
        assert!(
            codec::decode_client_frame(body, &mut |_| mpsc::unbounded_channel().0).is_err(),
            "{body:?}"
        );
    }
    // Truncated: every prefix of a good frame fails to decode.
    let (sink, _keep) = mpsc::unbounded_channel();
    let frame = codec::encode_command(
        "q",
        &Command::Send {
            messages: vec![rich_message()].into(),
            reply: Some(reply_to(&sink, 1)),
        },
        &mut Table::default(),
    )
    .expect("encodes");
    for end in 4..frame.len() {
        assert!(
            codec::decode_client_frame(&frame[4..end], &mut |_| sink.clone()).is_err(),
            "a prefix of {end} bytes"
        );
    }
}
