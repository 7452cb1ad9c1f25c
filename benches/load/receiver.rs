//! One receiver: its own connection, session and link with auto-refilled credit. Settles each
//! delivery as the plan says (accept = complete, modified{delivery-failed} = abandon,
//! rejected = dead-letter), records end-to-end latency and tallies message numbers.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use fe2o3_amqp::link::delivery::DeliveryInfo;
use fe2o3_amqp::link::receiver::CreditMode;
use fe2o3_amqp::types::definitions::SenderSettleMode;
use fe2o3_amqp::types::messaging::{Data, Modified};
use fe2o3_amqp::{Delivery, Receiver};
use tokio::sync::{mpsc, watch};

use crate::connect;
use crate::histogram::Histogram;
use crate::options::{RunOptions, SettleMode};
use crate::payload;
use crate::tally::Tally;

/// Receivers of one address, which together expect every sent message once.
pub struct Group {
    /// The address they attach to.
    pub address: String,
    /// Messages settled for good (completed or dead-lettered) by all of them.
    pub received: AtomicU64,
    /// How many they expect; `u64::MAX` until the senders are done.
    pub expected: AtomicU64,
    /// Turns true when the group is complete or the run gives up.
    pub stop: watch::Sender<bool>,
}

impl Group {
    /// A group for `address` with nothing received.
    pub fn new(address: String) -> Group {
        Group {
            address,
            received: AtomicU64::new(0),
            expected: AtomicU64::new(u64::MAX),
            stop: watch::channel(false).0,
        }
    }

    /// Stops the group's receivers if it has everything it expects.
    pub fn stop_if_complete(&self) {
        if self.received.load(Ordering::Acquire) >= self.expected.load(Ordering::Acquire) {
            self.stop.send_replace(true);
        }
    }
}

/// What one receiver settles.
#[derive(Clone, Copy)]
pub struct Policy {
    /// Percent of numbers abandoned on first receipt.
    pub abandon_percent: u32,
    /// Percent of numbers (after the abandoned ones) rejected to the dead-letter queue.
    pub dead_letter_percent: u32,
}

/// What one receiver saw.
#[derive(Default)]
pub struct ReceiverReport {
    /// Numbers completed (accepted), or received pre-settled.
    pub completed: Tally,
    /// Numbers rejected, i.e. dead-lettered.
    pub dead_lettered: Tally,
    /// Abandons sent.
    pub abandoned: u64,
    /// Deliveries whose body was not one of ours.
    pub foreign: u64,
    /// End-to-end latency of completed messages, nanoseconds.
    pub latency: Histogram,
    /// When the first delivery arrived.
    pub first_receive: Option<Instant>,
    /// When the last delivery arrived.
    pub last_receive: Option<Instant>,
    /// The error that stopped this receiver early.
    pub error: Option<String>,
}

/// Shared by every receiver of a run.
pub struct Shared {
    /// Nanoseconds since the payload origin of the last delivery anywhere: the watchdog's
    /// measure of progress.
    pub last_progress: AtomicU64,
}

/// Connects, attaches (then reports on `attached`), receives until the group stops.
pub async fn run(
    options: Arc<RunOptions>,
    group: Arc<Group>,
    shared: Arc<Shared>,
    index: usize,
    policy: Policy,
    attached: mpsc::Sender<Result<(), String>>,
) -> ReceiverReport {
    let mut report = ReceiverReport::default();
    let name = format!("load-receiver-{index}-{}", group.address);
    let mut endpoint = match connect::open(&options.connect, &name).await {
        Ok(endpoint) => endpoint,
        Err(error) => {
            let _ = attached.send(Err(error.to_string())).await;
            report.error = Some(error.to_string());
            return report;
        }
    };
    let settle_mode = match options.settle {
        SettleMode::Presettled => SenderSettleMode::Settled,
        // The default (mixed) is how Service Bus clients attach in peek-lock mode.
        SettleMode::AtLeastOnce => SenderSettleMode::Mixed,
    };
    let credit = options.credit.max(1);
    let attach = Receiver::builder()
        .name(name.as_str())
        .source(group.address.as_str())
        .sender_settle_mode(settle_mode)
        .credit_mode(CreditMode::Auto(credit))
        .attach(&mut endpoint.session)
        .await;
    let mut receiver = match attach {
        Ok(receiver) => receiver,
        Err(error) => {
            let message = format!("attach receiver to {}: {error}", group.address);
            let _ = attached.send(Err(message.clone())).await;
            report.error = Some(message);
            endpoint.close().await;
            return report;
        }
    };
    let _ = attached.send(Ok(())).await;
    drop(attached);
    // Credit is refilled when half of it is settled: a batch must not hold more than that.
    let batch = options.ack_batch.clamp(1, (credit as usize / 2).max(1));
    if let Err(error) =
        receive_all(&mut receiver, &group, &shared, policy, batch, &mut report).await
    {
        report.error.get_or_insert(error);
    }
    let _ = tokio::time::timeout(Duration::from_secs(10), receiver.close()).await;
    endpoint.close().await;
    report
}

async fn receive_all(
    receiver: &mut Receiver,
    group: &Group,
    shared: &Shared,
    policy: Policy,
    batch: usize,
    report: &mut ReceiverReport,
) -> Result<(), String> {
    let mut stop = group.stop.subscribe();
    let mut to_accept: Vec<DeliveryInfo> = Vec::with_capacity(batch);
    let mut abandoned_once: HashSet<u32> = HashSet::new();
    let abandon_below = policy.abandon_percent;
    let dead_letter_below = policy.abandon_percent + policy.dead_letter_percent;
    loop {
        let delivery: Delivery<Data> = tokio::select! {
            biased;
            result = receiver.recv::<Data>() => result.map_err(|error| format!("receive: {error}"))?,
            _ = stop.wait_for(|stopped| *stopped) => break,
        };
        let now = Instant::now();
        report.first_receive.get_or_insert(now);
        report.last_receive = Some(now);
        let now_nanos = payload::nanos_since_origin(now);
        shared.last_progress.store(now_nanos, Ordering::Relaxed);
        let Some((sent_nanos, number)) = payload::decode(&delivery.body().0) else {
            report.foreign += 1;
            to_accept.push(DeliveryInfo::from(delivery));
            flush(receiver, &mut to_accept, batch).await?;
            continue;
        };
        let bucket = number % 100;
        if bucket < abandon_below && abandoned_once.insert(number) {
            let failed = Modified {
                delivery_failed: Some(true),
                undeliverable_here: None,
                message_annotations: None,
            };
            receiver
                .modify(&delivery, failed)
                .await
                .map_err(|error| format!("abandon: {error}"))?;
            report.abandoned += 1;
            continue;
        }
        if (abandon_below..dead_letter_below).contains(&bucket) {
            receiver
                .reject(&delivery, None)
                .await
                .map_err(|error| format!("dead-letter: {error}"))?;
            report.dead_lettered.insert(number);
        } else {
            report.completed.insert(number);
            report.latency.record(now_nanos.saturating_sub(sent_nanos));
            to_accept.push(DeliveryInfo::from(delivery));
            flush(receiver, &mut to_accept, batch).await?;
        }
        let received = group.received.fetch_add(1, Ordering::AcqRel) + 1;
        if received >= group.expected.load(Ordering::Acquire) {
            flush(receiver, &mut to_accept, 1).await?;
            group.stop.send_replace(true);
        }
    }
    flush(receiver, &mut to_accept, 1).await
}

/// Accepts the collected deliveries once there are `batch` of them.
async fn flush(
    receiver: &Receiver,
    to_accept: &mut Vec<DeliveryInfo>,
    batch: usize,
) -> Result<(), String> {
    if to_accept.len() < batch || to_accept.is_empty() {
        return Ok(());
    }
    let result = if to_accept.len() == 1 {
        receiver.accept(to_accept.swap_remove(0)).await
    } else {
        receiver.accept_all(std::mem::take(to_accept)).await
    };
    result.map_err(|error| format!("complete: {error}"))
}
