//! Topics through the proxy: a real topic task and its subscriptions' actors behind the
//! server (a local registry's), what a connection, `$management` or the admin API sends a
//! topic, and the round trip of every topic command and of the rules a topic answers with.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::codec::{self, ClientFrame, ServerFrame};
use super::test_support::{
    Table, assert_comes_back, body, decode_client_frame, next, reply_to, topic_codec,
};
use super::{Proxy, RemoteError, Target, serve};
use crate::broker::entity::state::ForwardKey;
use crate::broker::entity::{BatchedSend, Command, Notification, Reply, ReplyTo, RequestId};
use crate::broker::message::Message;
use crate::broker::registry::{Entity, Registry};
use crate::broker::rules::{FilterDefinition, Rule, RuleDefinition};
use crate::broker::topic::{RuleOperation, SubscriptionEntry, TopicCommand, TopicHandle};
use crate::broker::types::{
    EntityError, PropertyValue, ReceiveMode, ReceiverId, SequenceNumber, SubQueue, Timestamp,
};
use crate::clock::Clock;
use crate::config::{Config, EntityStatus, ParameterValue};

/// A proxy and a server on the two ends of a duplex stream; the server serves a local
/// registry with the topic `events` and its subscription `all`.
async fn connect() -> (Proxy, Arc<Registry>, JoinHandle<Result<(), RemoteError>>) {
    let namespace = Config::from_toml_str(
        "[[topics]]\nname = \"events\"\n[[topics.subscriptions]]\nname = \"all\"\n",
        "test",
    )
    .expect("a valid namespace");
    let registry = Registry::start(&namespace, Clock::system(), topic_codec(), None)
        .expect("the registry starts");
    registry.wait_ready().await;
    let (near, far) = tokio::io::duplex(64 * 1024);
    let serving = {
        let registry = registry.clone();
        tokio::spawn(serve(far, move |path| {
            Some(match registry.lookup(path)? {
                Entity::Queue(handle) | Entity::Subscription(handle) => Target::Entity(handle),
                Entity::Topic(handle) => Target::Topic(handle),
            })
        }))
    };
    (Proxy::start(near), registry, serving)
}

/// Sends a topic command and waits for its reply.
async fn ask(
    topic: &TopicHandle,
    command: impl FnOnce(ReplyTo) -> TopicCommand,
) -> Result<Reply, EntityError> {
    let (reply, mut replies) = ReplyTo::oneshot();
    topic.send(command(reply)).await.expect("handle open");
    match next(&mut replies).await {
        Notification::Reply { result, .. } => result,
        other => panic!("expected a reply, got {other:?}"),
    }
}

fn red_rule() -> Rule {
    RuleDefinition {
        name: "red".into(),
        filter: FilterDefinition::Sql("color = @color".into()),
        action: None,
        filter_parameters: vec![("@color".into(), ParameterValue::String("red".into()))],
        action_parameters: Vec::new(),
        created_at: 1_700_000_000_000,
    }
    .compile()
    .expect("the rule compiles")
}

fn rule_names(result: Result<Reply, EntityError>) -> Vec<String> {
    match result {
        Ok(Reply::Rules(rules)) => rules.into_iter().map(|rule| rule.name).collect(),
        other => panic!("expected rules, got {other:?}"),
    }
}

#[tokio::test]
async fn a_topic_publishes_schedules_and_manages_rules_through_the_proxy() {
    let (proxy, _registry, _serving) = connect().await;
    let topic = proxy.topic_handle("events");
    assert!(
        proxy.topic_handle("events").same_topic(&topic),
        "one handle per path"
    );

    // A receiver on the subscription, through the same proxy.
    let subscription = proxy.handle("events/Subscriptions/all");
    let (sink, mut deliveries) = mpsc::unbounded_channel();
    let receiver = ReceiverId(1);
    subscription
        .send(Command::AttachReceiver {
            receiver,
            sub_queue: SubQueue::Main,
            mode: ReceiveMode::ReceiveAndDelete,
            sink,
        })
        .await
        .expect("handle open");
    subscription
        .send(Command::Credit {
            receiver,
            delivery_count: Some(0),
            link_credit: 10,
            drain: false,
        })
        .await
        .expect("handle open");

    // Publish: the subscription gets its copy.
    let published = ask(&topic, |reply| TopicCommand::Publish {
        messages: vec![body("one")],
        reply: Some(reply),
    })
    .await;
    assert!(published.is_ok(), "{published:?}");
    match next(&mut deliveries).await {
        Notification::Deliver(delivery) => assert_eq!(delivery.message.body(), b"one"),
        other => panic!("expected a delivery, got {other:?}"),
    }

    // A batch of publishes: one notification answers those that wait.
    let (sink, mut replies) = mpsc::unbounded_channel();
    topic
        .send(TopicCommand::PublishBatch {
            sends: vec![
                BatchedSend {
                    messages: vec![body("two")].into(),
                    numbers: Default::default(),
                    request: Some(RequestId(7)),
                },
                BatchedSend {
                    messages: vec![body("three")].into(),
                    numbers: Default::default(),
                    request: None,
                },
            ],
            sink,
        })
        .await
        .expect("handle open");
    // The topic answers each publish that waits as it is stored.
    match next(&mut replies).await {
        Notification::Reply { request, result } => {
            assert_eq!(request, RequestId(7));
            assert!(result.is_ok(), "{result:?}");
        }
        Notification::Replies { replies } => {
            assert_eq!(replies.len(), 1);
            assert_eq!(replies[0].0, RequestId(7));
            assert!(replies[0].1.is_ok(), "{replies:?}");
        }
        other => panic!("expected the batch's replies, got {other:?}"),
    }
    for expected in [&b"two"[..], b"three"] {
        match next(&mut deliveries).await {
            Notification::Deliver(delivery) => assert_eq!(delivery.message.body(), expected),
            other => panic!("expected a delivery, got {other:?}"),
        }
    }

    // Rules: add, list, remove.
    let added = ask(&topic, |reply| TopicCommand::Rules {
        subscription: "all".into(),
        operation: RuleOperation::Add(Box::new(red_rule())),
        reply,
    })
    .await;
    assert!(matches!(added, Ok(Reply::Done)), "{added:?}");
    let listed = ask(&topic, |reply| TopicCommand::Rules {
        subscription: "all".into(),
        operation: RuleOperation::Enumerate { skip: 0, top: 10 },
        reply,
    })
    .await;
    let mut names = rule_names(listed);
    names.sort();
    assert_eq!(names, ["$Default", "red"]);
    let removed = ask(&topic, |reply| TopicCommand::Rules {
        subscription: "all".into(),
        operation: RuleOperation::Remove("$Default".into()),
        reply,
    })
    .await;
    assert!(matches!(removed, Ok(Reply::Done)), "{removed:?}");
    let listed = ask(&topic, |reply| TopicCommand::Rules {
        subscription: "all".into(),
        operation: RuleOperation::Enumerate { skip: 0, top: 10 },
        reply,
    })
    .await;
    match listed {
        Ok(Reply::Rules(mut rules)) => {
            assert_eq!(rules.len(), 1);
            // The topic stamps when it was added.
            assert!(rules[0].created_at > 1_700_000_000_000);
            rules[0].created_at = red_rule().created_at;
            assert_eq!(
                format!("{:?}", rules[0]),
                format!("{:?}", red_rule()),
                "the rule comes back as it was added, its parameters with it"
            );
        }
        other => panic!("expected rules, got {other:?}"),
    }
    // Only red messages reach the subscription now.
    let mut blue = body("blue");
    blue.edit_extras(|extras| {
        extras.user_properties = vec![("color".into(), PropertyValue::String("blue".into()))]
    });
    let mut red = body("red");
    red.edit_extras(|extras| {
        extras.user_properties = vec![("color".into(), PropertyValue::String("red".into()))]
    });
    for message in [blue, red] {
        let published = ask(&topic, |reply| TopicCommand::Publish {
            messages: vec![message],
            reply: Some(reply),
        })
        .await;
        assert!(published.is_ok(), "{published:?}");
    }

    // Schedule and cancel.
    let mut later = body("later");
    later.edit_extras(|extras| {
        extras.scheduled_enqueue_time = Some(Timestamp(Clock::system().now().0 + 3_600_000))
    });
    let numbers = match ask(&topic, |reply| TopicCommand::Schedule {
        messages: vec![later],
        reply,
    })
    .await
    {
        Ok(Reply::SequenceNumbers(numbers)) => numbers.to_vec(),
        other => panic!("expected the scheduled number, got {other:?}"),
    };
    assert_eq!(numbers.len(), 1);
    let scheduled = |result: Result<Reply, EntityError>| match result {
        Ok(Reply::Counts(counts)) => counts.scheduled,
        other => panic!("expected counts, got {other:?}"),
    };
    assert_eq!(
        scheduled(ask(&topic, |reply| TopicCommand::Describe { reply }).await),
        1
    );
    let cancelled = ask(&topic, |reply| TopicCommand::CancelScheduled {
        sequence_numbers: numbers,
        reply,
    })
    .await;
    assert!(matches!(cancelled, Ok(Reply::Done)), "{cancelled:?}");
    assert_eq!(
        scheduled(ask(&topic, |reply| TopicCommand::Describe { reply }).await),
        0
    );

    // Settings, and a subscription removed by name.
    let updated = ask(&topic, |reply| TopicCommand::Update {
        duplicate_detection: Some(Duration::from_secs(60)),
        auto_delete_on_idle: None,
        status: EntityStatus::Active,
        reply,
    })
    .await;
    assert!(matches!(updated, Ok(Reply::Done)), "{updated:?}");
    let missing = ask(&topic, |reply| TopicCommand::RemoveSubscription {
        name: "none".into(),
        reply,
    })
    .await;
    assert!(
        matches!(missing, Err(EntityError::NotFound(_))),
        "{missing:?}"
    );
    // The filter let the red message through only (the receiver took it at once).
    match next(&mut deliveries).await {
        Notification::Deliver(delivery) => assert_eq!(delivery.message.body(), b"red"),
        other => panic!("expected the red delivery, got {other:?}"),
    }
    assert!(
        deliveries.try_recv().is_err(),
        "the blue message was filtered out"
    );
}

#[tokio::test]
async fn what_is_not_a_topic_there_is_not_found_and_local_commands_are_refused_by_name() {
    let (proxy, _registry, _serving) = connect().await;
    // The subscription's path is an entity, not a topic: not found as a topic.
    let not_a_topic = proxy.topic_handle("events/Subscriptions/all");
    let described = ask(&not_a_topic, |reply| TopicCommand::Describe { reply }).await;
    assert_eq!(
        described.err(),
        Some(EntityError::NotFound("events/Subscriptions/all".into()))
    );
    let missing = proxy.topic_handle("missing");
    let described = ask(&missing, |reply| TopicCommand::Describe { reply }).await;
    assert_eq!(
        described.err(),
        Some(EntityError::NotFound("missing".into()))
    );

    // A subscription's actor does not cross nodes.
    let topic = proxy.topic_handle("events");
    let (commands, _inbox) = mpsc::channel(1);
    let refused = ask(&topic, |reply| TopicCommand::AddSubscription {
        entry: Box::new(SubscriptionEntry {
            name: "new".into(),
            handle: crate::broker::entity::EntityHandle::from_channel(
                "events/Subscriptions/new",
                commands,
            ),
            rules: Vec::new(),
            dead_letter_on_filter_errors: false,
            requires_session: false,
        }),
        reply,
    })
    .await;
    match refused {
        Err(EntityError::NotAllowed(text)) => assert!(text.contains("AddSubscription"), "{text}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    // The stream goes on.
    let described = ask(&topic, |reply| TopicCommand::Describe { reply }).await;
    assert!(matches!(described, Ok(Reply::Counts(_))), "{described:?}");
}

// ---- codec round trips ----

fn round_trip(command: TopicCommand) {
    let frame =
        codec::encode_topic_command("topic", &command, &mut Table::default()).expect("encodes");
    let decoded = decode_client_frame(&frame[4..]);
    let ClientFrame::TopicCommand {
        path,
        command: back,
    } = decoded
    else {
        panic!("a topic command frame");
    };
    assert_eq!(path, "topic");
    let again =
        codec::encode_topic_command("topic", &back, &mut Table::default()).expect("encodes");
    assert_comes_back(&command, &back, &frame, &again);
}

fn rules() -> Vec<Rule> {
    let every_parameter = vec![
        ("@s".into(), ParameterValue::String("text".into())),
        ("@i".into(), ParameterValue::Int(-5)),
        ("@l".into(), ParameterValue::Long(i64::MAX)),
        ("@d".into(), ParameterValue::Double(1.25)),
        ("@b".into(), ParameterValue::Bool(true)),
        (
            "@t".into(),
            ParameterValue::DateTime(638_000_000_000_000_000),
        ),
        ("@span".into(), ParameterValue::Duration(-10_000)),
        ("@g".into(), ParameterValue::Guid([9; 16])),
    ];
    let definitions = [
        RuleDefinition {
            name: "$Default".into(),
            filter: FilterDefinition::True,
            action: None,
            filter_parameters: Vec::new(),
            action_parameters: Vec::new(),
            created_at: 1,
        },
        RuleDefinition {
            name: "never".into(),
            filter: FilterDefinition::False,
            action: Some("SET sys.Label = 'x'".into()),
            filter_parameters: Vec::new(),
            action_parameters: Vec::new(),
            created_at: 2,
        },
        RuleDefinition {
            name: "sql".into(),
            filter: FilterDefinition::Sql(
                "s = @s AND i = @i AND l = @l AND d = @d AND b = @b AND t = @t AND span = @span AND g = @g"
                    .into(),
            ),
            action: Some("SET copied = @s".into()),
            filter_parameters: every_parameter,
            action_parameters: vec![("@s".into(), ParameterValue::String("v".into()))],
            created_at: 3,
        },
        RuleDefinition {
            name: "correlation".into(),
            filter: FilterDefinition::Correlation {
                fields: [
                    Some("correlation".into()),
                    None,
                    Some("to".into()),
                    None,
                    Some("label".into()),
                    None,
                    None,
                    Some("application/json".into()),
                ],
                properties: vec![
                    ("color".into(), PropertyValue::String("red".into())),
                    ("size".into(), PropertyValue::Long(3)),
                ],
            },
            action: None,
            filter_parameters: Vec::new(),
            action_parameters: Vec::new(),
            created_at: 4,
        },
    ];
    definitions
        .iter()
        .map(|definition| definition.compile().expect("the rule compiles"))
        .collect()
}

fn rich_message() -> Message {
    let mut message = body("payload");
    message.edit_extras(|extras| {
        extras.scheduled_enqueue_time = Some(Timestamp(1_800_000_000_000));
        extras.user_properties = vec![("color".into(), PropertyValue::String("red".into()))];
        extras.partition_key = Some("key".into());
    });
    message
}

#[test]
fn every_topic_command_that_crosses_comes_back_the_same() {
    let (sink, _keep) = mpsc::unbounded_channel();
    let (other, _keep_other) = mpsc::unbounded_channel();
    let mut commands = vec![
        TopicCommand::Publish {
            messages: vec![rich_message(), body("b")],
            reply: Some(reply_to(&sink, 1)),
        },
        TopicCommand::Publish {
            messages: vec![body("settled")],
            reply: None,
        },
        TopicCommand::PublishForwarded {
            message: rich_message(),
            key: ForwardKey {
                source: "source".into(),
                sequence_number: SequenceNumber(9),
                enqueued_time: Timestamp(10),
            },
            floor: SequenceNumber(-1),
            reply: reply_to(&sink, 2),
        },
        TopicCommand::PublishBatch {
            sends: vec![
                BatchedSend {
                    messages: vec![body("x")].into(),
                    numbers: Default::default(),
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
        TopicCommand::Schedule {
            messages: vec![rich_message()],
            reply: reply_to(&other, 3),
        },
        TopicCommand::CancelScheduled {
            sequence_numbers: vec![SequenceNumber(1), SequenceNumber(i64::MAX)],
            reply: reply_to(&sink, 4),
        },
        TopicCommand::RemoveSubscription {
            name: "all".into(),
            reply: reply_to(&sink, 5),
        },
        TopicCommand::Update {
            duplicate_detection: Some(Duration::from_millis(1500)),
            auto_delete_on_idle: None,
            status: EntityStatus::SendDisabled,
            reply: reply_to(&sink, 6),
        },
        TopicCommand::Update {
            duplicate_detection: None,
            auto_delete_on_idle: Some(Duration::from_secs(600)),
            status: EntityStatus::Active,
            reply: reply_to(&sink, 6),
        },
        TopicCommand::Describe {
            reply: reply_to(&sink, 7),
        },
        TopicCommand::Delete {
            reply: reply_to(&sink, 8),
        },
        TopicCommand::Rules {
            subscription: "all".into(),
            operation: RuleOperation::Remove("red".into()),
            reply: reply_to(&sink, 9),
        },
        TopicCommand::Rules {
            subscription: "all".into(),
            operation: RuleOperation::Enumerate { skip: 3, top: 100 },
            reply: reply_to(&sink, 10),
        },
    ];
    for rule in rules() {
        commands.push(TopicCommand::Rules {
            subscription: "all".into(),
            operation: RuleOperation::Add(Box::new(rule)),
            reply: reply_to(&other, 11),
        });
    }
    for command in commands {
        round_trip(command);
    }
}

#[test]
fn the_rules_a_topic_answers_with_come_back_the_same() {
    for rules in [Vec::new(), rules()] {
        let notification = Notification::Reply {
            request: RequestId(3),
            result: Ok(Reply::Rules(rules)),
        };
        let frame = codec::encode_notification(9, &notification).expect("encodes");
        let ServerFrame::Notification {
            notification: back, ..
        } = codec::decode_server_frame(&frame[4..]).expect("decodes")
        else {
            panic!("a notification frame");
        };
        assert_eq!(format!("{back:?}"), format!("{notification:?}"));
        assert_eq!(
            codec::encode_notification(9, &back).expect("encodes"),
            frame
        );
    }
}

#[test]
fn add_subscription_is_refused_by_name_and_acks_name_their_kind() {
    let (sink, _keep) = mpsc::unbounded_channel();
    let (commands, _inbox) = mpsc::channel(1);
    let command = TopicCommand::AddSubscription {
        entry: Box::new(SubscriptionEntry {
            name: "new".into(),
            handle: crate::broker::entity::EntityHandle::from_channel(
                "t/Subscriptions/new",
                commands,
            ),
            rules: Vec::new(),
            dead_letter_on_filter_errors: false,
            requires_session: false,
        }),
        reply: reply_to(&sink, 1),
    };
    let refused = codec::encode_topic_command("t", &command, &mut Table::default()).unwrap_err();
    assert!(refused.to_string().contains("AddSubscription"), "{refused}");

    for kind in [codec::Kind::Entity, codec::Kind::Topic] {
        let frame = codec::encode_ack(kind, "path", 5);
        match codec::decode_server_frame(&frame[4..]).expect("decodes") {
            ServerFrame::Ack {
                kind: back,
                path,
                count,
            } => assert_eq!((back, path.as_str(), count), (kind, "path", 5)),
            other => panic!("expected an ack, got {other:?}"),
        }
    }
}
