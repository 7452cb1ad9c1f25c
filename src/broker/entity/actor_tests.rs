//! Tests of the actor shell with paused tokio time: its single timer must fire exactly at the
//! core's deadlines (lock expiry, renewed locks, TTL expiry, scheduled activation, idleness)
//! and not a millisecond before. With `start_paused`, time only moves when every task waits,
//! and then jumps to the earliest timer, so `timeout_at(deadline - 1 ms, …)` proves nothing
//! happened early and the instant of the next notification proves when it happened.

use std::time::Duration;

use bytes::Bytes;
use tokio::sync::mpsc::{self, UnboundedReceiver};
use tokio::time::{Instant, timeout_at};

use super::actor;
use super::settings::EntitySettings;
use super::state::{Record, TTL_EXPIRED};
use super::{Command, EntityHandle, Notification, NotificationSender, Reply, ReplyTo, RequestId};
use crate::broker::message::Message;
use crate::broker::types::{
    EntityError, LockToken, MessageState, ReceiveMode, ReceiverId, SequenceNumber, Settlement,
    SubQueue, Timestamp,
};
use crate::clock::Clock;

const START: Timestamp = Timestamp(1_700_000_000_000);
const PATH: &str = "orders";
const LOCK_DURATION: Duration = Duration::from_secs(30);
const MILLISECOND: Duration = Duration::from_millis(1);

/// One spawned entity and the channels a test observes it through.
struct Entity {
    handle: EntityHandle,
    /// Paths the entity reports when it deletes itself for idleness.
    idle: UnboundedReceiver<String>,
    /// Replies to requests, on a sink of their own.
    replies: UnboundedReceiver<Notification>,
    reply_sink: NotificationSender,
    next_request: u64,
    /// The paused instant the entity's clock reads `START` at.
    started: Instant,
}

impl Entity {
    fn spawn(configure: impl FnOnce(&mut EntitySettings)) -> Entity {
        Entity::spawn_with(configure, None)
    }

    fn spawn_with(
        configure: impl FnOnce(&mut EntitySettings),
        durability: Option<actor::Durability>,
    ) -> Entity {
        let mut settings = EntitySettings::with_defaults(PATH);
        settings.lock_duration = LOCK_DURATION;
        configure(&mut settings);
        let (idle_sender, idle) = mpsc::unbounded_channel();
        let started = Instant::now();
        let handle = actor::spawn(
            settings,
            Clock::starting_at(START),
            crate::broker::leadership::Leadership::SINGLE_NODE,
            idle_sender,
            None,
            Default::default(),
            durability,
            &Default::default(),
        );
        let (reply_sink, replies) = mpsc::unbounded_channel();
        Entity {
            handle,
            idle,
            replies,
            reply_sink,
            next_request: 0,
            started,
        }
    }

    fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    async fn request(
        &mut self,
        command: impl FnOnce(ReplyTo) -> Command,
    ) -> Result<Reply, EntityError> {
        self.next_request += 1;
        let request = RequestId(self.next_request);
        let reply = ReplyTo {
            sink: self.reply_sink.clone(),
            request,
        };
        self.handle.send(command(reply)).await?;
        match self.replies.recv().await {
            Some(Notification::Reply {
                request: answered,
                result,
            }) if answered == request => result,
            other => panic!("expected the reply to {request:?}, got {other:?}"),
        }
    }

    async fn send(&mut self, message: Message) -> Vec<SequenceNumber> {
        let messages = vec![message];
        match self
            .request(|reply| Command::Send {
                messages: messages.into(),
                reply: Some(reply),
            })
            .await
        {
            Ok(Reply::SequenceNumbers(numbers)) => numbers.into_vec(),
            other => panic!("send: {other:?}"),
        }
    }

    /// Attaches a receiver with `credit` and returns its sink.
    async fn attach(
        &mut self,
        receiver: ReceiverId,
        sub_queue: SubQueue,
        mode: ReceiveMode,
        credit: u32,
    ) -> UnboundedReceiver<Notification> {
        let (sink, deliveries) = mpsc::unbounded_channel();
        self.command(Command::AttachReceiver {
            receiver,
            sub_queue,
            mode,
            sink,
        })
        .await;
        self.command(Command::Credit {
            receiver,
            delivery_count: Some(0),
            link_credit: credit,
            drain: false,
        })
        .await;
        deliveries
    }

    /// Attaches receiver 1 to the main queue, receive-and-delete, with `credit`.
    async fn receive_and_delete(&mut self, credit: u32) -> UnboundedReceiver<Notification> {
        self.attach(
            ReceiverId(1),
            SubQueue::Main,
            ReceiveMode::ReceiveAndDelete,
            credit,
        )
        .await
    }

    /// Completes the message locked under `token`.
    async fn complete(&mut self, token: LockToken) -> Result<Reply, EntityError> {
        self.request(|reply| Command::Settle {
            token,
            settlement: Settlement::Complete,
            reply: Some(reply),
        })
        .await
    }

    async fn command(&self, command: Command) {
        self.handle.send(command).await.expect("entity alive");
    }

    async fn peek(&mut self, sub_queue: SubQueue) -> Vec<Record> {
        match self
            .request(|reply| Command::Peek {
                sub_queue,
                from: SequenceNumber(1),
                count: 100,
                session_id: None,
                reply,
            })
            .await
        {
            Ok(Reply::Messages(messages)) => messages
                .into_iter()
                .map(|delivery| delivery.record)
                .collect(),
            other => panic!("peek: {other:?}"),
        }
    }
}

fn message(body: u8) -> Message {
    Message::with_body(&Bytes::from(vec![body]))
}

/// A message scheduled at `START + after`.
fn scheduled(body: u8, after: Duration) -> Message {
    let mut message = message(body);
    message.edit_extras(|extras| extras.scheduled_enqueue_time = Some(START.plus(after)));
    message
}

/// Far beyond every deadline in these tests: a missing timer fails instead of hanging.
const PATIENCE: Duration = Duration::from_secs(7 * 86_400);

async fn next_delivery(deliveries: &mut UnboundedReceiver<Notification>) -> Record {
    next_locked_delivery(deliveries).await.0
}

/// The next delivery with the lock it came with.
async fn next_locked_delivery(
    deliveries: &mut UnboundedReceiver<Notification>,
) -> (Record, Option<crate::broker::entity::state::Lock>) {
    match tokio::time::timeout(PATIENCE, deliveries.recv()).await {
        Ok(Some(Notification::Deliver(delivery))) => (delivery.record, delivery.lock),
        other => panic!("expected a delivery, got {other:?}"),
    }
}

async fn next_idle(entity: &mut Entity) -> Option<String> {
    tokio::time::timeout(PATIENCE, entity.idle.recv())
        .await
        .expect("the entity never reported idle")
}

/// Asserts that nothing arrives before `deadline` (paused time jumps straight there).
async fn quiet_until<T: std::fmt::Debug>(channel: &mut UnboundedReceiver<T>, deadline: Instant) {
    if let Ok(early) = timeout_at(deadline, channel.recv()).await {
        panic!("arrived early: {early:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn lock_expiry_redelivers_with_the_next_delivery_count_exactly_at_the_lock_duration() {
    // rules LCK-2, LCK-3
    let mut entity = Entity::spawn(|_| {});
    let receiver = ReceiverId(1);
    let mut deliveries = entity
        .attach(receiver, SubQueue::Main, ReceiveMode::PeekLock, 2)
        .await;
    assert_eq!(entity.send(message(1)).await, vec![SequenceNumber(1)]);
    let (first, first_lock) = next_locked_delivery(&mut deliveries).await;
    assert_eq!(entity.elapsed(), Duration::ZERO);
    assert_eq!(first.delivery_count(), 0);
    let lock = first_lock.expect("peek-lock");
    assert_eq!(lock.until, START.plus(LOCK_DURATION));

    quiet_until(
        &mut deliveries,
        entity.started + LOCK_DURATION - MILLISECOND,
    )
    .await;
    let (second, second_lock) = next_locked_delivery(&mut deliveries).await;
    assert_eq!(
        entity.elapsed(),
        LOCK_DURATION,
        "redelivered exactly when the lock lapsed"
    );
    assert_eq!(second.sequence_number, first.sequence_number);
    assert_eq!(second.delivery_count(), 1);
    assert_ne!(second_lock.expect("peek-lock").token, lock.token);

    let settled = entity.complete(lock.token).await;
    assert!(matches!(settled, Err(EntityError::LockLost)), "{settled:?}");
}

#[tokio::test(start_paused = true)]
async fn renewing_a_lock_pushes_the_redelivery_back_by_a_full_lock_duration() {
    // rules LCK-1, LCK-2
    let mut entity = Entity::spawn(|_| {});
    let receiver = ReceiverId(1);
    let mut deliveries = entity
        .attach(receiver, SubQueue::Main, ReceiveMode::PeekLock, 2)
        .await;
    entity.send(message(1)).await;
    let token = next_locked_delivery(&mut deliveries)
        .await
        .1
        .expect("peek-lock")
        .token;

    let renew_at = Duration::from_secs(20);
    tokio::time::sleep(renew_at).await;
    let renewed = entity
        .request(|reply| Command::RenewLocks {
            tokens: vec![token],
            reply,
        })
        .await;
    let expected_until = START.plus(renew_at + LOCK_DURATION);
    assert!(
        matches!(&renewed, Ok(Reply::Expirations(until)) if until == &vec![expected_until]),
        "{renewed:?}"
    );

    // The original expiry (30 s) passes without a redelivery.
    quiet_until(
        &mut deliveries,
        entity.started + renew_at + LOCK_DURATION - MILLISECOND,
    )
    .await;
    let again = next_delivery(&mut deliveries).await;
    assert_eq!(entity.elapsed(), renew_at + LOCK_DURATION);
    assert_eq!(again.delivery_count(), 1);
}

#[tokio::test(start_paused = true)]
async fn an_expired_message_moves_to_the_dead_letter_queue_at_its_expiry_with_nobody_receiving() {
    // rules TTL-1, TTL-6, TTL-8
    let time_to_live = Duration::from_secs(10);
    let mut entity = Entity::spawn(|settings| {
        settings.default_message_time_to_live = Some(time_to_live);
        settings.dead_lettering_on_message_expiration = true;
    });
    assert_eq!(entity.send(message(1)).await, vec![SequenceNumber(1)]);
    let mut dead_letters = entity
        .attach(
            ReceiverId(2),
            SubQueue::DeadLetter,
            ReceiveMode::PeekLock,
            1,
        )
        .await;

    quiet_until(
        &mut dead_letters,
        entity.started + time_to_live - MILLISECOND,
    )
    .await;
    let dead = next_delivery(&mut dead_letters).await;
    assert_eq!(
        entity.elapsed(),
        time_to_live,
        "dead-lettered exactly at expiry"
    );
    assert_eq!(dead.sequence_number, SequenceNumber(1));
    assert_eq!(dead.expires_at(), None);
    assert_eq!(
        crate::broker::message::application_property_text(&dead.message, "DeadLetterReason")
            .as_deref(),
        Some(TTL_EXPIRED)
    );
    assert!(entity.peek(SubQueue::Main).await.is_empty());

    // A day later it is still in the dead-letter queue (its lock lapsed, it never expires).
    tokio::time::sleep(Duration::from_secs(86_400)).await;
    let kept = entity.peek(SubQueue::DeadLetter).await;
    assert_eq!(kept.len(), 1);
    assert_eq!(kept[0].sequence_number, SequenceNumber(1));
}

#[tokio::test(start_paused = true)]
async fn a_scheduled_message_is_delivered_at_its_time_with_a_new_sequence_number() {
    // rules SCH-1, SCH-2, SCH-3, SEQ-1
    let mut entity = Entity::spawn(|_| {});
    let mut deliveries = entity.receive_and_delete(5).await;
    let delay = Duration::from_secs(5);
    assert_eq!(
        entity.send(scheduled(1, delay)).await,
        vec![SequenceNumber(1)]
    );
    assert_eq!(entity.send(message(2)).await, vec![SequenceNumber(2)]);
    let immediate = next_delivery(&mut deliveries).await;
    assert_eq!(immediate.message.body(), &[2]);

    let waiting = entity.peek(SubQueue::Main).await;
    assert_eq!(waiting.len(), 1);
    assert_eq!(waiting[0].sequence_number, SequenceNumber(1));
    assert_eq!(waiting[0].state(), MessageState::Scheduled);

    quiet_until(&mut deliveries, entity.started + delay - MILLISECOND).await;
    let activated = next_delivery(&mut deliveries).await;
    assert_eq!(
        entity.elapsed(),
        delay,
        "activated exactly at its scheduled time"
    );
    assert_eq!(activated.message.body(), &[1]);
    assert_eq!(activated.sequence_number, SequenceNumber(3));
    assert_eq!(activated.enqueued_time(), START.plus(delay));
    assert_eq!(activated.state(), MessageState::Active);
}

#[tokio::test(start_paused = true)]
async fn a_deadline_earlier_than_the_armed_one_moves_the_timer_forward() {
    // rules SCH-1, SCH-2: the actor keeps one timer and moves it only to an earlier deadline
    let mut entity = Entity::spawn(|_| {});
    let mut deliveries = entity.receive_and_delete(5).await;
    let (late, early) = (Duration::from_secs(60), Duration::from_secs(5));
    entity.send(scheduled(1, late)).await;
    entity.send(scheduled(2, early)).await;

    quiet_until(&mut deliveries, entity.started + early - MILLISECOND).await;
    let first = next_delivery(&mut deliveries).await;
    assert_eq!(entity.elapsed(), early, "the earlier one at its time");
    assert_eq!(first.message.body(), &[2]);
    quiet_until(&mut deliveries, entity.started + late - MILLISECOND).await;
    let second = next_delivery(&mut deliveries).await;
    assert_eq!(entity.elapsed(), late, "the later one at its time");
    assert_eq!(second.message.body(), &[1]);
}

#[tokio::test(start_paused = true)]
async fn a_timer_left_armed_for_a_settled_lock_fires_harmlessly_and_the_next_lock_lapses_on_time() {
    // rules LCK-1, LCK-2: the timer armed for the first lock stays armed after that
    // lock is settled; when it fires nothing is due, and the second lock still lapses at
    // its own expiry, not at the stale one and not never.
    let mut entity = Entity::spawn(|_| {});
    let mut deliveries = entity
        .attach(ReceiverId(1), SubQueue::Main, ReceiveMode::PeekLock, 5)
        .await;
    entity.send(message(1)).await;
    let first = next_locked_delivery(&mut deliveries)
        .await
        .1
        .expect("peek-lock");
    let settle_at = Duration::from_secs(5);
    tokio::time::sleep(settle_at).await;
    let settled = entity.complete(first.token).await;
    assert!(settled.is_ok(), "{settled:?}");
    let second_at = Duration::from_secs(10);
    tokio::time::sleep(second_at - settle_at).await;
    entity.send(message(2)).await;
    let (second, second_lock) = next_locked_delivery(&mut deliveries).await;
    assert_eq!(
        second_lock.expect("peek-lock").until,
        START.plus(second_at + LOCK_DURATION)
    );

    // Past the settled lock's expiry (30 s): no redelivery then.
    quiet_until(
        &mut deliveries,
        entity.started + second_at + LOCK_DURATION - MILLISECOND,
    )
    .await;
    let again = next_delivery(&mut deliveries).await;
    assert_eq!(
        entity.elapsed(),
        second_at + LOCK_DURATION,
        "redelivered exactly when the second lock lapsed"
    );
    assert_eq!(again.sequence_number, second.sequence_number);
    assert_eq!(again.delivery_count(), 1);
    assert_eq!(
        entity.peek(SubQueue::Main).await.len(),
        1,
        "the first stays completed"
    );
}

#[tokio::test(start_paused = true)]
async fn an_idle_entity_deletes_itself_after_the_idle_period_and_then_is_not_found() {
    // rules IDL-1, IDL-2
    let idle_after = Duration::from_secs(60);
    let mut entity = Entity::spawn(|settings| settings.auto_delete_on_idle = Some(idle_after));

    // A peek at 20 s is activity: the deadline moves to 80 s.
    let peek_at = Duration::from_secs(20);
    tokio::time::sleep(peek_at).await;
    assert!(entity.peek(SubQueue::Main).await.is_empty());

    quiet_until(
        &mut entity.idle,
        entity.started + peek_at + idle_after - MILLISECOND,
    )
    .await;
    assert_eq!(next_idle(&mut entity).await.as_deref(), Some(PATH));
    assert_eq!(entity.elapsed(), peek_at + idle_after);
    let gone = entity
        .handle
        .send(Command::DetachReceiver {
            receiver: ReceiverId(1),
        })
        .await;
    assert_eq!(gone, Err(EntityError::NotFound(PATH.to_string())));
}

#[tokio::test(start_paused = true)]
async fn an_attached_receiver_keeps_an_entity_alive_until_it_detaches() {
    // rules IDL-1, IDL-2
    let idle_after = Duration::from_secs(60);
    let mut entity = Entity::spawn(|settings| settings.auto_delete_on_idle = Some(idle_after));
    let receiver = ReceiverId(1);
    let _deliveries = entity
        .attach(receiver, SubQueue::Main, ReceiveMode::PeekLock, 10)
        .await;

    let watched = Duration::from_secs(3_600);
    quiet_until(&mut entity.idle, entity.started + watched).await;
    entity.command(Command::DetachReceiver { receiver }).await;

    quiet_until(
        &mut entity.idle,
        entity.started + watched + idle_after - MILLISECOND,
    )
    .await;
    assert_eq!(next_idle(&mut entity).await.as_deref(), Some(PATH));
    assert_eq!(entity.elapsed(), watched + idle_after);
}

#[tokio::test(start_paused = true)]
async fn deliveries_to_a_closed_connection_return_to_the_entity() {
    // No message loss: a receive-and-delete receiver whose connection died (its sink is
    // closed) gets nothing, and the message stays for the next receiver.
    let mut entity = Entity::spawn(|_| {});
    let dead = entity.receive_and_delete(10).await;
    drop(dead);
    entity
        .send(Message::with_body(&Bytes::from_static(b"survivor")))
        .await;
    let mut alive = entity
        .attach(ReceiverId(2), SubQueue::Main, ReceiveMode::PeekLock, 10)
        .await;
    match alive.recv().await {
        Some(Notification::Deliver(delivery)) => {
            assert_eq!(
                delivery.record.message.body(),
                Bytes::from_static(b"survivor")
            );
            assert_eq!(delivery.record.delivery_count(), 0);
        }
        other => panic!("expected the returned message, got {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn a_batch_of_sends_refuses_only_the_sends_that_do_not_fit_and_answers_in_one_notification() {
    // Issue 16: consecutive transfers reach the entity in one command; each keeps its own
    // outcome, as if it had come alone (rules SEQ-1, SEQ-2).
    let body = |tag: u8| Message::with_body(&Bytes::from(vec![tag; 1000]));
    let size = body(0).size() as u64;
    let mut entity = Entity::spawn(|settings| settings.max_size_bytes = 3 * size + size / 2);
    let send = |tag: u8, request: Option<u64>| super::BatchedSend {
        messages: vec![body(tag)].into(),
        numbers: Default::default(),
        request: request.map(RequestId),
    };
    // A small one after a refused one still fits.
    let small = super::BatchedSend {
        messages: vec![message(6)].into(),
        numbers: Default::default(),
        request: Some(RequestId(16)),
    };
    entity
        .command(Command::SendBatch {
            // The second is pre-settled: stored, not answered.
            sends: vec![
                send(1, Some(11)),
                send(2, None),
                send(3, Some(13)),
                send(4, Some(14)),
                send(5, Some(15)),
                small,
            ],
            sink: entity.reply_sink.clone(),
        })
        .await;
    let replies = match entity.replies.recv().await {
        Some(Notification::Replies { replies }) => replies,
        other => panic!("expected the batch's replies, got {other:?}"),
    };
    let outcomes: Vec<(u64, Result<Vec<SequenceNumber>, bool>)> = replies
        .into_iter()
        .map(|(request, result)| {
            let outcome = match result {
                Ok(Reply::SequenceNumbers(numbers)) => Ok(numbers.into_vec()),
                Err(EntityError::QuotaExceeded { .. }) => Err(true),
                other => panic!("unexpected outcome {other:?}"),
            };
            (request.0, outcome)
        })
        .collect();
    assert_eq!(
        outcomes,
        vec![
            (11, Ok(vec![SequenceNumber(1)])),
            (13, Ok(vec![SequenceNumber(3)])),
            (14, Err(true)),
            (15, Err(true)),
            (16, Ok(vec![SequenceNumber(4)])),
        ]
    );
    // Exactly the four admitted are stored, in order.
    let stored: Vec<Vec<u8>> = entity
        .peek(SubQueue::Main)
        .await
        .into_iter()
        .map(|record| record.message.body().to_vec())
        .collect();
    assert_eq!(
        stored,
        vec![vec![1; 1000], vec![2; 1000], vec![3; 1000], vec![6]]
    );
}

#[tokio::test(start_paused = true)]
async fn a_batch_of_pre_settled_sends_is_stored_without_a_reply() {
    let mut entity = Entity::spawn(|_| {});
    entity
        .command(Command::SendBatch {
            sends: vec![super::BatchedSend {
                messages: vec![message(9)].into(),
                numbers: Default::default(),
                request: None,
            }],
            sink: entity.reply_sink.clone(),
        })
        .await;
    let stored = entity.peek(SubQueue::Main).await;
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0].message.body(), &[9][..]);
    assert!(
        entity.replies.try_recv().is_err(),
        "nothing answers a pre-settled send"
    );
}

#[tokio::test(start_paused = true)]
async fn an_entity_restarts_from_what_it_wrote_through_the_storage_port() {
    // The core runs on any implementation of its port: here the in-memory one.
    use crate::broker::storage::{MemoryLog, Storage};
    let log = std::sync::Arc::new(MemoryLog::default());
    let durability = |recovered| {
        Some(actor::Durability {
            storage: Storage::new(log.clone()),
            key: PATH.to_string(),
            recovered,
        })
    };
    let mut entity = Entity::spawn_with(|_| {}, durability(Vec::new()));
    for body in 1..=3 {
        entity.send(message(body)).await;
    }
    let mut deliveries = entity.receive_and_delete(1).await;
    assert_eq!(
        next_delivery(&mut deliveries).await.sequence_number,
        SequenceNumber(1)
    );
    // Every turn went to the port as an append of this entity alone.
    let appends = log.appends();
    assert!(appends.len() >= 4, "{appends:?}");
    assert!(
        appends
            .iter()
            .all(|entities| entities == &[PATH.to_string()])
    );
    let recovered = log.recovered().entities.remove(PATH).unwrap_or_default();
    let mut restarted = Entity::spawn_with(|_| {}, durability(recovered));
    let numbers: Vec<_> = restarted
        .peek(SubQueue::Main)
        .await
        .into_iter()
        .map(|record| record.sequence_number)
        .collect();
    assert_eq!(numbers, [SequenceNumber(2), SequenceNumber(3)]);
}

/// A log whose appends wait until the test settles each of them, in any order.
#[derive(Debug)]
struct GatedLog {
    /// Each append's answer, in the order the appends arrived.
    appends: std::sync::Mutex<Vec<Option<tokio::sync::oneshot::Sender<StorageResult>>>>,
    /// How many appends have arrived.
    arrived: tokio::sync::watch::Sender<usize>,
    epoch: tokio::sync::watch::Sender<u64>,
}

type StorageResult = Result<(), crate::broker::storage::StorageError>;

impl GatedLog {
    fn new() -> std::sync::Arc<GatedLog> {
        std::sync::Arc::new(GatedLog {
            appends: Default::default(),
            arrived: tokio::sync::watch::channel(0).0,
            epoch: tokio::sync::watch::channel(0).0,
        })
    }

    /// Waits until `count` appends have arrived; fails when they do not (paused time moves
    /// on only once every task waits, so an append that would come has come by then).
    async fn wait_for(&self, count: usize) {
        let mut arrived = self.arrived.subscribe();
        tokio::time::timeout(Duration::from_secs(60), arrived.wait_for(|n| *n >= count))
            .await
            .unwrap_or_else(|_| panic!("{count} appends did not arrive"))
            .expect("the log lives");
    }

    /// Settles append `index` (from 1) with `result`.
    fn settle(&self, index: usize, result: StorageResult) {
        let answer = self.appends.lock().expect("unpoisoned")[index - 1]
            .take()
            .expect("settled once");
        let _ = answer.send(result);
    }
}

impl crate::broker::storage::DurableLog for GatedLog {
    fn append(
        &self,
        _batch: Vec<(String, Vec<super::state::Change>)>,
    ) -> crate::broker::storage::Durable<'_> {
        let (answer, settled) = tokio::sync::oneshot::channel();
        let count = {
            let mut appends = self.appends.lock().expect("unpoisoned");
            appends.push(Some(answer));
            appends.len()
        };
        self.arrived.send_replace(count);
        Box::pin(async move { settled.await.expect("the test settles every append") })
    }
    fn drop_entity(&self, _entity: &str) -> crate::broker::storage::Durable<'_> {
        Box::pin(async { Ok(()) })
    }
    fn checkpoint(
        &self,
        _entity: &str,
        _epoch: u64,
        _changes: Vec<super::state::Change>,
    ) -> crate::broker::storage::Durable<'_> {
        Box::pin(async { Ok(()) })
    }
    fn save_namespace(&self, _text: String) -> crate::broker::storage::Durable<'_> {
        Box::pin(async { Ok(()) })
    }
    fn has_room(&self) -> bool {
        true
    }
    fn full_error(&self) -> String {
        String::new()
    }
    fn register(&self, _entity: &str) {}
    fn unregister(&self, _entity: &str) {}
    fn epochs(&self) -> tokio::sync::watch::Receiver<u64> {
        self.epoch.subscribe()
    }
}

impl Entity {
    /// Sends `message` without waiting for the reply (request `request`).
    async fn send_unanswered(&self, message: Message, request: u64) {
        self.command(Command::Send {
            messages: vec![message].into(),
            reply: Some(ReplyTo {
                sink: self.reply_sink.clone(),
                request: RequestId(request),
            }),
        })
        .await;
    }

    /// The next reply: its request and result.
    async fn next_reply(&mut self) -> (RequestId, Result<Reply, EntityError>) {
        match self.replies.recv().await {
            Some(Notification::Reply { request, result }) => (request, result),
            other => panic!("expected a reply, got {other:?}"),
        }
    }
}

fn gated_entity(log: &std::sync::Arc<GatedLog>) -> Entity {
    Entity::spawn_with(
        |_| {},
        Some(actor::Durability {
            storage: crate::broker::storage::Storage::new(log.clone()),
            key: PATH.to_string(),
            recovered: Vec::new(),
        }),
    )
}

#[tokio::test(start_paused = true)]
async fn turns_go_to_the_log_while_earlier_ones_are_written_and_are_answered_in_order() {
    let log = GatedLog::new();
    let mut entity = gated_entity(&log);
    entity.send_unanswered(message(1), 1).await;
    log.wait_for(1).await;
    // The second turn is written while the first still is (one turn at a time waited a
    // whole write before taking the next command).
    entity.send_unanswered(message(2), 2).await;
    log.wait_for(2).await;
    // The second write is durable first: its reply still waits for the first turn's.
    log.settle(2, Ok(()));
    let early = timeout_at(
        Instant::now() + Duration::from_secs(1),
        entity.replies.recv(),
    )
    .await;
    assert!(early.is_err(), "a later turn answered first: {early:?}");
    log.settle(1, Ok(()));
    let (first, result) = entity.next_reply().await;
    assert_eq!(first, RequestId(1));
    assert!(
        matches!(result, Ok(Reply::SequenceNumbers(ref numbers)) if numbers[..] == [SequenceNumber(1)]),
        "{result:?}"
    );
    let (second, result) = entity.next_reply().await;
    assert_eq!(second, RequestId(2));
    assert!(
        matches!(result, Ok(Reply::SequenceNumbers(ref numbers)) if numbers[..] == [SequenceNumber(2)]),
        "{result:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_failed_write_fails_every_later_turn_on_its_way_and_withdraws_their_sends() {
    let log = GatedLog::new();
    let mut entity = gated_entity(&log);
    let mut deliveries = entity.receive_and_delete(10).await;
    entity.send_unanswered(message(1), 1).await;
    log.wait_for(1).await;
    entity.send_unanswered(message(2), 2).await;
    log.wait_for(2).await;
    // The first write fails; the second (built on the first) is answered with the error
    // even though the log took it.
    log.settle(
        1,
        Err(crate::broker::storage::StorageError::Failed(
            "injected".into(),
        )),
    );
    log.settle(2, Ok(()));
    for expected in [RequestId(1), RequestId(2)] {
        let (request, result) = entity.next_reply().await;
        assert_eq!(request, expected);
        assert!(
            matches!(result, Err(EntityError::StorageFailed(_))),
            "{result:?}"
        );
    }
    // Neither message was delivered, nor is either stored.
    let delivered = timeout_at(Instant::now() + Duration::from_secs(1), deliveries.recv()).await;
    assert!(
        delivered.is_err(),
        "a refused send was delivered: {delivered:?}"
    );
    // The entity goes on: the next send is stored and delivered, with the receiver's
    // credit intact.
    entity.send_unanswered(message(3), 3).await;
    log.wait_for(3).await;
    log.settle(3, Ok(()));
    let (request, result) = entity.next_reply().await;
    assert_eq!(request, RequestId(3));
    assert!(result.is_ok(), "{result:?}");
    let record = next_delivery(&mut deliveries).await;
    assert_eq!(record.message.body(), &[3][..]);
}
