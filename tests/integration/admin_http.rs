//! The administration API over plain HTTP in the shape the .NET `ServiceBusAdministrationClient`
//! uses against the emulator (`http://host:5300`, issue 12): raw requests, the service's status
//! codes and bodies, paging links, /health and /metrics, the same answers on the AMQP port
//! (protocol sniffing), and the real binary's HTTP listener chosen by `EMULATOR_HTTP_PORT`
//! with the emulator's ready line on stdout.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::time::Duration;

use fe2o3_amqp::Sender;

use crate::harness::Broker;

/// One HTTP/1.1 request with `Connection: close` to `localhost:5300` (as the SDKs' admin
/// clients address the emulator); returns status, head (lower-cased) and body.
async fn request(
    address: SocketAddr,
    method: &str,
    target: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, String, String) {
    let mut with_host = vec![("Host", "localhost:5300")];
    with_host.extend_from_slice(headers);
    crate::http_guard::raw(address, method, target, &with_host, body).await
}

const ATOM: (&str, &str) = (
    "Content-Type",
    "application/atom+xml;type=entry;charset=utf-8",
);

fn queue_entry(lock: &str, max_delivery_count: u32) -> String {
    format!(
        r#"<?xml version="1.0" encoding="utf-8"?><entry xmlns="http://www.w3.org/2005/Atom"><content type="application/xml"><QueueDescription xmlns="http://schemas.microsoft.com/netservices/2010/10/servicebus/connect" xmlns:i="http://www.w3.org/2001/XMLSchema-instance"><LockDuration>{lock}</LockDuration><MaxDeliveryCount>{max_delivery_count}</MaxDeliveryCount></QueueDescription></content></entry>"#
    )
}

#[tokio::test]
async fn queues_are_created_read_updated_and_deleted_with_the_services_status_codes() {
    let broker = Broker::start("[[queues]]\nname = \"existing\"\n").await;
    let address = broker.address;
    let path = "/orders?api-version=2021-05";
    let (status, _, body) = request(address, "PUT", path, &[ATOM], &queue_entry("PT45S", 3)).await;
    assert_eq!(status, 201, "{body}");
    assert!(
        body.contains("<LockDuration>PT45S</LockDuration>"),
        "{body}"
    );
    assert!(
        body.contains("<MaxDeliveryCount>3</MaxDeliveryCount>"),
        "{body}"
    );
    let (status, head, body) = request(address, "GET", path, &[], "").await;
    assert_eq!(status, 200);
    assert!(
        head.to_ascii_lowercase().contains("application/atom+xml"),
        "{head}"
    );
    assert!(
        body.contains("<title type=\"text\">orders</title>") || body.contains(">orders<"),
        "{body}"
    );
    // Creating it again is a conflict; with If-Match: * it is an update.
    let (status, _, body) = request(address, "PUT", path, &[ATOM], &queue_entry("PT45S", 3)).await;
    assert_eq!(status, 409, "{body}");
    assert!(body.contains("<Code>409</Code>"), "{body}");
    let (status, _, body) = request(
        address,
        "PUT",
        path,
        &[ATOM, ("If-Match", "*")],
        &queue_entry("PT1M", 7),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert!(
        body.contains("<MaxDeliveryCount>7</MaxDeliveryCount>"),
        "{body}"
    );
    let (status, _, _) = request(address, "DELETE", path, &[], "").await;
    assert_eq!(status, 200);
    let (status, _, body) = request(address, "GET", path, &[], "").await;
    assert_eq!(status, 404);
    assert!(body.contains("<Code>404</Code>"), "{body}");
    let (status, _, _) = request(address, "DELETE", path, &[], "").await;
    assert_eq!(status, 404);
    // Bad input is named: a body that is no description, and a broken one.
    let (status, _, body) = request(address, "PUT", "/other", &[ATOM], "<entry/>").await;
    assert_eq!(status, 400, "{body}");
    let (status, _, body) = request(
        address,
        "PUT",
        "/other",
        &[ATOM],
        &queue_entry("forever", 3),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body.contains("LockDuration") || body.contains("forever"),
        "{body}"
    );
    let oversized = "x".repeat(2 * 1024 * 1024);
    let (status, _, _) = request(address, "PUT", "/other", &[ATOM], &oversized).await;
    assert_eq!(status, 413);
}

#[tokio::test]
async fn topics_subscriptions_and_rules_and_paged_lists() {
    let broker = Broker::start(
        "[[queues]]\nname = \"a\"\n[[queues]]\nname = \"b\"\n[[queues]]\nname = \"c\"\n",
    )
    .await;
    let address = broker.address;
    let topic = r#"<entry xmlns="http://www.w3.org/2005/Atom"><content type="application/xml"><TopicDescription xmlns="http://schemas.microsoft.com/netservices/2010/10/servicebus/connect"/></content></entry>"#;
    let (status, _, body) = request(
        address,
        "PUT",
        "/events?api-version=2021-05",
        &[ATOM],
        topic,
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let subscription = r#"<entry xmlns="http://www.w3.org/2005/Atom"><content type="application/xml"><SubscriptionDescription xmlns="http://schemas.microsoft.com/netservices/2010/10/servicebus/connect"/></content></entry>"#;
    let (status, _, body) = request(
        address,
        "PUT",
        "/events/Subscriptions/red?api-version=2021-05",
        &[ATOM],
        subscription,
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let rule = r#"<entry xmlns="http://www.w3.org/2005/Atom"><content type="application/xml"><RuleDescription xmlns="http://schemas.microsoft.com/netservices/2010/10/servicebus/connect" xmlns:i="http://www.w3.org/2001/XMLSchema-instance"><Filter i:type="SqlFilter"><SqlExpression>colour = 'red'</SqlExpression></Filter><Action i:type="EmptyRuleAction"/><Name>red</Name></RuleDescription></content></entry>"#;
    let (status, _, body) = request(
        address,
        "PUT",
        "/events/Subscriptions/red/Rules/red?api-version=2021-05",
        &[ATOM],
        rule,
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let (status, _, body) = request(
        address,
        "GET",
        "/events/Subscriptions/red/Rules?api-version=2021-05",
        &[],
        "",
    )
    .await;
    assert_eq!(status, 200);
    assert!(
        body.contains("colour = &apos;red&apos;") || body.contains("colour = 'red'"),
        "{body}"
    );
    assert!(body.contains("$Default"), "{body}");
    // Three queues, two per page: a next link with $skip, and the rest behind it.
    let (status, _, first) = request(
        address,
        "GET",
        "/$Resources/Queues?api-version=2021-05&$top=2",
        &[],
        "",
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(first.matches("<entry").count(), 2, "{first}");
    let next = first
        .split("rel=\"next\"")
        .next()
        .and_then(|before| before.rsplit("href=\"").next())
        .map(|href| href.trim_end_matches(['"', ' ']).to_string())
        .filter(|href| href.contains("skip=2"))
        .or_else(|| {
            first
                .split("<link")
                .find(|link| link.contains("next"))
                .and_then(|link| {
                    link.split("href=\"")
                        .nth(1)
                        .map(|rest| rest.split('"').next().unwrap_or("").to_string())
                })
        })
        .expect("a next link");
    assert!(next.contains("skip=2"), "{next}");
    let target = next
        .split_once("://")
        .and_then(|(_, rest)| rest.split_once('/'))
        .map(|(_, path)| format!("/{path}"))
        .expect("a path in the link")
        .replace("&amp;", "&");
    let (status, _, rest) = request(address, "GET", &target, &[], "").await;
    assert_eq!(status, 200);
    assert_eq!(rest.matches("<entry").count(), 1, "{rest}");
}

#[tokio::test]
async fn runtime_counts_health_and_metrics_follow_amqp_traffic() {
    let broker = Broker::start("[[queues]]\nname = \"counted\"\n").await;
    let (mut connection, mut session) = broker.connect().await;
    let mut sender = Sender::attach(&mut session, "s", "counted")
        .await
        .expect("sender");
    sender.send("one").await.expect("accepted");
    sender.send("two").await.expect("accepted");
    let (status, _, body) = request(
        broker.address,
        "GET",
        "/counted?enrich=true&api-version=2021-05",
        &[],
        "",
    )
    .await;
    assert_eq!(status, 200);
    assert!(
        body.contains("<d2p1:ActiveMessageCount>2</d2p1:ActiveMessageCount>")
            || body.contains("ActiveMessageCount>2<"),
        "{body}"
    );
    let (status, head, body) = request(broker.address, "GET", "/health", &[], "").await;
    assert_eq!(status, 200);
    assert!(head.to_ascii_lowercase().contains("application/json"));
    assert_eq!(
        body,
        r#"{"status":"healthy","message":"Service is healthy."}"#
    );
    let (status, _, body) = request(broker.address, "GET", "/metrics", &[], "").await;
    assert_eq!(status, 200);
    let sent = body
        .lines()
        .find(|line| {
            line.starts_with("ferrobus_entity_messages_total")
                && line.contains("entity=\"counted\"")
                && line.contains("\"sent\"")
        })
        .unwrap_or_else(|| panic!("a sent counter for the queue: {body}"));
    assert!(sent.ends_with(" 2"), "{sent}");
    sender.close().await.ok();
    session.end().await.ok();
    connection.close().await.ok();
}

/// The value of the `/metrics` sample named `name` (no labels).
fn sample(body: &str, name: &str) -> f64 {
    body.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("{name} in: {body}"))
        .trim()
        .parse()
        .expect("a number")
}

/// A durable broker's placement groups report to `/metrics`: each send's commit through
/// its queue's Raft log, the groups running and led (a single node leads every group it
/// runs), and the leaderships that began.
#[tokio::test]
async fn metrics_follow_the_placement_groups_raft_logs() {
    let directory = std::env::temp_dir().join(format!(
        "ferrobus-raft-metrics-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .as_nanos()
    ));
    let broker = Broker::start_with_storage(
        "[[queues]]\nname = \"a\"\n[[queues]]\nname = \"b\"\n",
        ferrobus::store::storage::StorageOptions::new(&directory),
    )
    .await;
    let (_, _, before) = request(broker.address, "GET", "/metrics", &[], "").await;
    let commits_before = sample(&before, "ferrobus_raft_commit_seconds_count");
    let (mut connection, mut session) = broker.connect().await;
    for queue in ["a", "b"] {
        let mut sender = Sender::attach(&mut session, format!("s-{queue}"), queue)
            .await
            .expect("sender");
        for body in ["one", "two", "three"] {
            // Each send's acknowledgement waits for its commit: three turns a queue.
            sender.send(body).await.expect("accepted");
        }
        sender.close().await.ok();
    }
    let (status, _, body) = request(broker.address, "GET", "/metrics", &[], "").await;
    assert_eq!(status, 200);
    let commits = sample(&body, "ferrobus_raft_commit_seconds_count");
    assert!(
        commits >= commits_before + 6.0,
        "{commits_before} -> {commits}: {body}"
    );
    let running = sample(&body, "ferrobus_raft_groups");
    assert!(running >= 2.0, "both queues' groups run: {body}");
    assert_eq!(sample(&body, "ferrobus_raft_groups_led"), running, "{body}");
    assert!(
        sample(&body, "ferrobus_raft_leader_changes_total") >= running,
        "{body}"
    );
    session.end().await.ok();
    connection.close().await.ok();
    broker.shut_down();
    let _ = std::fs::remove_dir_all(&directory);
}

#[tokio::test]
async fn with_keys_the_api_needs_a_manage_token() {
    let broker = Broker::start(
        "[[auth.keys]]\nname = \"root\"\nkey = \"root-secret\"\nrights = [\"Manage\"]\n[[auth.keys]]\nname = \"sender\"\nkey = \"send-secret\"\nrights = [\"Send\"]\n[[queues]]\nname = \"q\"\n",
    )
    .await;
    let (status, _, body) = request(broker.address, "GET", "/q?api-version=2021-05", &[], "").await;
    assert_eq!(status, 401, "{body}");
    let expires = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs() as i64
        + 600;
    let token = crate::auth::token("q", "root", "root-secret", expires);
    let (status, _, body) = request(
        broker.address,
        "GET",
        "/q?api-version=2021-05",
        &[("Authorization", &token)],
        "",
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let token = crate::auth::token("q", "sender", "send-secret", expires);
    let (status, _, body) = request(
        broker.address,
        "GET",
        "/q?api-version=2021-05",
        &[("Authorization", &token)],
        "",
    )
    .await;
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("Manage"), "{body}");
    // Health stays open, like the emulator's.
    let (status, _, _) = request(broker.address, "GET", "/health", &[], "").await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn the_binary_serves_http_on_emulator_http_port_and_prints_the_ready_line() {
    let free = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    let http_port = free.local_addr().expect("address").port();
    drop(free);
    let directory =
        std::env::temp_dir().join(format!("ferrobus-admin-http-{}", std::process::id()));
    std::fs::create_dir_all(&directory).expect("scratch");
    let config = directory.join("broker.toml");
    std::fs::write(&config, "[[queues]]\nname = \"q\"\n").expect("config");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_ferrobus"))
        .args([
            "--config",
            &config.display().to_string(),
            "--listen",
            "127.0.0.1:0",
            "--memory",
        ])
        .env("EMULATOR_HTTP_PORT", http_port.to_string())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("starts");
    let stdout = child.stdout.take().expect("stdout");
    let ready = std::thread::spawn(move || {
        BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .any(|line| line == "Emulator Service is Successfully Up!")
    });
    let ready_seen = tokio::task::spawn_blocking(move || ready.join().unwrap_or(false));
    // The ready line comes once AMQP and HTTP serve; then /health answers on that port.
    let address: SocketAddr = format!("127.0.0.1:{http_port}").parse().expect("address");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let status = loop {
        if tokio::net::TcpStream::connect(address).await.is_ok() {
            break request(address, "GET", "/health", &[], "").await.0;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "nothing listens on EMULATOR_HTTP_PORT"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(status, 200);
    let (status, _, body) = request(
        address,
        "GET",
        "/$Resources/Queues?api-version=2021-05",
        &[],
        "",
    )
    .await;
    assert_eq!(status, 200);
    assert!(body.contains(">q<"), "{body}");
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        tokio::time::timeout(Duration::from_secs(5), ready_seen)
            .await
            .expect("stdout ends with the process")
            .unwrap_or(false),
        "the ready line on stdout"
    );
    let _ = std::fs::remove_dir_all(&directory);
}

#[tokio::test]
async fn pipelined_sends_to_a_queue_deleted_under_its_sender_are_each_rejected_with_not_found() {
    // Issue 16: sends staged for one queue are handed over together; when the queue is gone
    // every one of them still gets its own answer.
    let broker = Broker::start("[[queues]]\nname = \"doomed\"\n").await;
    let mut client = crate::raw_client::RawClient::connect(&broker, 1000).await;
    client.attach_sender("to-doomed", "doomed", 0).await;
    let (status, _, _) = request(broker.address, "DELETE", "/doomed", &[], "").await;
    assert_eq!(status, 200);
    let mut bytes = Vec::new();
    for delivery_id in 0..3 {
        bytes.extend_from_slice(&crate::raw_client::transfer_frame_bytes(
            0,
            delivery_id,
            0,
            &crate::raw_client::text_message("hi"),
            false,
        ));
    }
    client.send_raw(&bytes).await;
    let outcomes = client.outcomes(3).await;
    assert_eq!(outcomes.keys().copied().collect::<Vec<_>>(), vec![0, 1, 2]);
    for state in outcomes.values() {
        let fe2o3_amqp_types::messaging::DeliveryState::Rejected(rejected) = state else {
            panic!("expected a rejection: {state:?}");
        };
        let error = rejected.error.as_ref().expect("an error");
        let text = format!("{:?} {:?}", error.condition, error.description);
        assert!(
            text.contains("NotFound") && text.contains("doomed"),
            "{text}"
        );
    }
}

#[tokio::test]
async fn dot_segments_in_an_entity_path_are_refused_and_create_nothing() {
    // Issue 41: `PUT /adv-q/../evil-q` made a queue of that literal name, which a client
    // that normalises URLs (curl, browsers) addresses as `evil-q`. Percent-encoded dots and
    // slashes decode to the same segments, so they are refused alike.
    let broker = Broker::start("[[queues]]\nname = \"adv-q\"\n[[topics]]\nname = \"t\"\n").await;
    let address = broker.address;
    for path in [
        "/adv-q/../evil-q",
        "/adv-q/%2E%2E/evil-q",
        "/adv-q/%2e%2e/evil-q",
        "/adv-q%2F..%2Fevil-q",
        "/adv-q/./evil-q",
        "/adv-q/%2E/evil-q",
    ] {
        let target = format!("{path}?api-version=2021-05");
        let (status, _, body) =
            request(address, "PUT", &target, &[ATOM], &queue_entry("PT45S", 3)).await;
        assert_eq!(status, 400, "{path}: {body}");
        assert!(
            body.contains("path segment") && body.contains("adv-q/"),
            "{path}: the answer names the problem and the name: {body}"
        );
        let (status, _, body) = request(address, "GET", &target, &[], "").await;
        assert_eq!(status, 404, "{path}: nothing was created: {body}");
    }
    let (status, _, body) = request(
        address,
        "GET",
        "/$resources/queues?api-version=2021-05",
        &[],
        "",
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("adv-q"), "{body}");
    assert!(!body.contains("evil"), "no such queue was created: {body}");
    // A subscription or rule named `.` or `..` was already refused (it must start and end
    // with a letter or digit); the path form is refused too.
    for path in ["/t/Subscriptions/..", "/t/Subscriptions/%2E"] {
        let (status, _, body) = request(address, "PUT", path, &[ATOM], "<entry/>").await;
        assert_eq!(status, 400, "{path}: {body}");
    }
}

#[tokio::test]
async fn a_manage_token_for_one_queue_cannot_create_a_dot_segment_path_under_it() {
    let broker = Broker::start(
        "[[auth.keys]]\nname = \"root\"\nkey = \"root-secret\"\nrights = [\"Manage\"]\n[[queues]]\nname = \"adv-q\"\n",
    )
    .await;
    let expires = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs() as i64
        + 600;
    let token = crate::auth::token("adv-q", "root", "root-secret", expires);
    let (status, _, body) = request(
        broker.address,
        "PUT",
        "/adv-q/../evil-q?api-version=2021-05",
        &[ATOM, ("Authorization", &token)],
        &queue_entry("PT45S", 3),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("path segment &quot;..&quot;"), "{body}");
    let (status, _, body) = request(
        broker.address,
        "GET",
        "/adv-q/../evil-q?api-version=2021-05",
        &[("Authorization", &token)],
        "",
    )
    .await;
    assert_eq!(status, 404, "{body}");
}
