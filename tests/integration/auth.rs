//! Authorization with `[[auth.keys]]` configured (issue 10, items 5–7): `$management`
//! operations need the right Service Bus requires, dead-letter audiences authorize the
//! dead-letter queue, expired tokens lose their links, and a refusal tells nothing about
//! which key names exist.

use std::time::Duration;

use base64::Engine;
use fe2o3_amqp::link::ReceiverAttachError;
use fe2o3_amqp::session::SessionHandle;
use fe2o3_amqp::types::messaging::{ApplicationProperties, Body, Message, Properties};
use fe2o3_amqp::types::primitives::{OrderedMap, SimpleValue, Value};
use fe2o3_amqp::{Connection, Receiver, Sender};
use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::harness::Broker;

const KEYS: &str = r#"
[[auth.keys]]
name = "root"
key = "root-secret"
rights = ["Manage"]
[[auth.keys]]
name = "listener"
key = "listen-secret"
rights = ["Listen"]
[[auth.keys]]
name = "sender"
key = "send-secret"
rights = ["Send"]
[[queues]]
name = "q"
[[topics]]
name = "t"
[[topics.subscriptions]]
name = "s"
"#;

fn now_seconds() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_secs() as i64
}

/// A SAS token for `audience` (a path on the namespace) signed with `key`.
pub(crate) fn token(audience: &str, key_name: &str, key: &str, expires_at: i64) -> String {
    let encode = |text: &str| {
        text.replace('%', "%25")
            .replace('+', "%2B")
            .replace('/', "%2F")
            .replace('=', "%3D")
            .replace(':', "%3A")
            .replace('$', "%24")
    };
    // As the SDKs do: the URL-encoded resource is what is signed.
    let resource = encode(&format!("sb://localhost/{audience}"));
    let mut mac = Hmac::<Sha256>::new_from_slice(key.as_bytes()).expect("any key length");
    mac.update(format!("{resource}\n{expires_at}").as_bytes());
    let signature = base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes());
    format!(
        "SharedAccessSignature sr={resource}&sig={}&se={expires_at}&skn={key_name}",
        encode(&signature)
    )
}

/// A request/response pair of links on a node (`$cbs` or `<entity>/$management`).
pub(crate) struct Node {
    sender: Sender,
    receiver: Receiver,
    reply_to: String,
    next_id: u64,
}

impl Node {
    pub(crate) async fn close(self) {
        self.sender.close().await.expect("request link closes");
        self.receiver.close().await.expect("response link closes");
    }

    pub(crate) async fn attach(
        session: &mut SessionHandle<()>,
        address: &str,
        label: &str,
    ) -> Node {
        let reply_to = format!("reply-{label}");
        let sender = Sender::attach(session, format!("{label}-requests"), address)
            .await
            .expect("request link");
        let receiver = Receiver::builder()
            .name(format!("{label}-responses"))
            .source(address)
            .target(reply_to.as_str())
            .attach(session)
            .await
            .expect("response link");
        Node {
            sender,
            receiver,
            reply_to,
            next_id: 0,
        }
    }

    /// Sends a request and returns the response's `statusCode`.
    pub(crate) async fn request(&mut self, properties: &[(&str, SimpleValue)], body: Value) -> i32 {
        self.request_described(properties, body).await.0
    }

    /// Sends a request and returns the response's status code and description.
    async fn request_described(
        &mut self,
        properties: &[(&str, SimpleValue)],
        body: Value,
    ) -> (i32, String) {
        let (status, description, _) = self.request_full(properties, body).await;
        (status, description)
    }

    /// Sends a request and returns the response's status code, description and body.
    pub(crate) async fn request_full(
        &mut self,
        properties: &[(&str, SimpleValue)],
        body: Value,
    ) -> (i32, String, Option<Value>) {
        self.next_id += 1;
        let mut application = ApplicationProperties::builder();
        for (key, value) in properties {
            application = application.insert(*key, value.clone());
        }
        let message = Message::builder()
            .properties(
                Properties::builder()
                    .message_id(format!("request-{}", self.next_id))
                    .reply_to(self.reply_to.clone())
                    .build(),
            )
            .application_properties(application.build())
            .value(body)
            .build();
        self.sender.send(message).await.expect("request accepted");
        let response =
            tokio::time::timeout(Duration::from_secs(5), self.receiver.recv::<Body<Value>>())
                .await
                .expect("a response within 5 s")
                .expect("response received");
        self.receiver.accept(&response).await.expect("settled");
        let properties = response
            .message()
            .application_properties
            .as_ref()
            .expect("response properties");
        let description = ["statusDescription", "status-description"]
            .iter()
            .find_map(|key| match properties.0.get(*key) {
                Some(SimpleValue::String(text)) => Some(text.clone()),
                _ => None,
            })
            .unwrap_or_default();
        let body = match response.body() {
            Body::Value(value) => Some(value.0.clone()),
            _ => None,
        };
        for key in ["statusCode", "status-code"] {
            match properties.0.get(key) {
                Some(SimpleValue::Int(code)) => return (*code, description, body),
                Some(SimpleValue::Uint(code)) => return (*code as i32, description, body),
                _ => {}
            }
        }
        panic!("no status code in {properties:?}")
    }
}

async fn put_token(session: &mut SessionHandle<()>, audience: &str, token: String) -> i32 {
    let mut cbs = Node::attach(session, "$cbs", "cbs").await;
    let status = cbs
        .request(
            &[
                ("operation", SimpleValue::String("put-token".into())),
                (
                    "type",
                    SimpleValue::String("servicebus.windows.net:sastoken".into()),
                ),
                (
                    "name",
                    SimpleValue::String(format!("sb://localhost/{audience}")),
                ),
            ],
            Value::String(token),
        )
        .await;
    cbs.close().await;
    status
}

/// The status of a `$management` peek of one message on `path`: 200 when the entity holds
/// one, 204 when it holds none.
pub(crate) async fn peek(session: &mut SessionHandle<()>, path: &str) -> i32 {
    let mut management = Node::attach(session, &format!("{path}/$management"), "peek").await;
    let mut body = OrderedMap::new();
    body.insert(Value::String("from-sequence-number".into()), Value::Long(1));
    body.insert(Value::String("message-count".into()), Value::Int(1));
    let status = management
        .request(
            &[(
                "operation",
                SimpleValue::String("com.microsoft:peek-message".into()),
            )],
            Value::Map(body),
        )
        .await;
    management.close().await;
    status
}

async fn remove_rule(session: &mut SessionHandle<()>) -> i32 {
    let mut management = Node::attach(session, "t/Subscriptions/s/$management", "rules").await;
    let mut body = OrderedMap::new();
    body.insert(
        Value::String("rule-name".into()),
        Value::String("$Default".into()),
    );
    let status = management
        .request(
            &[(
                "operation",
                SimpleValue::String("com.microsoft:remove-rule".into()),
            )],
            Value::Map(body),
        )
        .await;
    management.close().await;
    status
}

async fn cancel_scheduled(session: &mut SessionHandle<()>) -> i32 {
    let mut management = Node::attach(session, "q/$management", "cancel").await;
    let mut body = OrderedMap::new();
    body.insert(
        Value::String("sequence-numbers".into()),
        Value::Array(vec![Value::Long(42)].into()),
    );
    let status = management
        .request(
            &[(
                "operation",
                SimpleValue::String("com.microsoft:cancel-scheduled-message".into()),
            )],
            Value::Map(body),
        )
        .await;
    management.close().await;
    status
}

#[tokio::test]
async fn management_operations_without_a_token_are_refused() {
    let broker = Broker::start(KEYS).await;
    let (_connection, mut session) = broker.connect().await;
    assert_eq!(peek(&mut session, "q").await, 401, "peek");
    assert_eq!(cancel_scheduled(&mut session).await, 401, "cancel");
    assert_eq!(remove_rule(&mut session).await, 401, "remove-rule");
}

#[tokio::test]
async fn management_operations_need_their_own_right() {
    let broker = Broker::start(KEYS).await;
    let expires = now_seconds() + 300;
    let (_listen_connection, mut listening) = broker.connect().await;
    let status = put_token(
        &mut listening,
        "q",
        token("q", "listener", "listen-secret", expires),
    )
    .await;
    assert_eq!(status, 202);
    assert_eq!(
        peek(&mut listening, "q").await,
        204,
        "Listen may peek (an empty queue: no content)"
    );
    assert_eq!(
        cancel_scheduled(&mut listening).await,
        401,
        "Listen may not cancel scheduled messages"
    );
    let (_send_connection, mut sending) = broker.connect().await;
    let status = put_token(
        &mut sending,
        "q",
        token("q", "sender", "send-secret", expires),
    )
    .await;
    assert_eq!(status, 202);
    assert_eq!(peek(&mut sending, "q").await, 401, "Send may not peek");
    let (_manage_connection, mut managing) = broker.connect().await;
    put_token(
        &mut managing,
        "t",
        token("t", "root", "root-secret", expires),
    )
    .await;
    assert_eq!(
        remove_rule(&mut managing).await,
        200,
        "Manage may remove a rule"
    );
}

#[tokio::test]
async fn a_dead_letter_audience_authorizes_the_dead_letter_queue_only() {
    let broker = Broker::start(KEYS).await;
    let (_connection, mut session) = broker.connect().await;
    let audience = "q/$DeadLetterQueue";
    let status = put_token(
        &mut session,
        audience,
        token(audience, "listener", "listen-secret", now_seconds() + 300),
    )
    .await;
    assert_eq!(status, 202);
    Receiver::attach(&mut session, "dead-letters", "q/$DeadLetterQueue")
        .await
        .expect("the dead-letter token authorizes the dead-letter queue");
    let main = Receiver::attach(&mut session, "main", "q").await;
    assert!(
        matches!(&main, Err(ReceiverAttachError::RemoteClosedWithError(error)) if format!("{:?}", error.condition).contains("UnauthorizedAccess")),
        "a dead-letter token does not authorize the queue itself: {:?}",
        main.err()
    );
}

#[tokio::test]
async fn a_link_loses_access_when_its_token_expires_unless_renewed() {
    let broker = Broker::start(KEYS).await;
    let (_expiring_connection, mut expiring) = broker.connect().await;
    put_token(
        &mut expiring,
        "q",
        token("q", "listener", "listen-secret", now_seconds() + 2),
    )
    .await;
    let mut receiver = Receiver::attach(&mut expiring, "expiring", "q")
        .await
        .expect("attached while the token is valid");
    let (_renewed_connection, mut renewed) = broker.connect().await;
    put_token(
        &mut renewed,
        "q",
        token("q", "listener", "listen-secret", now_seconds() + 2),
    )
    .await;
    let mut kept = Receiver::attach(&mut renewed, "renewed", "q")
        .await
        .expect("attached");
    put_token(
        &mut renewed,
        "q",
        token("q", "listener", "listen-secret", now_seconds() + 300),
    )
    .await;
    // The expiring link is detached by the broker within a few seconds.
    let outcome = tokio::time::timeout(Duration::from_secs(8), receiver.recv::<Body<Value>>())
        .await
        .expect("the broker detaches the link");
    let error = format!("{:?}", outcome.err());
    assert!(error.contains("UnauthorizedAccess"), "{error}");
    // The renewed link still receives.
    crate::raw_client::send_messages_with_key(&broker, "q", "sender", "send-secret").await;
    let delivery = crate::harness::receive(&mut kept).await;
    kept.accept(&delivery).await.expect("completes");
}

#[tokio::test]
async fn refusals_do_not_reveal_which_key_names_exist() {
    let broker = Broker::start(KEYS).await;
    let attempt = |username: &'static str| {
        let url = broker.url();
        async move {
            Connection::builder()
                .container_id("probe")
                .sasl_profile(fe2o3_amqp::sasl_profile::SaslProfile::Plain {
                    username: username.into(),
                    password: "wrong".into(),
                })
                .open(url.as_str())
                .await
                .err()
                .map(|error| format!("{error:?}"))
        }
    };
    let known = attempt("root").await.expect("wrong password refused");
    let unknown = attempt("nobody").await.expect("unknown name refused");
    assert_eq!(known, unknown);
    // The same over $cbs.
    let (_connection, mut session) = broker.connect().await;
    let expires = now_seconds() + 300;
    let mut cbs = Node::attach(&mut session, "$cbs", "probe").await;
    let mut answers = Vec::new();
    for key_name in ["root", "nobody"] {
        let answer = cbs
            .request_described(
                &[("operation", SimpleValue::String("put-token".into()))],
                Value::String(token("q", key_name, "wrong", expires)),
            )
            .await;
        answers.push(answer);
    }
    assert_eq!(answers[0].0, 401);
    assert_eq!(
        answers[0], answers[1],
        "the same answer for a known and an unknown key name"
    );
}
