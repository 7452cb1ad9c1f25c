//! A topic: it holds no messages (rule DLQ-5); each message sent to it is offered to every
//! subscription, whose rules decide how many copies it gets (see [`super::rules`]). The
//! message bytes are shared (`Arc`), not copied, unless a rule action changes them.
//!
//! This file is the topic's task, the shell around its pure core
//! ([`super::topic_state::TopicState`]: rules, duplicate detection, scheduled messages,
//! rule management, all with explicit `now`). The task sends each subscription its copies,
//! awaits their replies (await order: topic → subscription, never the reverse) and answers
//! the sender once every copy is stored; it arms the timer for scheduled messages and
//! deletes the topic when idle.
//!
//! With durable storage each command's changes to the core (scheduled messages, counter,
//! duplicate ids) are durable before its reply goes out. A publish — a send, or a scheduled
//! message's activation — is one log record: the topic's changes (the id remembered, the
//! scheduled message gone) and every subscription's copies, which each subscription hands
//! over from a staged turn ([`Command::Stage`]). So a crash keeps the copies and the
//! topic's record of them together or neither: no resend slips past duplicate detection,
//! no scheduled message is published twice, and no forwarding source's re-sent outbox entry
//! is published twice (its key is among the topic's changes, [`Change::Received`]).

pub use super::entity::answer_all;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;

use super::entity::actor::IdleSender;
use super::entity::state::{Change, ForwardKey};
use super::entity::{
    BatchedSend, Command, EntityHandle, Notification, NotificationSender, Reply, ReplyTo, RequestId,
};
use super::filter::PropertyChange;
use super::message::Message;
use super::rules::{self, Rule};
use super::topic_state::{Copies, HeavyMessage, SubscriptionRules, TopicState};
use super::types::{EntityError, SequenceNumber};
use crate::broker::storage::Storage;
use crate::clock::Clock;
use crate::config::TopicConfig;
use dispatch::{Part, publish_into_off_the_workers, publish_off_the_workers};

mod dispatch;

/// Rewrites a message for a rule action: applies the changes and records the rule name.
/// Supplied by the AMQP adapter, which owns the encoding (the core must not).
pub type Rewriter = Arc<dyn Fn(&Message, &[PropertyChange], &str) -> Message + Send + Sync>;

/// Decodes a message's application properties for filters. Supplied by the AMQP adapter.
pub type PropertyDecoder =
    Arc<dyn Fn(&Message) -> Vec<(String, super::types::PropertyValue)> + Send + Sync>;

/// What a topic needs from outside the core: the AMQP adapter's functions (the encoding
/// stays out of the core) and the configured bound on rule evaluation.
#[derive(Clone)]
pub struct TopicCodec {
    /// Rewrites messages for rule actions.
    pub rewrite: Rewriter,
    /// Decodes application properties. A topic decodes every message it publishes itself
    /// — sent, forwarded into it or scheduled — so filters see the same properties
    /// whichever way a message arrived (issue 10, item 17).
    pub decode_properties: PropertyDecoder,
    /// Steps a subscription's rules may take on one message (`[server]
    /// filter_evaluation_budget`, see [`crate::broker::filter::Fuel`]).
    pub evaluation_budget: u64,
}

/// Dead-letter reason for session-less messages reaching a session subscription.
pub const SESSION_ID_IS_NULL: &str = "Session ID is null.";

/// A rule-management request for one subscription.
#[derive(Debug)]
pub enum RuleOperation {
    /// Add a rule; fails if the name is taken.
    Add(Box<Rule>),
    /// Remove a rule by name.
    Remove(String),
    /// List rules, skipping `skip`, at most `top`.
    Enumerate {
        /// Rules to skip.
        skip: usize,
        /// Most rules to return.
        top: usize,
    },
}

/// Requests to a topic task.
#[derive(Debug)]
pub enum TopicCommand {
    /// Publish the messages of one transfer.
    Publish {
        /// The messages.
        messages: Vec<Message>,
        /// Who waits for the outcome.
        reply: Option<ReplyTo>,
    },
    /// Publish a message from another entity's forwarding outbox (rule FWD-1): published at
    /// most once per outbox entry, however often the source sends it. The entry's key goes
    /// into the publish's one record; a key already here is answered "stored" and nothing
    /// is published.
    PublishForwarded {
        /// The message, stamped by the source.
        message: Message,
        /// Which outbox entry it is.
        key: ForwardKey,
        /// The source committed every entry below this number as forwarded.
        floor: SequenceNumber,
        /// Who waits for the outcome.
        reply: ReplyTo,
    },
    /// Publish the sends of consecutive transfers, each as [`TopicCommand::Publish`] would
    /// and with its own outcome (issue 16: a command to the topic per transfer, and one to
    /// every subscription per transfer, became one per read).
    PublishBatch {
        /// The sends, in the order they arrived.
        sends: Vec<BatchedSend>,
        /// The connection waiting for the outcomes of the sends that have a request.
        sink: NotificationSender,
    },
    /// Schedule messages on the topic (`schedule-message` on `<topic>/$management`): they
    /// are published at their `x-opt-scheduled-enqueue-time` (rules SCH-1..4).
    Schedule {
        /// The messages.
        messages: Vec<Message>,
        /// Who waits for the sequence numbers.
        reply: ReplyTo,
    },
    /// Cancel scheduled messages by sequence number.
    CancelScheduled {
        /// Their sequence numbers.
        sequence_numbers: Vec<SequenceNumber>,
        /// Who waits.
        reply: ReplyTo,
    },
    /// Add a subscription created at run time.
    AddSubscription {
        /// The subscription: its actor and rules.
        entry: Box<SubscriptionEntry>,
        /// Who waits.
        reply: ReplyTo,
    },
    /// Remove a subscription (its actor is deleted by the caller).
    RemoveSubscription {
        /// Subscription name (case-insensitive).
        name: String,
        /// Who waits.
        reply: ReplyTo,
    },
    /// Apply topic settings changed at run time (TTL is applied by the subscriptions).
    Update {
        /// Duplicate detection window (`None`: off).
        duplicate_detection: Option<Duration>,
        /// Idle deletion.
        auto_delete_on_idle: Option<Duration>,
        /// Whether sends are taken.
        status: crate::config::EntityStatus,
        /// Who waits.
        reply: ReplyTo,
    },
    /// Report the topic's scheduled message count.
    Describe {
        /// Who waits for [`Reply::Counts`].
        reply: ReplyTo,
    },
    /// Delete the topic: it stops and forgets its stored state (the caller deletes the
    /// subscriptions).
    Delete {
        /// Who waits.
        reply: ReplyTo,
    },
    /// Manage a subscription's rules.
    Rules {
        /// Subscription name (case-insensitive).
        subscription: String,
        /// What to do.
        operation: RuleOperation,
        /// Who waits.
        reply: ReplyTo,
    },
}

/// A cheap handle to a topic task.
#[derive(Debug, Clone)]
pub struct TopicHandle {
    /// The topic path as configured.
    pub path: Arc<str>,
    /// The task's bounded inbox.
    commands: mpsc::Sender<TopicCommand>,
}

impl TopicHandle {
    /// A handle whose commands go into `commands` instead of a local topic task's inbox (a
    /// topic reached through `cluster::remote`): whoever drains the channel carries the
    /// commands on and answers them.
    pub fn from_channel(path: &str, commands: mpsc::Sender<TopicCommand>) -> TopicHandle {
        TopicHandle {
            path: path.into(),
            commands,
        }
    }

    /// Sends a command; fails with `NotFound` when the topic is gone.
    pub async fn send(&self, command: TopicCommand) -> Result<(), EntityError> {
        self.commands
            .send(command)
            .await
            .map_err(|_| EntityError::NotFound(self.path.to_string()))
    }

    /// Sends a command; when the topic is gone, the error and the command back (its
    /// waiters are the caller's to answer).
    pub async fn send_or_give_back(
        &self,
        command: TopicCommand,
    ) -> Result<(), (EntityError, TopicCommand)> {
        self.commands
            .send(command)
            .await
            .map_err(|mpsc::error::SendError(command)| {
                (EntityError::NotFound(self.path.to_string()), command)
            })
    }

    /// Whether both handles reach the same topic.
    pub fn same_topic(&self, other: &TopicHandle) -> bool {
        self.commands.same_channel(&other.commands)
    }
}

/// One subscription as the topic sees it.
#[derive(Debug)]
pub struct SubscriptionEntry {
    /// Subscription name.
    pub name: String,
    /// Its actor.
    pub handle: EntityHandle,
    /// Its rules, in creation order.
    pub rules: Vec<Rule>,
    /// Dead-letter messages whose filter evaluation fails, instead of skipping them.
    pub dead_letter_on_filter_errors: bool,
    /// Messages must carry a session id.
    pub requires_session: bool,
}

/// The topic task: the pure core, the subscriptions' actors, the timer and the storage.
struct Topic {
    /// Configured path.
    path: String,
    /// Rules, duplicates, scheduled messages: the pure core.
    state: TopicState,
    /// The subscriptions' actors, in the core's subscription order.
    handles: Vec<EntityHandle>,
    /// Delete the topic after this long without publishes or rule changes (rule IDL-2).
    auto_delete_on_idle: Option<Duration>,
    /// Wall clock.
    clock: Clock,
    /// The durable storage and the topic's key in it (`None`: in memory).
    storage: Option<(Storage, String)>,
    /// Whether sends are taken (admin API `Status`).
    status: crate::config::EntityStatus,
    /// Publishes whose copies are on their way to the subscriptions, by request id (ids
    /// the topic numbers in order: neighbours in one cache line, no SipHash per publish).
    in_flight: super::entity::state::SequenceMap<u64, InFlight>,
    /// The request id of the next publish.
    next_publish: u64,
    /// Each subscription's copies of the publish at hand, emptied after each: their room
    /// serves the next (see [`TopicState::publish_into`]).
    scratch: Vec<Copies>,
}

/// Publishes in flight at most: beyond, the topic stops reading its inbox until replies
/// come back, so a slow subscription holds senders back instead of growing memory.
const MAX_IN_FLIGHT: usize = 256;

/// A publish whose copies the subscriptions have not all stored yet (issue 16: fan-out
/// without a round trip per publish; the next publish goes out before this one's replies).
struct InFlight {
    /// Subscriptions that have not answered.
    remaining: usize,
    /// Done, or the first refusal.
    outcome: Result<Reply, EntityError>,
    /// The sender, answered when every copy is stored.
    reply: Option<ReplyTo>,
}

/// Starts a topic's task. With `durability` (storage, key, recovered changes) the topic
/// starts from its recovered scheduled messages, counter and duplicate history.
pub fn spawn(
    config: &TopicConfig,
    subscriptions: Vec<SubscriptionEntry>,
    clock: Clock,
    on_idle: IdleSender,
    codec: TopicCodec,
    durability: Option<(Storage, String, Vec<Change>)>,
    lifecycle: &crate::broker::lifecycle::Lifecycle,
) -> TopicHandle {
    let (commands, inbox) = mpsc::channel::<TopicCommand>(1024);
    let handle = TopicHandle {
        path: config.name.as_str().into(),
        commands,
    };
    let (handles, rules): (Vec<_>, Vec<_>) = subscriptions
        .into_iter()
        .map(|entry| {
            (
                entry.handle,
                SubscriptionRules {
                    name: entry.name,
                    rules: entry.rules,
                    dead_letter_on_filter_errors: entry.dead_letter_on_filter_errors,
                    requires_session: entry.requires_session,
                },
            )
        })
        .unzip();
    let mut state = TopicState::new(config.name.clone(), rules, None, codec);
    state.set_partitions(
        super::registry::partitions(config.enable_partitioning),
        config.requires_duplicate_detection,
    );
    state.set_duplicate_detection(
        config
            .requires_duplicate_detection
            .then_some(config.duplicate_detection_history_time_window),
    );
    let mut topic = Topic {
        path: config.name.clone(),
        state,
        handles,
        auto_delete_on_idle: config.auto_delete_on_idle,
        clock,
        storage: None,
        status: config.status,
        in_flight: Default::default(),
        next_publish: 0,
        scratch: Vec::new(),
    };
    if let Some((storage, key, recovered)) = durability {
        topic.state.restore(clock.now(), recovered);
        topic.state.set_journaling(true);
        storage.register(&key);
        topic.storage = Some((storage, key));
    }
    lifecycle.spawn(topic.run(inbox, on_idle, lifecycle.stopping()));
    handle
}

impl Topic {
    /// Makes the core's changes durable before anything is answered.
    async fn commit(&mut self) -> Result<(), EntityError> {
        let Some((storage, key)) = &self.storage else {
            return Ok(());
        };
        let changes = self.state.take_changes();
        if changes.is_empty() {
            return Ok(());
        }
        storage.append(key, changes).await.map_err(|error| {
            tracing::error!(topic = %key, %error, "cannot make a topic change durable");
            EntityError::StorageFailed(format!(
                "The broker could not store the operation durably: {error}"
            ))
        })
    }

    /// Writes the topic's whole durable state for compaction round `epoch`.
    async fn checkpoint(&mut self, epoch: u64) {
        let Some((storage, key)) = &self.storage else {
            return;
        };
        let changes = self.state.checkpoint();
        if let Err(error) = storage.checkpoint(key, epoch, changes).await {
            tracing::error!(topic = %key, %error, "cannot write a checkpoint");
        }
    }

    async fn run(
        mut self,
        mut inbox: mpsc::Receiver<TopicCommand>,
        on_idle: IdleSender,
        mut stopping: tokio::sync::watch::Receiver<bool>,
    ) {
        let (sink, mut replies) = mpsc::unbounded_channel();
        let mut last_activity = tokio::time::Instant::now();
        let mut epochs = self.storage.as_ref().map(|(storage, _)| storage.epochs());
        let mut checkpointed = 0;
        let mut deleted = false;
        self.number_past_subscriptions(&sink, &mut replies).await;
        // Scheduled messages that came due while the broker was down are published now.
        self.activate_due(&sink, &mut replies).await;
        loop {
            if let Some(epochs) = &mut epochs {
                let epoch = *epochs.borrow_and_update();
                if epoch > checkpointed {
                    if self.settle_in_flight(&mut replies, &mut stopping).await {
                        break;
                    }
                    self.checkpoint(epoch).await;
                    checkpointed = epoch;
                }
            }
            let idle = async {
                match self.auto_delete_on_idle {
                    // Pending scheduled messages keep the topic alive (rule IDL-2).
                    Some(after) if !self.state.has_scheduled() => {
                        tokio::time::sleep_until(last_activity + after).await
                    }
                    _ => std::future::pending().await,
                }
            };
            let due = self.state.next_activation();
            let activation = async {
                match due {
                    Some(at) => tokio::time::sleep_until(self.clock.instant_at(at)).await,
                    None => std::future::pending().await,
                }
            };
            let command = tokio::select! {
                Some(notification) = replies.recv(), if !self.in_flight.is_empty() => {
                    self.copies_stored(notification).await;
                    continue;
                }
                command = inbox.recv(), if self.in_flight.len() < MAX_IN_FLIGHT => command,
                () = crate::broker::lifecycle::stopped(&mut stopping) => break,
                () = activation => {
                    if self.settle_in_flight(&mut replies, &mut stopping).await {
                        break;
                    }
                    self.activate_due(&sink, &mut replies).await;
                    continue;
                }
                () = idle => {
                    if self.settle_in_flight(&mut replies, &mut stopping).await {
                        break;
                    }
                    // Its subscriptions' activity counts too (rule IDL-1).
                    if let Some(active) = self.subscription_activity(&sink, &mut replies).await {
                        last_activity = last_activity.max(active);
                        continue;
                    }
                    let _ = on_idle.send(self.path.clone());
                    if let Some((storage, key)) = &self.storage
                        && let Err(error) = storage.drop_entity(key).await
                    {
                        tracing::warn!(topic = %key, %error, "cannot record the deletion of an idle topic");
                    }
                    break;
                }
                Ok(()) = async {
                    match &mut epochs {
                        Some(epochs) => epochs.changed().await,
                        None => std::future::pending().await,
                    }
                } => continue,
            };
            let Some(command) = command else { break };
            last_activity = tokio::time::Instant::now();
            let now = self.clock.now();
            // Everything but a publish waits until the publishes before it are stored.
            if !matches!(
                command,
                TopicCommand::Publish { .. }
                    | TopicCommand::PublishForwarded { .. }
                    | TopicCommand::PublishBatch { .. }
            ) && self.settle_in_flight(&mut replies, &mut stopping).await
            {
                refuse(&self.path, command);
                break;
            }
            match command {
                TopicCommand::Publish { messages, reply } if !self.status.allows_send() => {
                    drop(messages);
                    if let Some(reply) = reply {
                        reply.send(Err(EntityError::Disabled(format!(
                            "Messaging entity '{}' is currently disabled for sending ({}).",
                            self.path,
                            self.status.as_str()
                        ))));
                    }
                }
                TopicCommand::Publish { messages, reply } => {
                    let copies = publish_off_the_workers(&mut self.state, now, messages).await;
                    let changes = self.state.take_changes();
                    self.start_publish(copies, reply, changes, &sink).await;
                }
                TopicCommand::PublishForwarded { reply, .. } if !self.status.allows_send() => {
                    reply.send(Err(EntityError::Disabled(format!(
                        "Messaging entity '{}' is currently disabled for sending ({}).",
                        self.path,
                        self.status.as_str()
                    ))));
                }
                TopicCommand::PublishForwarded {
                    message,
                    key,
                    floor,
                    reply,
                } => {
                    if self.state.forwarded_already(&key, floor) {
                        // Published before the source recorded it (that publish's record
                        // is written: it is appended before the next command is read).
                        // Only the keys forgotten now are left to write.
                        let committed = self.commit().await;
                        reply.send(committed.map(|()| Reply::Done));
                    } else {
                        let copies =
                            publish_off_the_workers(&mut self.state, now, vec![message]).await;
                        self.state.received_forwarded(key);
                        let changes = self.state.take_changes();
                        self.start_publish(copies, Some(reply), changes, &sink)
                            .await;
                    }
                }
                TopicCommand::PublishBatch {
                    sends,
                    sink: waiting,
                } => {
                    if self.status.allows_send() {
                        self.start_publishes(now, sends, waiting, &sink).await;
                    } else {
                        let error = EntityError::Disabled(format!(
                            "Messaging entity '{}' is currently disabled for sending ({}).",
                            self.path,
                            self.status.as_str()
                        ));
                        answer_all(&waiting, sends, &error);
                    }
                }
                TopicCommand::Schedule { messages, reply } => {
                    let numbers = self.state.schedule(now, messages);
                    let committed = self.commit().await;
                    reply.send(committed.map(|()| Reply::SequenceNumbers(numbers.into())));
                    self.activate_due(&sink, &mut replies).await;
                }
                TopicCommand::CancelScheduled {
                    sequence_numbers,
                    reply,
                } => {
                    self.state.cancel(&sequence_numbers);
                    let committed = self.commit().await;
                    reply.send(committed.map(|()| Reply::Done));
                }
                TopicCommand::Rules {
                    subscription,
                    operation,
                    reply,
                } => {
                    let result = self.state.manage_rules(now, &subscription, operation);
                    // A rule change is durable before it is answered.
                    let committed = self.commit().await;
                    reply.send(committed.and(result));
                }
                TopicCommand::AddSubscription { entry, reply } => {
                    let entry = *entry;
                    self.handles.push(entry.handle);
                    self.state.add_subscription(SubscriptionRules {
                        name: entry.name,
                        rules: entry.rules,
                        dead_letter_on_filter_errors: entry.dead_letter_on_filter_errors,
                        requires_session: entry.requires_session,
                    });
                    let committed = self.commit().await;
                    reply.send(committed.map(|()| Reply::Done));
                }
                TopicCommand::RemoveSubscription { name, reply } => {
                    match self.state.remove_subscription(&name) {
                        Some(index) => {
                            self.handles.remove(index);
                            reply.send(Ok(Reply::Done));
                        }
                        None => reply.send(Err(EntityError::NotFound(format!(
                            "{}/Subscriptions/{name}",
                            self.path
                        )))),
                    }
                }
                TopicCommand::Update {
                    duplicate_detection,
                    auto_delete_on_idle,
                    status,
                    reply,
                } => {
                    self.state.set_duplicate_detection(duplicate_detection);
                    self.auto_delete_on_idle = auto_delete_on_idle;
                    self.status = status;
                    reply.send(Ok(Reply::Done));
                }
                TopicCommand::Describe { reply } => {
                    reply.send(Ok(Reply::Counts(Box::new(super::entity::EntityCounts {
                        scheduled: self.state.scheduled_count() as u64,
                        ..Default::default()
                    }))));
                }
                TopicCommand::Delete { reply } => {
                    inbox.close();
                    let mut result = Ok(Reply::Done);
                    if let Some((storage, key)) = &self.storage
                        && let Err(error) = storage.drop_entity(key).await
                    {
                        result = Err(EntityError::StorageFailed(format!(
                            "The broker could not store the deletion durably: {error}"
                        )));
                    }
                    while let Ok(command) = inbox.try_recv() {
                        refuse(&self.path, command);
                    }
                    reply.send(result);
                    deleted = true;
                    break;
                }
            }
        }
        if let Some((storage, key)) = &self.storage {
            storage.unregister(key);
        }
        if deleted {
            tracing::info!(topic = %self.path, "topic deleted");
        }
    }

    /// Raises the topic's sequence counter past every number its subscriptions hold (or
    /// ever held: their logs keep their counters): the topic does not write its counter
    /// per publish, and data from a version that numbered per subscription is carried on,
    /// so a number is never given twice to messages anyone saw.
    /// Hands each subscription its copies of one publish and goes on; the sender is
    /// answered by [`Self::copies_stored`] once every subscription has stored them.
    async fn start_publish(
        &mut self,
        copies: Vec<Copies>,
        reply: Option<ReplyTo>,
        changes: Vec<Change>,
        sink: &mpsc::UnboundedSender<Notification>,
    ) {
        let id = self.next_publish;
        self.next_publish = self.next_publish.wrapping_add(1);
        let (remaining, outcome) = self.send_copies(copies, changes, sink, RequestId(id)).await;
        let publish = InFlight {
            remaining,
            outcome,
            reply,
        };
        if publish.remaining == 0 {
            self.finish_publish(publish).await;
        } else {
            self.in_flight.insert(id, publish);
        }
    }

    /// Publishes the sends of a [`TopicCommand::PublishBatch`]: each is published as
    /// [`Self::start_publish`] does, with a request of its own, but each subscription gets
    /// its copies of all of them in one command (and its dead letters in one more), in the
    /// order the sends arrived.
    async fn start_publishes(
        &mut self,
        now: crate::broker::types::Timestamp,
        mut sends: Vec<BatchedSend>,
        waiting: NotificationSender,
        sink: &NotificationSender,
    ) {
        let subscriptions = self.handles.len();
        let mut parts: Vec<Part> = (0..subscriptions).map(|_| Part::default()).collect();
        let mut ids = Vec::with_capacity(sends.len());
        let mut changes = Vec::new();
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.resize_with(subscriptions, Copies::default);
        for send in sends.drain(..) {
            publish_into_off_the_workers(&mut self.state, now, send.messages, &mut scratch).await;
            changes.append(&mut self.state.take_changes());
            let id = self.next_publish;
            self.next_publish = self.next_publish.wrapping_add(1);
            let mut remaining = 0;
            for (part, copies) in parts.iter_mut().zip(scratch.iter_mut()) {
                part.dead_letters.append(&mut copies.dead_lettered);
                if !copies.accepted.is_empty() {
                    part.sends.push(BatchedSend {
                        messages: copies.accepted.drain(..).collect(),
                        numbers: copies.numbers.drain(..).collect(),
                        request: Some(RequestId(id)),
                    });
                    remaining += 1;
                }
            }
            let reply = send.request.map(|request| ReplyTo {
                sink: waiting.clone(),
                request,
            });
            self.in_flight.insert(
                id,
                InFlight {
                    remaining,
                    outcome: Ok(Reply::Done),
                    reply,
                },
            );
            ids.push(id);
        }
        self.scratch = scratch;
        BatchedSend::recycle(sends);
        let dispatched = self.dispatch(parts, changes, sink).await;
        for (sends, error) in dispatched.refused {
            // The subscription is gone: its copies count as refused.
            for send in sends {
                if let Some(publish) = send
                    .request
                    .and_then(|request| self.in_flight.get_mut(&request.0))
                {
                    publish.outcome = Err(error.clone());
                    publish.remaining -= 1;
                }
            }
        }
        // Publishes no subscription stores a copy of are answered now (with the outcome of
        // the topic's own record).
        for id in ids {
            if let Some(publish) = self.in_flight.get_mut(&id)
                && let Err(error) = &dispatched.written
            {
                publish.outcome = Err(error.clone());
            }
            if self
                .in_flight
                .get(&id)
                .is_some_and(|publish| publish.remaining == 0)
                && let Some(publish) = self.in_flight.remove(&id)
            {
                self.finish_publish(publish).await;
            }
        }
    }

    /// A subscription's answer to publishes in flight.
    async fn copies_stored(&mut self, notification: Notification) {
        match notification {
            Notification::Reply { request, result } => self.copy_stored(request, result).await,
            Notification::Replies { replies } => {
                for (request, result) in replies {
                    self.copy_stored(request, result).await;
                }
            }
            _ => {}
        }
    }

    /// One subscription's answer to one publish in flight.
    async fn copy_stored(&mut self, request: RequestId, result: Result<Reply, EntityError>) {
        let Some(publish) = self.in_flight.get_mut(&request.0) else {
            return;
        };
        if let Err(error) = result {
            publish.outcome = Err(error);
        }
        publish.remaining -= 1;
        if publish.remaining == 0
            && let Some(publish) = self.in_flight.remove(&request.0)
        {
            self.finish_publish(publish).await;
        }
    }

    /// Every subscription answered (the publish's record, with the topic's changes, is
    /// durable or refused): the sender hears the outcome.
    async fn finish_publish(&mut self, publish: InFlight) {
        if let Some(reply) = publish.reply {
            reply.send(publish.outcome);
        }
    }

    /// Waits until every publish in flight is answered (before anything that reads the
    /// reply channel itself or must follow the publishes). True when the broker stops
    /// meanwhile.
    async fn settle_in_flight(
        &mut self,
        replies: &mut mpsc::UnboundedReceiver<Notification>,
        stopping: &mut tokio::sync::watch::Receiver<bool>,
    ) -> bool {
        while !self.in_flight.is_empty() {
            let notification = tokio::select! {
                notification = replies.recv() => notification,
                () = crate::broker::lifecycle::stopped(stopping) => return true,
            };
            match notification {
                Some(notification) => self.copies_stored(notification).await,
                None => return true,
            }
        }
        false
    }

    /// Every subscription's counts (those that answer).
    async fn subscription_counts(
        &self,
        sink: &mpsc::UnboundedSender<Notification>,
        replies: &mut mpsc::UnboundedReceiver<Notification>,
    ) -> Vec<super::entity::EntityCounts> {
        let mut waiting = 0usize;
        for (index, handle) in self.handles.iter().enumerate() {
            let reply = ReplyTo {
                sink: sink.clone(),
                request: RequestId(index as u64),
            };
            if handle.send(Command::Describe { reply }).await.is_ok() {
                waiting += 1;
            }
        }
        let mut all = Vec::with_capacity(waiting);
        for _ in 0..waiting {
            match replies.recv().await {
                Some(Notification::Reply {
                    result: Ok(Reply::Counts(counts)),
                    ..
                }) => all.push(*counts),
                Some(_) => {}
                None => break,
            }
        }
        all
    }

    /// When its subscriptions were last active, if that keeps the topic alive: a
    /// subscription with a receiver attached, forwarding or scheduled messages keeps it
    /// alive now; otherwise their latest activity counts as the topic's (rule IDL-1).
    async fn subscription_activity(
        &self,
        sink: &mpsc::UnboundedSender<Notification>,
        replies: &mut mpsc::UnboundedReceiver<Notification>,
    ) -> Option<tokio::time::Instant> {
        let after = self.auto_delete_on_idle?;
        let counts = self.subscription_counts(sink, replies).await;
        let now = tokio::time::Instant::now();
        let latest = counts
            .iter()
            .map(|counts| {
                if counts.kept_alive {
                    now
                } else {
                    self.clock.instant_at(counts.last_activity)
                }
            })
            .max();
        latest.filter(|at| *at + after > now)
    }

    async fn number_past_subscriptions(
        &mut self,
        sink: &mpsc::UnboundedSender<Notification>,
        replies: &mut mpsc::UnboundedReceiver<Notification>,
    ) {
        let mut next: Vec<i64> = Vec::new();
        for counts in self.subscription_counts(sink, replies).await {
            // Per partition when partitioned (rule PRT-1).
            let used = counts
                .next_sequence_numbers
                .iter()
                .filter(|next| **next > 0);
            for (index, number) in used.enumerate() {
                match next.get_mut(index) {
                    Some(slot) => *slot = (*slot).max(*number),
                    None => next.push(*number),
                }
            }
        }
        for number in next {
            self.state.raise_sequence_number(number);
        }
        if let Err(error) = self.commit().await {
            tracing::warn!(topic = %self.path, %error, "the topic's sequence counter is not durable");
        }
    }

    /// Publishes every scheduled message whose time has come (rule SCH-3): the copies are
    /// enqueued in the subscriptions as new messages, and only then does the scheduled
    /// message leave the topic's log.
    async fn activate_due(
        &mut self,
        sink: &mpsc::UnboundedSender<Notification>,
        replies: &mut mpsc::UnboundedReceiver<Notification>,
    ) {
        while let Some((sequence_number, message)) = self.state.take_due(self.clock.now()) {
            let copies =
                publish_off_the_workers(&mut self.state, self.clock.now(), vec![message]).await;
            // The scheduled message leaves the topic's log in the record that stores its
            // copies (rule SCH-3): a crash publishes it once or not yet, never twice.
            self.state.published(sequence_number);
            let changes = self.state.take_changes();
            if let Err(error) = self.deliver(copies, changes, sink, replies).await {
                tracing::warn!(topic = %self.path, %error, "a scheduled message could not be published");
            }
        }
    }
}

/// Answers a command that reached a topic being deleted.
fn refuse(path: &str, command: TopicCommand) {
    command.refuse_with(EntityError::NotFound(path.to_string()));
}

impl TopicCommand {
    /// Answers a command that will not be carried out (its topic is being deleted, or runs
    /// on a node that cannot be reached) with `error`: every reply it waits for. A publish
    /// no one waits on is dropped.
    pub fn refuse_with(self, error: EntityError) {
        match self {
            TopicCommand::PublishBatch { sends, sink } => {
                answer_all(&sink, sends, &error);
            }
            TopicCommand::Publish { reply, .. } => {
                if let Some(reply) = reply {
                    reply.send(Err(error));
                }
            }
            TopicCommand::PublishForwarded { reply, .. }
            | TopicCommand::Schedule { reply, .. }
            | TopicCommand::CancelScheduled { reply, .. }
            | TopicCommand::AddSubscription { reply, .. }
            | TopicCommand::RemoveSubscription { reply, .. }
            | TopicCommand::Update { reply, .. }
            | TopicCommand::Describe { reply }
            | TopicCommand::Delete { reply }
            | TopicCommand::Rules { reply, .. } => reply.send(Err(error)),
        }
    }
}

/// Compiles a subscription's configured rules.
pub fn compile_rules(
    configs: &[crate::config::RuleConfig],
    created_at: i64,
) -> Result<Vec<Rule>, rules::RuleError> {
    configs
        .iter()
        .map(|config| rules::compile(config, created_at))
        .collect()
}
