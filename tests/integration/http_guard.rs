//! What keeps a web page from driving the broker over HTTP (issue 41, section 2), with raw
//! requests as a browser would send them: cross-site "simple" requests (`text/plain`, form
//! encodings) and foreign `Origin`s refused on every state-changing explorer and admin
//! route; a `Host` the broker does not answer for (DNS rebinding) refused by the explorer,
//! the admin API and `/metrics` but not by `/health`; `/metrics` behind a key when keys are
//! configured; the AMQP WebSocket refused to pages on foreign origins; the explorer's framing
//! and sniffing headers; and the HTTP listener's connection cap. The same attacks from a real
//! page in Chromium are in `tests/js/explorer-csrf.test.js`.

use std::net::SocketAddr;
use std::time::Duration;

use serde_json::{Value as Json, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::explorer::{api, counts};
use crate::harness::Broker;

/// One HTTP/1.1 request with `Connection: close` and exactly the headers given (`Host`
/// included); returns status, head (lower-cased) and body.
pub(crate) async fn raw(
    address: SocketAddr,
    method: &str,
    target: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, String, String) {
    let mut stream = tokio::net::TcpStream::connect(address)
        .await
        .expect("connects");
    let mut text = format!(
        "{method} {target} HTTP/1.1\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (name, value) in headers {
        text.push_str(&format!("{name}: {value}\r\n"));
    }
    text.push_str("\r\n");
    text.push_str(body);
    stream.write_all(text.as_bytes()).await.expect("written");
    let mut response = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut response))
        .await
        .expect("answered within 10 s")
        .expect("read");
    let response = String::from_utf8_lossy(&response).into_owned();
    let (head, body) = response
        .split_once("\r\n\r\n")
        .map(|(head, body)| (head.to_ascii_lowercase(), body.to_string()))
        .unwrap_or((response.to_ascii_lowercase(), String::new()));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("a status line: {head}"));
    (status, head, body)
}

fn basic(name: &str, key: &str) -> String {
    use base64::Engine as _;
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("{name}:{key}"))
    )
}

const KEYS: &str = r#"
[[auth.keys]]
name = "root"
key = "root-secret"
rights = ["Manage"]
[[auth.keys]]
name = "reader"
key = "reader-secret"
rights = ["Listen"]
"#;

const ENTITIES: &str = "[[queues]]\nname = \"orders\"\n[[queues]]\nname = \"other\"\n";

/// Starts a broker with `orders` holding `count` messages (sent through the explorer's API
/// with the page's own headers), with or without keys.
async fn broker_with_orders(keys: bool, count: u64) -> (Broker, Option<String>) {
    let config = if keys {
        format!("{KEYS}{ENTITIES}")
    } else {
        ENTITIES.to_string()
    };
    let broker = Broker::start(&config).await;
    let credentials = keys.then(|| basic("root", "root-secret"));
    let mut headers = vec![("Host", "localhost"), ("Content-Type", "application/json")];
    if let Some(credentials) = &credentials {
        headers.push(("Authorization", credentials));
    }
    let body = json!({"path": "orders", "body": "x", "count": count}).to_string();
    let (status, _, answer) = raw(
        broker.address,
        "POST",
        "/explorer/api/send",
        &headers,
        &body,
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    (broker, credentials)
}

/// `orders`' active count and whether `csrf-created` exists, read with the page's headers.
async fn orders_and_created(address: SocketAddr, credentials: Option<&str>) -> (u64, bool) {
    let mut headers = vec![("Host", "localhost")];
    if let Some(credentials) = credentials {
        headers.push(("Authorization", credentials));
    }
    let (status, _, body) = raw(address, "GET", "/explorer/api/entities", &headers, "").await;
    assert_eq!(status, 200, "{body}");
    let entities: Json = serde_json::from_str(&body).expect("JSON");
    let active = counts(&entities, "orders")["active"]
        .as_u64()
        .expect("a count");
    let created = entities["entities"]
        .as_array()
        .expect("entities")
        .iter()
        .any(|entity| entity["path"] == "csrf-created");
    (active, created)
}

/// Every state-changing explorer route, with a body that would change something.
fn state_changes() -> Vec<(&'static str, String)> {
    vec![
        (
            "purge",
            json!({"path": "orders", "queue": "main", "confirm": "orders"}).to_string(),
        ),
        (
            "send",
            json!({"path": "orders", "body": "forged", "count": 5}).to_string(),
        ),
        (
            "action",
            json!({"path": "orders", "queue": "main", "sequence_numbers": [1, 2, 3], "action": "receive"})
                .to_string(),
        ),
        (
            "resubmit",
            json!({"path": "orders", "queue": "dlq", "all": true, "target": "other"}).to_string(),
        ),
        (
            "entities",
            json!({"definition": "[[queues]]\nname = \"csrf-created\"\n"}).to_string(),
        ),
    ]
}

async fn simple_requests_are_refused(keys: bool) {
    let (broker, credentials) = broker_with_orders(keys, 20).await;
    // What a page on another origin can send without a preflight: the three "simple"
    // content types, and none at all.
    let forged_types = [
        Some("text/plain"),
        Some("text/plain;charset=UTF-8"),
        Some("application/x-www-form-urlencoded"),
        Some("multipart/form-data; boundary=x"),
        None,
    ];
    for (route, body) in state_changes() {
        for content_type in forged_types {
            let mut headers = vec![("Host", "localhost")];
            if let Some(content_type) = content_type {
                headers.push(("Content-Type", content_type));
            }
            if let Some(credentials) = &credentials {
                headers.push(("Authorization", credentials));
            }
            let target = format!("/explorer/api/{route}");
            let (status, _, answer) = raw(broker.address, "POST", &target, &headers, &body).await;
            assert_eq!(
                status, 415,
                "POST {route} with Content-Type {content_type:?} must be refused: {answer}"
            );
            assert!(answer.contains("application/json"), "{answer}");
        }
    }
    // An update sent as a simple request is refused too (PUT is never simple, but the
    // rule is one: a body that changes state comes as JSON).
    let mut headers = vec![("Host", "localhost"), ("Content-Type", "text/plain")];
    if let Some(credentials) = &credentials {
        headers.push(("Authorization", credentials));
    }
    let (status, _, answer) = raw(
        broker.address,
        "PUT",
        "/explorer/api/entity?path=orders",
        &headers,
        &json!({"definition": "[[queues]]\nname = \"orders\"\nmax_delivery_count = 2\n"})
            .to_string(),
    )
    .await;
    assert_eq!(status, 415, "{answer}");
    assert_eq!(
        orders_and_created(broker.address, credentials.as_deref()).await,
        (20, false),
        "nothing changed"
    );
    // The page's own requests (application/json, no Origin or its own) still work.
    let (status, _, answer) = raw(
        broker.address,
        "POST",
        "/explorer/api/purge",
        &[
            ("Host", "localhost:5300"),
            ("Origin", "http://localhost:5300"),
            ("Content-Type", "application/json; charset=utf-8"),
            ("Authorization", credentials.as_deref().unwrap_or("")),
        ],
        &json!({"path": "orders", "queue": "main", "confirm": "orders"}).to_string(),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    assert!(answer.contains("\"deleted\":20"), "{answer}");
}

#[tokio::test]
async fn explorer_state_changes_refuse_simple_cross_site_requests() {
    simple_requests_are_refused(false).await;
}

#[tokio::test]
async fn with_keys_explorer_state_changes_refuse_simple_cross_site_requests() {
    simple_requests_are_refused(true).await;
}

async fn foreign_origins_are_refused(keys: bool) {
    let (broker, credentials) = broker_with_orders(keys, 20).await;
    let credentials = credentials.unwrap_or_default();
    let purge = json!({"path": "orders", "queue": "main", "confirm": "orders"}).to_string();
    for origin in [
        "http://evil.example",
        "null",
        // Another port is another origin.
        "http://localhost:8080",
        "http://127.0.0.1:5300",
    ] {
        let (status, _, answer) = raw(
            broker.address,
            "POST",
            "/explorer/api/purge",
            &[
                ("Host", "localhost:5300"),
                ("Origin", origin),
                ("Content-Type", "application/json"),
                ("Authorization", &credentials),
            ],
            &purge,
        )
        .await;
        assert_eq!(status, 403, "Origin {origin}: {answer}");
        assert!(answer.contains("Origin"), "{answer}");
        let (status, _, answer) = raw(
            broker.address,
            "DELETE",
            "/explorer/api/entity?path=other",
            &[
                ("Host", "localhost:5300"),
                ("Origin", origin),
                ("Authorization", &credentials),
            ],
            "",
        )
        .await;
        assert_eq!(status, 403, "Origin {origin}: {answer}");
    }
    // The admin API's state-changing routes too (the SDKs send no Origin).
    let expires = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs() as i64
        + 600;
    let token = crate::auth::token("", "root", "root-secret", expires);
    let (status, _, answer) = raw(
        broker.address,
        "DELETE",
        "/other?api-version=2021-05",
        &[
            ("Host", "localhost:5300"),
            ("Origin", "http://evil.example"),
            ("Authorization", &token),
        ],
        "",
    )
    .await;
    assert_eq!(status, 403, "{answer}");
    let (status, _, answer) = raw(
        broker.address,
        "GET",
        "/other?api-version=2021-05",
        &[("Host", "localhost:5300"), ("Authorization", &token)],
        "",
    )
    .await;
    assert_eq!(status, 200, "the queue is still there: {answer}");
    assert_eq!(
        orders_and_created(broker.address, Some(&credentials)).await,
        (20, false)
    );
    // The page's own origin (default ports written or not) is accepted.
    let (status, _, answer) = raw(
        broker.address,
        "DELETE",
        "/explorer/api/entity?path=other",
        &[
            ("Host", "localhost"),
            ("Origin", "http://localhost:80"),
            ("Authorization", &credentials),
        ],
        "",
    )
    .await;
    assert_eq!(status, 200, "{answer}");
}

#[tokio::test]
async fn state_changes_refuse_a_foreign_origin() {
    foreign_origins_are_refused(false).await;
}

#[tokio::test]
async fn with_keys_state_changes_refuse_a_foreign_origin() {
    foreign_origins_are_refused(true).await;
}

/// A machine's host name, as the broker reads it.
fn machine_name() -> Option<String> {
    let text = std::fs::read_to_string("/proc/sys/kernel/hostname").ok()?;
    let name = text.trim().to_string();
    (!name.is_empty()).then_some(name)
}

async fn foreign_hosts_are_refused(keys: bool) {
    let (broker, credentials) = broker_with_orders(keys, 3).await;
    let credentials = credentials.unwrap_or_default();
    let expires = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs() as i64
        + 600;
    let token = crate::auth::token("", "root", "root-secret", expires);
    let explorer_credentials = ("Authorization", credentials.as_str());
    let admin_credentials = ("Authorization", token.as_str());
    let body = json!({"path": "orders", "body": "x"}).to_string();
    let routes: [(&str, &str, (&str, &str), &str); 6] = [
        ("GET", "/explorer/", explorer_credentials, ""),
        ("GET", "/explorer/api/entities", explorer_credentials, ""),
        ("POST", "/explorer/api/send", explorer_credentials, &body),
        (
            "GET",
            "/$Resources/Queues?api-version=2021-05",
            admin_credentials,
            "",
        ),
        (
            "DELETE",
            "/other?api-version=2021-05",
            admin_credentials,
            "",
        ),
        ("GET", "/metrics", explorer_credentials, ""),
    ];
    for host in [
        "evil.example",
        "evil.example:5300",
        "localhost.evil.example",
    ] {
        for (method, target, authorization, body) in routes {
            let (status, _, answer) = raw(
                broker.address,
                method,
                target,
                &[
                    ("Host", host),
                    ("Content-Type", "application/json"),
                    authorization,
                ],
                body,
            )
            .await;
            assert_eq!(status, 403, "{method} {target} with Host {host}: {answer}");
            assert!(answer.contains("allowed_hosts"), "{answer}");
            assert!(!answer.contains("orders"), "{answer}");
        }
        // Container health checks call /health with whatever Host they like.
        let (status, _, _) = raw(broker.address, "GET", "/health", &[("Host", host)], "").await;
        assert_eq!(status, 200);
    }
    assert_eq!(
        orders_and_created(broker.address, Some(&credentials))
            .await
            .0,
        3
    );
    // The names the broker answers for: localhost (and *.localhost), any IP literal (DNS
    // rebinding needs a name), the machine's name.
    let address = broker.address.to_string();
    let mut hosts = vec![
        "localhost".to_string(),
        "LOCALHOST:5300".to_string(),
        "localhost.".to_string(),
        "app.localhost".to_string(),
        "127.0.0.1".to_string(),
        address,
        "[::1]:5300".to_string(),
        "10.1.2.3:5300".to_string(),
    ];
    hosts.extend(machine_name());
    for host in hosts {
        for (method, target, authorization, _) in routes {
            if method != "GET" {
                continue;
            }
            let (status, _, answer) = raw(
                broker.address,
                method,
                target,
                &[("Host", &host), authorization],
                "",
            )
            .await;
            assert_eq!(status, 200, "{method} {target} with Host {host}: {answer}");
        }
    }
}

#[tokio::test]
async fn a_host_the_broker_does_not_answer_for_is_refused() {
    foreign_hosts_are_refused(false).await;
}

#[tokio::test]
async fn with_keys_a_host_the_broker_does_not_answer_for_is_refused() {
    foreign_hosts_are_refused(true).await;
}

#[tokio::test]
async fn configured_allowed_hosts_are_served() {
    let broker = Broker::start(&format!(
        "[http]\nallowed_hosts = [\"broker.internal\", \"*.corp.example\"]\n{ENTITIES}"
    ))
    .await;
    for (host, expected) in [
        ("broker.internal", 200),
        ("Broker.Internal:5300", 200),
        ("ferrobus.corp.example", 200),
        ("a.b.corp.example:443", 200),
        ("corp.example", 403),
        ("evil.example", 403),
        ("localhost", 200),
    ] {
        let (status, _, answer) = raw(
            broker.address,
            "GET",
            "/explorer/api/entities",
            &[("Host", host)],
            "",
        )
        .await;
        assert_eq!(status, expected, "Host {host}: {answer}");
    }
    // "*" switches the check off.
    let broker = Broker::start(&format!("[http]\nallowed_hosts = [\"*\"]\n{ENTITIES}")).await;
    let (status, _, answer) = raw(
        broker.address,
        "GET",
        "/$Resources/Queues",
        &[("Host", "anything.example")],
        "",
    )
    .await;
    assert_eq!(status, 200, "{answer}");
}

#[tokio::test]
async fn with_keys_metrics_need_a_manage_key() {
    let broker = Broker::start(&format!("{KEYS}{ENTITIES}")).await;
    let (status, head, body) = raw(
        broker.address,
        "GET",
        "/metrics",
        &[("Host", "localhost")],
        "",
    )
    .await;
    assert_eq!(status, 401, "{body}");
    assert!(head.contains("www-authenticate: basic"), "{head}");
    assert!(!body.contains("orders"), "{body}");
    for (authorization, expected) in [
        (basic("root", "wrong"), 401),
        (basic("nobody", "root-secret"), 401),
        (basic("reader", "reader-secret"), 403),
        (basic("root", "root-secret"), 200),
    ] {
        let (status, _, body) = raw(
            broker.address,
            "GET",
            "/metrics",
            &[("Host", "localhost"), ("Authorization", &authorization)],
            "",
        )
        .await;
        assert_eq!(status, expected, "{authorization}: {body}");
        assert_eq!(
            body.contains("entity=\"orders\""),
            expected == 200,
            "{body}"
        );
    }
    // A SAS token with Manage on the namespace works too.
    let expires = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs() as i64
        + 600;
    let token = crate::auth::token("", "root", "root-secret", expires);
    let (status, _, body) = raw(
        broker.address,
        "GET",
        "/metrics",
        &[("Host", "localhost"), ("Authorization", &token)],
        "",
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("entity=\"orders\""), "{body}");
    // Without keys the scrape stays anonymous.
    let open = Broker::start(ENTITIES).await;
    let (status, _, body) = raw(
        open.address,
        "GET",
        "/metrics",
        &[("Host", "localhost")],
        "",
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("entity=\"orders\""), "{body}");
}

/// The value of the header `name` (lower-case) in a head from [`raw`].
pub(crate) fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().find_map(|line| {
        line.strip_prefix(name)
            .and_then(|rest| rest.strip_prefix(':'))
            .map(str::trim)
    })
}

#[tokio::test]
async fn explorer_answers_forbid_framing_and_sniffing() {
    let broker = Broker::start(ENTITIES).await;
    let (_, sent) = api(
        broker.address,
        "POST",
        "send",
        Some(json!({"path": "orders", "body": "<script>alert(1)</script>", "content_type": "text/html"})),
    )
    .await;
    let sequence_number = sent["sequence_numbers"][0].as_i64().expect("a number");
    for target in [
        "/explorer/".to_string(),
        "/explorer/app.js".to_string(),
        "/explorer/api/entities".to_string(),
        format!("/explorer/api/message/body?path=orders&seq={sequence_number}"),
    ] {
        let (status, head, _) =
            raw(broker.address, "GET", &target, &[("Host", "localhost")], "").await;
        assert_eq!(status, 200, "{target}");
        assert_eq!(
            header(&head, "x-frame-options"),
            Some("deny"),
            "{target}: {head}"
        );
        assert_eq!(
            header(&head, "x-content-type-options"),
            Some("nosniff"),
            "{target}: {head}"
        );
        let policy = header(&head, "content-security-policy").unwrap_or_default();
        assert!(
            policy.contains("frame-ancestors 'none'"),
            "{target}: {head}"
        );
    }
    // A downloaded body keeps its own content type, so it runs in a sandbox with nothing
    // allowed, should a browser render it after all.
    let (_, head, body) = raw(
        broker.address,
        "GET",
        &format!("/explorer/api/message/body?path=orders&seq={sequence_number}"),
        &[("Host", "localhost")],
        "",
    )
    .await;
    assert_eq!(body, "<script>alert(1)</script>");
    let policy = header(&head, "content-security-policy").unwrap_or_default();
    assert!(policy.contains("sandbox"), "{head}");
    assert!(policy.contains("default-src 'none'"), "{head}");
}

/// Starts a broker with a dedicated HTTP listener configured by `http_table`; returns it
/// with the HTTP listener's address.
async fn broker_with_http_listener(http_table: &str) -> (StopOnDrop, SocketAddr) {
    let config = ferrobus::config::Config::from_toml_str(
        &format!("[storage]\nmode = \"memory\"\n[http]\n{http_table}\n{ENTITIES}"),
        "test.toml",
    )
    .expect("valid");
    let amqp = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let http = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let http_address = http.local_addr().expect("address");
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let (ready_sender, ready) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let listeners = ferrobus::Listeners {
            amqp,
            more: Vec::new(),
            http: Some(http),
            https: None,
        };
        ferrobus::run_listeners(listeners, &config, None, stopped, move || {
            let _ = ready_sender.send(());
        })
        .await
        .expect("broker runs");
    });
    tokio::time::timeout(Duration::from_secs(10), ready)
        .await
        .expect("ready within 10 s")
        .expect("ready");
    (StopOnDrop(stop), http_address)
}

/// Stops a broker started by [`broker_with_http_listener`] when dropped.
struct StopOnDrop(tokio::sync::watch::Sender<bool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        let _ = self.0.send(true);
    }
}

/// Whether the server closes `stream` without answering within `wait`.
async fn closed_without_answer(stream: &mut tokio::net::TcpStream, wait: Duration) -> bool {
    let _ = stream
        .write_all(b"GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .await;
    let mut buffer = [0u8; 256];
    match tokio::time::timeout(wait, stream.read(&mut buffer)).await {
        Ok(Ok(0)) | Ok(Err(_)) => true,
        Ok(Ok(_)) | Err(_) => false,
    }
}

#[tokio::test]
async fn the_http_listener_caps_its_connections() {
    let (_stop, address) = broker_with_http_listener("max_connections = 3").await;
    // Three idle connections (a client that opened them and sends nothing) take the cap.
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(
            tokio::net::TcpStream::connect(address)
                .await
                .expect("connects"),
        );
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    for _ in 0..5 {
        let mut extra = tokio::net::TcpStream::connect(address)
            .await
            .expect("the kernel accepts");
        assert!(
            closed_without_answer(&mut extra, Duration::from_secs(5)).await,
            "a connection past the cap is closed at once"
        );
    }
    // One held connection serves requests as usual; once one closes, a new one is served.
    held[0]
        .write_all(b"GET /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .await
        .expect("written");
    let mut response = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), held[0].read_to_end(&mut response))
        .await
        .expect("answered")
        .expect("read");
    let response = String::from_utf8_lossy(&response).into_owned();
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    held.remove(0);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (status, _, body) = raw(address, "GET", "/health", &[("Host", "localhost")], "").await;
    assert_eq!(status, 200, "{body}");
}

/// The status of an AMQP WebSocket upgrade sent with `host` and, if given, `origin`.
async fn upgrade_status(address: SocketAddr, host: &str, origin: Option<&str>) -> u16 {
    let mut stream = tokio::net::TcpStream::connect(address)
        .await
        .expect("connects");
    let mut request = format!(
        "GET /$servicebus/websocket/ HTTP/1.1\r\nHost: {host}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Protocol: AMQPWSB10\r\n"
    );
    if let Some(origin) = origin {
        request.push_str(&format!("Origin: {origin}\r\n"));
    }
    request.push_str("\r\n");
    stream.write_all(request.as_bytes()).await.expect("written");
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        let read = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut byte))
            .await
            .expect("answered within 5 s")
            .expect("read");
        if read == 0 {
            break;
        }
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head).into_owned();
    head.split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("a status line: {head}"))
}

#[tokio::test]
async fn a_page_on_a_foreign_origin_cannot_open_the_amqp_websocket() {
    let broker = Broker::start(&format!(
        "[http]\nallowed_hosts = [\"broker.example\"]\n{ENTITIES}"
    ))
    .await;
    let address = broker.address;
    for (host, origin, expected) in [
        // SDKs outside a browser send no Origin, or their own.
        ("localhost:5300", None, 101),
        ("localhost:5300", Some("http://localhost:5300"), 101),
        ("broker.example:443", Some("https://broker.example"), 101),
        ("10.1.2.3:5300", Some("http://10.1.2.3:3000"), 101),
        ("localhost:5300", Some("https://broker.example"), 101),
        // A page on the developer's own machine.
        ("localhost:5300", Some("http://localhost:3000"), 101),
        ("127.0.0.1:5300", Some("http://127.0.0.1:3000"), 101),
        ("localhost:5300", Some("http://[::1]:3000"), 101),
        // A page elsewhere, and DNS rebinding.
        ("localhost:5300", Some("http://evil.example"), 403),
        ("localhost:5300", Some("http://203.0.113.5"), 403),
        ("localhost:5300", Some("null"), 403),
        ("evil.example:5300", Some("http://evil.example:5300"), 403),
        ("evil.example:5300", None, 403),
    ] {
        assert_eq!(
            upgrade_status(address, host, origin).await,
            expected,
            "Host {host}, Origin {origin:?}"
        );
    }
}
