//! Connection-level behaviour: unknown entities, authentication, size limits.

use std::time::Duration;

use fe2o3_amqp::link::{ReceiverAttachError, SenderAttachError};
use fe2o3_amqp::{Connection, Receiver, Sender};

use fe2o3_amqp::types::definitions::AmqpError;
use fe2o3_amqp::types::messaging::Outcome;

use crate::harness::Broker;

/// The broker's refusal of a send, whichever way the client reports it.
fn refusal(result: Result<Outcome, fe2o3_amqp::link::SendError>) -> Option<String> {
    match result {
        Ok(Outcome::Accepted(_)) => None,
        other => Some(format!("{other:?}")),
    }
}

#[tokio::test]
async fn unknown_entities_are_refused_with_not_found() {
    let broker = Broker::start("[[queues]]\nname = \"known\"\n").await;
    let (_connection, mut session) = broker.connect().await;
    let sender = Sender::attach(&mut session, "sender", "amqps://localhost/missing").await;
    let Err(error) = sender else {
        panic!("attach to an unknown queue fails")
    };
    assert!(
        matches!(&error, SenderAttachError::RemoteClosedWithError(e) if e.condition == AmqpError::NotFound.into()),
        "unexpected error {error:?}"
    );
    let receiver = Receiver::attach(&mut session, "receiver", "missing").await;
    let Err(error) = receiver else {
        panic!("attach to an unknown queue fails")
    };
    assert!(
        matches!(&error, ReceiverAttachError::RemoteClosedWithError(e) if e.description.as_deref().unwrap_or("").contains("could not be found")),
        "unexpected error {error:?}"
    );
}

#[tokio::test]
async fn messages_over_the_size_limit_are_rejected() {
    let broker =
        Broker::start("[[queues]]\nname = \"small\"\nmax_message_size_in_kilobytes = 1\n").await;
    let (_connection, mut session) = broker.connect().await;
    let mut sender = Sender::attach(&mut session, "sender", "small")
        .await
        .expect("attach");
    let error = refusal(sender.send("x".repeat(4096)).await)
        .expect("a 4 KiB message exceeds a 1 KiB limit");
    assert!(
        error.contains("MessageSizeExceeded"),
        "unexpected error {error}"
    );
    sender
        .send("small enough")
        .await
        .expect("a small message is accepted");
}

#[tokio::test]
async fn application_properties_past_the_header_limit_are_refused_naming_their_size() {
    // The broker keeps annotations, properties and application properties within 8 MiB
    // (Service Bus allows 64 KB of header); the message itself is within its entity's limit.
    use fe2o3_amqp::types::messaging::{ApplicationProperties, Message};
    use fe2o3_amqp::types::primitives::SimpleValue;
    let broker =
        Broker::start("[[queues]]\nname = \"big\"\nmax_message_size_in_kilobytes = 12288\n").await;
    let (_connection, mut session) = broker.connect().await;
    let mut sender = Sender::attach(&mut session, "sender", "big")
        .await
        .expect("attach");
    let message = |value: usize| {
        Message::builder()
            .application_properties(
                ApplicationProperties::builder()
                    .insert("big", SimpleValue::String("p".repeat(value)))
                    .build(),
            )
            .value("body")
            .build()
    };
    let error = refusal(sender.send(message(9 * 1024 * 1024)).await)
        .expect("9 MiB of application properties are refused");
    assert!(
        error.contains("argument-error") || error.contains("ArgumentError"),
        "unexpected error {error}"
    );
    assert!(
        error.contains("at most 8388608"),
        "unexpected error {error}"
    );
    assert_eq!(
        refusal(sender.send(message(1024 * 1024)).await),
        None,
        "1 MiB of them is kept"
    );
}

#[tokio::test]
async fn a_full_queue_refuses_sends_with_resource_limit_exceeded() {
    let broker = Broker::start("[[queues]]\nname = \"tiny\"\nmax_size_in_megabytes = 1\n").await;
    let (_connection, mut session) = broker.connect().await;
    let mut sender = Sender::attach(&mut session, "sender", "tiny")
        .await
        .expect("attach");
    let chunk = "y".repeat(200 * 1024);
    let mut refused = None;
    for _ in 0..8 {
        if let Some(error) = refusal(sender.send(chunk.clone()).await) {
            refused = Some(error);
            break;
        }
    }
    let error = refused.expect("a 1 MB queue refuses the sixth 200 KB message");
    assert!(
        error.contains("ResourceLimitExceeded"),
        "unexpected error {error}"
    );
}

const KEYED: &str = r#"
[[auth.keys]]
name = "app"
key = "secret"
rights = ["Send", "Listen"]
[[queues]]
name = "guarded"
"#;

#[tokio::test]
async fn plain_authentication_checks_the_key() {
    let broker = Broker::start(KEYED).await;
    let wrong = Connection::builder()
        .container_id("intruder")
        .sasl_profile(fe2o3_amqp::sasl_profile::SaslProfile::Plain {
            username: "app".into(),
            password: "wrong".into(),
        })
        .open(broker.url().as_str())
        .await;
    assert!(wrong.is_err(), "a wrong password fails SASL");
    let mut connection = Connection::builder()
        .container_id("app")
        .sasl_profile(fe2o3_amqp::sasl_profile::SaslProfile::Plain {
            username: "app".into(),
            password: "secret".into(),
        })
        .open(broker.url().as_str())
        .await
        .expect("the right key authenticates");
    let mut session = fe2o3_amqp::Session::begin(&mut connection)
        .await
        .expect("session");
    let mut sender = Sender::attach(&mut session, "sender", "guarded")
        .await
        .expect("attach with key rights");
    sender.send("hello").await.expect("accepted");
}

#[tokio::test]
async fn anonymous_connections_need_a_token_when_keys_are_configured() {
    let broker = Broker::start(KEYED).await;
    let (_connection, mut session) = broker.connect().await;
    let sender = tokio::time::timeout(
        Duration::from_secs(5),
        Sender::attach(&mut session, "sender", "guarded"),
    )
    .await
    .expect("attach answered");
    let Err(error) = sender else {
        panic!("no token: refused")
    };
    assert!(
        matches!(&error, SenderAttachError::RemoteClosedWithError(e) if e.condition == AmqpError::UnauthorizedAccess.into()),
        "unexpected error {error:?}"
    );
}
