//! One sender: its own connection, session and link; closed loop (as fast as credit and the
//! in-flight window allow) or open loop (a fixed schedule).

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use fe2o3_amqp::link::SendError;
use fe2o3_amqp::link::delivery::DeliveryFut;
use fe2o3_amqp::types::definitions::SenderSettleMode;
use fe2o3_amqp::types::messaging::{Data, Message, MessageId, Outcome, Properties};
use fe2o3_amqp::types::primitives::Binary;
use fe2o3_amqp::{Sendable, Sender};

use crate::connect::{self, Endpoint};
use crate::options::{RunOptions, SettleMode};
use crate::payload;
use crate::tally::Tally;

/// What one sender did.
#[derive(Default)]
pub struct SenderReport {
    /// Numbers of messages the broker took (accepted, or sent pre-settled).
    pub sent: Tally,
    /// Outcomes other than accepted, and send errors.
    pub refused: u64,
    /// When the first message went out.
    pub first_send: Option<Instant>,
    /// When the last outcome arrived.
    pub last_outcome: Option<Instant>,
    /// Largest lag behind the open-loop schedule.
    pub worst_lag: Duration,
    /// The first error that stopped this sender early.
    pub error: Option<String>,
}

/// What the senders are told to do.
pub struct SendPlan {
    /// Index of this sender, 0-based.
    pub index: usize,
    /// Senders in all; message numbers are `sequence * senders + index`.
    pub senders: usize,
    /// Messages this sender sends, when not running for a duration.
    pub count: u64,
    /// Stop sending at this instant, when running for a duration.
    pub until: Option<Instant>,
    /// Open loop: the gap between this sender's scheduled sends.
    pub interval: Option<Duration>,
    /// Common start of the schedule.
    pub start: Instant,
    /// Live counters, readable while the sender runs.
    pub progress: Arc<Progress>,
}

/// A sender's counters as it goes, for diagnosing a run that stalls.
#[derive(Default)]
pub struct Progress {
    /// Messages handed to the link.
    pub handed_over: AtomicU64,
    /// Outcomes received (or pre-settled sends completed).
    pub settled: AtomicU64,
}

type Pending = DeliveryFut<Result<Outcome, SendError>>;

/// Connects, attaches and sends per `plan`; never panics on broker errors.
pub async fn run(options: Arc<RunOptions>, plan: SendPlan) -> SenderReport {
    let mut report = SenderReport::default();
    let name = format!("load-sender-{}", plan.index);
    let mut endpoint = match connect::open(&options.connect, &name).await {
        Ok(endpoint) => endpoint,
        Err(error) => {
            report.error = Some(error.to_string());
            return report;
        }
    };
    if let Err(error) = send_all(&options, &plan, &mut endpoint, &name, &mut report).await {
        report.error.get_or_insert(error);
    }
    endpoint.close().await;
    report
}

async fn send_all(
    options: &RunOptions,
    plan: &SendPlan,
    endpoint: &mut Endpoint,
    name: &str,
    report: &mut SenderReport,
) -> Result<(), String> {
    let presettled = options.settle == SettleMode::Presettled;
    // Mixed, with each transfer marked settled or not: a broker that answers the attach with
    // its own default mode (Qpid Proton's example broker) is then still accepted.
    let settle_mode = SenderSettleMode::Mixed;
    let mut sender = Sender::builder()
        .name(name)
        .target(options.send_to.as_str())
        .sender_settle_mode(settle_mode)
        .attach(&mut endpoint.session)
        .await
        .map_err(|error| format!("attach sender to {}: {error}", options.send_to))?;
    let mut in_flight: VecDeque<(u32, Pending)> = VecDeque::new();
    let mut sequence: u64 = 0;
    loop {
        if plan.until.is_none() && sequence >= plan.count {
            break;
        }
        let mut now = Instant::now();
        if plan.until.is_some_and(|until| now >= until) {
            break;
        }
        if let Some(interval) = plan.interval {
            let scheduled = plan.start + interval.mul_f64(sequence as f64);
            // The timer has 1 ms granularity: sleep to within 1 ms of the scheduled time, then
            // yield until it comes, so messages go out one by one rather than in 1 ms bursts.
            while scheduled > now {
                let early = scheduled - now;
                if early > Duration::from_millis(2) {
                    tokio::time::sleep_until((scheduled - Duration::from_millis(1)).into()).await;
                } else {
                    tokio::task::yield_now().await;
                }
                now = Instant::now();
            }
            report.worst_lag = report
                .worst_lag
                .max(now.saturating_duration_since(scheduled));
        }
        // Stamped when handed to the link: time spent waiting for credit or for the broker
        // counts as latency; lateness against the open-loop schedule (the timer's 1 ms
        // granularity, a busy generator) is reported separately as the worst lag.
        let stamp = now;
        let number = u32::try_from(sequence * plan.senders as u64 + plan.index as u64)
            .map_err(|_| "more than 2^32 messages".to_string())?;
        let body = Data(Binary::from(payload::encode(options.size, stamp, number)));
        let message = if options.message_id {
            Message::builder()
                .properties(Properties {
                    message_id: Some(MessageId::String(format!("load-{number}"))),
                    ..Properties::default()
                })
                .data(body)
                .build()
        } else {
            Message::builder().data(body).build()
        };
        let sendable = Sendable::builder()
            .message(message)
            .settled(presettled)
            .build();
        report.first_send.get_or_insert(now);
        let pending = sender
            .send_batchable(sendable)
            .await
            .map_err(|error| format!("send: {error}"))?;
        in_flight.push_back((number, pending));
        plan.progress.handed_over.fetch_add(1, Ordering::Relaxed);
        sequence += 1;
        if presettled || in_flight.len() >= options.window {
            while let Some((number, pending)) = in_flight.pop_front() {
                settle(number, pending.await, report);
                plan.progress.settled.fetch_add(1, Ordering::Relaxed);
                if !presettled && in_flight.len() < options.window {
                    break;
                }
            }
        }
    }
    while let Some((number, pending)) = in_flight.pop_front() {
        settle(number, pending.await, report);
        plan.progress.settled.fetch_add(1, Ordering::Relaxed);
    }
    let _ = tokio::time::timeout(Duration::from_secs(10), sender.close()).await;
    Ok(())
}

fn settle(number: u32, outcome: Result<Outcome, SendError>, report: &mut SenderReport) {
    match outcome {
        Ok(Outcome::Accepted(_)) => {
            report.sent.insert(number);
        }
        Ok(_) => report.refused += 1,
        Err(error) => {
            report.refused += 1;
            report.error.get_or_insert(format!("outcome: {error}"));
        }
    }
    report.last_outcome = Some(Instant::now());
}
