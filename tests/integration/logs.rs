//! What client-controlled text can do to the broker's log (issue 10, item 14): nothing.

use std::time::Duration;

use crate::process::BrokerProcess;
use crate::raw_client::RawClient;

#[tokio::test]
async fn a_newline_in_a_link_name_cannot_forge_a_log_line() {
    let broker = BrokerProcess::start("[[queues]]\nname = \"q\"\n", &["--log-level", "info"]);
    let mut client = RawClient::connect_to(broker.address, 100).await;
    let name = format!("evil\nFORGED: admin logged in{}", "x".repeat(1_500));
    client
        .send(crate::raw_client::receiver_attach(
            &name, "missing", 0, false,
        ))
        .await;
    let refused = broker
        .wait_for_line("attach refused", Duration::from_secs(5))
        .await
        .expect("the refusal is logged");
    assert!(refused.contains("evil\\nFORGED"), "{refused}");
    assert!(
        refused.len() < 1_000,
        "a 1.5 KB name is truncated in the line, not {} bytes",
        refused.len()
    );
    assert!(
        broker
            .lines()
            .iter()
            .all(|line| !line.starts_with("FORGED")),
        "no forged line"
    );
}
