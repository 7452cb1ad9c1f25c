//! A topic: it holds no messages (rule DLQ-5); each message sent to it is offered to every
//! subscription, whose rules decide how many copies it gets (see [`super::rules`]). The
//! message bytes are shared (`Arc`), not copied, unless a rule action changes them.
//!
//! The topic task also owns its subscriptions' rules (filters are evaluated here, before a
//! copy exists), answers rule management, detects duplicates for the topic, and deletes
//! itself when idle. It awaits its subscriptions' replies (await order: topic →
//! subscription, never the reverse) and answers the sender once every copy is stored.
//!
//! With durable storage the topic's own state goes through a [`MessageLog`] like an entity's:
//! its scheduled messages (put when scheduled, removed when cancelled or published), its
//! sequence counter and its duplicate-detection history. Each command's changes are durable
//! before its reply goes out; a scheduled message is removed only after every subscription
//! has stored its copies, so a crash in between publishes it again rather than losing it.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;

use super::entity::actor::IdleSender;
use super::entity::duplicates::DuplicateDetector;
use super::entity::state::{Change, MessageLog, Record};
use super::entity::{Command, EntityHandle, Notification, Reply, ReplyTo, RequestId};
use super::filter::PropertyChange;
use super::message::Message;
use super::rules::{self, FilterView, Rule};
use super::types::{EntityError, MessageState, SequenceNumber, SubQueue, Timestamp};
use crate::clock::Clock;
use crate::config::TopicConfig;
use crate::store::storage::Storage;

/// Rewrites a message for a rule action: applies the changes and records the rule name.
/// Supplied by the AMQP adapter, which owns the encoding (the core must not).
pub type Rewriter = Arc<dyn Fn(&Message, &[PropertyChange], &str) -> Message + Send + Sync>;

/// Decodes a message's application properties for filters. Supplied by the AMQP adapter.
pub type PropertyDecoder =
    Arc<dyn Fn(&Message) -> Vec<(String, super::types::PropertyValue)> + Send + Sync>;

/// What a topic needs from the AMQP adapter: the encoding stays out of the core.
#[derive(Clone)]
pub struct TopicCodec {
    /// Rewrites messages for rule actions.
    pub rewrite: Rewriter,
    /// Decodes application properties. A topic decodes every message it publishes itself
    /// — sent, forwarded into it or scheduled — so filters see the same properties
    /// whichever way a message arrived (issue 10, item 17).
    pub decode_properties: PropertyDecoder,
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
        messages: Vec<Arc<Message>>,
        /// Who waits for the outcome.
        reply: Option<ReplyTo>,
    },
    /// Schedule messages on the topic (`schedule-message` on `<topic>/$management`): they
    /// are published at their `x-opt-scheduled-enqueue-time` (rules SCH-1..4).
    Schedule {
        /// The messages.
        messages: Vec<Arc<Message>>,
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
    /// Sends a command; fails with `NotFound` when the topic is gone.
    pub async fn send(&self, command: TopicCommand) -> Result<(), EntityError> {
        self.commands
            .send(command)
            .await
            .map_err(|_| EntityError::NotFound(self.path.to_string()))
    }
}

/// One subscription as the topic sees it.
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

/// The topic task's state.
struct Topic {
    /// Configured path.
    path: String,
    /// Subscriptions in configuration order.
    subscriptions: Vec<SubscriptionEntry>,
    /// Topic-level duplicate detection, when enabled.
    duplicates: Option<DuplicateDetector>,
    /// Delete the topic after this long without publishes or rule changes (rule IDL-2).
    auto_delete_on_idle: Option<Duration>,
    /// Wall clock.
    clock: Clock,
    /// Applies rule actions.
    codec: TopicCodec,
    /// The topic's durable state: scheduled messages and the sequence counter (rule
    /// SEQ-1); duplicate-detection changes are noted in it too.
    log: MessageLog,
    /// Scheduled messages by (due time, sequence number): the timer's index over `log`.
    scheduled: BTreeMap<(Timestamp, SequenceNumber), Arc<Message>>,
    /// The durable storage and the topic's key in it (`None`: in memory).
    storage: Option<(Storage, String)>,
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
    let mut topic = Topic {
        path: config.name.clone(),
        subscriptions,
        duplicates: config
            .requires_duplicate_detection
            .then(|| DuplicateDetector::new(config.duplicate_detection_history_time_window)),
        auto_delete_on_idle: config.auto_delete_on_idle,
        clock,
        codec,
        log: MessageLog::new(false),
        scheduled: BTreeMap::new(),
        storage: None,
    };
    if let Some((storage, key, recovered)) = durability {
        topic.restore(recovered);
        topic.log.set_journaling(true);
        storage.register(&key);
        topic.storage = Some((storage, key));
    }
    lifecycle.spawn(topic.run(inbox, on_idle, lifecycle.stopping()));
    handle
}

/// The copies one subscription gets of one message.
struct Copies {
    /// Messages to enqueue.
    accepted: Vec<Arc<Message>>,
    /// Messages to dead-letter on arrival, with reason and description.
    dead_lettered: Vec<(Arc<Message>, String, String)>,
}

impl Topic {
    /// Replays recovered changes: scheduled messages (timers re-armed through the index),
    /// the counter, the duplicate history.
    fn restore(&mut self, changes: Vec<Change>) {
        self.log.replay(changes, self.duplicates.as_mut());
        let now = self.clock.now();
        for record in self.log.records(SubQueue::Main).values() {
            let at = record.message.scheduled_enqueue_time.unwrap_or(now);
            self.scheduled
                .insert((at, record.sequence_number), record.message.clone());
        }
    }

    /// Makes this command's changes durable before anything is answered; false when they
    /// could not be stored (the caller answers with the error instead).
    async fn commit(&mut self) -> Result<(), EntityError> {
        let Some((storage, key)) = &self.storage else {
            return Ok(());
        };
        let changes = self.log.take_changes();
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
        let changes = self.log.checkpoint_with(self.duplicates.as_ref());
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
        // Scheduled messages that came due while the broker was down are published now.
        self.activate_due(&sink, &mut replies).await;
        loop {
            if let Some(epochs) = &mut epochs {
                let epoch = *epochs.borrow_and_update();
                if epoch > checkpointed {
                    self.checkpoint(epoch).await;
                    checkpointed = epoch;
                }
            }
            let idle = async {
                match self.auto_delete_on_idle {
                    // Pending scheduled messages keep the topic alive (rule IDL-2).
                    Some(after) if self.scheduled.is_empty() => {
                        tokio::time::sleep_until(last_activity + after).await
                    }
                    _ => std::future::pending().await,
                }
            };
            let due = self.scheduled.keys().next().map(|(at, _)| *at);
            let activation = async {
                match due {
                    Some(at) => tokio::time::sleep_until(self.clock.instant_at(at)).await,
                    None => std::future::pending().await,
                }
            };
            let command = tokio::select! {
                command = inbox.recv() => command,
                () = crate::broker::lifecycle::stopped(&mut stopping) => break,
                () = activation => {
                    self.activate_due(&sink, &mut replies).await;
                    continue;
                }
                () = idle => {
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
            match command {
                TopicCommand::Publish { messages, reply } => {
                    let outcome = self.publish(messages, &sink, &mut replies).await;
                    let committed = self.commit().await;
                    if let Some(reply) = reply {
                        reply.send(committed.and(outcome));
                    }
                }
                TopicCommand::Schedule { messages, reply } => {
                    let now = self.clock.now();
                    let numbers: Vec<SequenceNumber> = messages
                        .into_iter()
                        .map(|message| {
                            let sequence_number = self.log.allocate();
                            let at = message.scheduled_enqueue_time.unwrap_or(now);
                            self.log.insert(
                                SubQueue::Main,
                                Record {
                                    message: message.clone(),
                                    sequence_number,
                                    enqueued_time: now,
                                    time_to_live: message.header.time_to_live,
                                    expires_at: None,
                                    delivery_count: 0,
                                    state: MessageState::Scheduled,
                                    property_changes: Vec::new(),
                                },
                            );
                            self.scheduled.insert((at, sequence_number), message);
                            sequence_number
                        })
                        .collect();
                    let committed = self.commit().await;
                    reply.send(committed.map(|()| Reply::SequenceNumbers(numbers)));
                    self.activate_due(&sink, &mut replies).await;
                }
                TopicCommand::CancelScheduled {
                    sequence_numbers,
                    reply,
                } => {
                    self.scheduled
                        .retain(|(_, number), _| !sequence_numbers.contains(number));
                    for number in &sequence_numbers {
                        self.log.remove(SubQueue::Main, *number);
                    }
                    let committed = self.commit().await;
                    reply.send(committed.map(|()| Reply::Done));
                }
                TopicCommand::Rules {
                    subscription,
                    operation,
                    reply,
                } => reply.send(self.manage_rules(&subscription, operation)),
            }
        }
        if let Some((storage, key)) = &self.storage {
            storage.unregister(key);
        }
    }

    /// Publishes every scheduled message whose time has come (rule SCH-3): the copies are
    /// enqueued in the subscriptions as new messages.
    async fn activate_due(
        &mut self,
        sink: &mpsc::UnboundedSender<Notification>,
        replies: &mut mpsc::UnboundedReceiver<Notification>,
    ) {
        let now = self.clock.now();
        while let Some(entry) = self.scheduled.first_entry() {
            if entry.key().0 > now {
                break;
            }
            let ((_, sequence_number), message) = entry.remove_entry();
            if let Err(error) = self.publish(vec![message], sink, replies).await {
                tracing::warn!(topic = %self.path, %error, "a scheduled message could not be published");
            }
            // Only now, with every copy stored, does the scheduled message leave the log.
            self.log.remove(SubQueue::Main, sequence_number);
            if let Err(error) = self.commit().await {
                tracing::warn!(topic = %self.path, %error, "the publication of a scheduled message is not durable");
            }
        }
    }

    fn copies_for(&self, entry: &SubscriptionEntry, message: &Arc<Message>, now: i64) -> Copies {
        let view = FilterView {
            message,
            enqueued_time: now,
        };
        let mut copies = Copies {
            accepted: Vec::new(),
            dead_lettered: Vec::new(),
        };
        let mut plain_match = false;
        for rule in &entry.rules {
            let matched = match rule.filter.evaluate(&view) {
                Ok(matched) => matched,
                Err(error) => {
                    if entry.dead_letter_on_filter_errors {
                        copies.dead_lettered.push((
                            message.clone(),
                            "FilterEvaluationException".to_string(),
                            format!("Rule '{}': {error}", rule.name),
                        ));
                    }
                    continue;
                }
            };
            if !matched {
                continue;
            }
            match &rule.action {
                None => plain_match = true,
                Some(action) => match action.apply(&view) {
                    Ok(changes) => copies.accepted.push(Arc::new((self.codec.rewrite)(
                        message, &changes, &rule.name,
                    ))),
                    Err(error) => {
                        if entry.dead_letter_on_filter_errors {
                            copies.dead_lettered.push((
                                message.clone(),
                                "FilterEvaluationException".to_string(),
                                format!("Action of rule '{}': {error}", rule.name),
                            ));
                        }
                    }
                },
            }
        }
        if plain_match {
            copies.accepted.insert(0, message.clone());
        }
        if entry.requires_session {
            // A session subscription cannot hold session-less messages: dead-letter them.
            let (with_session, without): (Vec<_>, Vec<_>) = copies
                .accepted
                .into_iter()
                .partition(|copy| copy.system.session_id.is_some());
            copies.accepted = with_session;
            copies.dead_lettered.extend(without.into_iter().map(|copy| {
                (
                    copy,
                    SESSION_ID_IS_NULL.to_string(),
                    "The message has no session id and the subscription requires sessions."
                        .to_string(),
                )
            }));
        }
        copies
    }

    async fn publish(
        &mut self,
        messages: Vec<Arc<Message>>,
        sink: &mpsc::UnboundedSender<Notification>,
        replies: &mut mpsc::UnboundedReceiver<Notification>,
    ) -> Result<Reply, EntityError> {
        let now = self.clock.now();
        let messages: Vec<Arc<Message>> = messages
            .into_iter()
            .map(|message| {
                if !message.user_properties.is_empty()
                    || message.application_properties_section.is_empty()
                {
                    return message;
                }
                let mut decoded = Arc::unwrap_or_clone(message);
                decoded.user_properties = (self.codec.decode_properties)(&decoded);
                Arc::new(decoded)
            })
            .collect();
        let messages: Vec<Arc<Message>> = match &mut self.duplicates {
            None => messages,
            Some(detector) => messages
                .into_iter()
                .filter(|message| match &message.system.message_id {
                    Some(id) if detector.check(now, id).is_some() => false,
                    Some(id) => {
                        detector.remember(now, id, SequenceNumber(0));
                        // Committed after the copies are stored: a crash in between lets a
                        // resend through (a duplicate), never a loss.
                        self.log.note(|| Change::Remembered {
                            message_id: id.clone(),
                            sequence_number: SequenceNumber(0),
                            at: now,
                        });
                        true
                    }
                    None => true,
                })
                .collect(),
        };
        let mut outcome: Result<Reply, EntityError> = Ok(Reply::Done);
        let mut waiting = 0usize;
        for (index, entry) in self.subscriptions.iter().enumerate() {
            let mut accepted = Vec::new();
            let mut dead_lettered = Vec::new();
            for message in &messages {
                let copies = self.copies_for(entry, message, now.0);
                accepted.extend(copies.accepted);
                dead_lettered.extend(copies.dead_lettered);
            }
            let reply = ReplyTo {
                sink: sink.clone(),
                request: RequestId(index as u64),
            };
            if !dead_lettered.is_empty() {
                let _ = entry
                    .handle
                    .send(Command::DeadLetterOnArrival {
                        messages: dead_lettered,
                    })
                    .await;
            }
            if accepted.is_empty() {
                continue;
            }
            let command = Command::Send {
                messages: accepted,
                reply: Some(reply),
            };
            if let Err(error) = entry.handle.send(command).await {
                outcome = Err(error);
                continue;
            }
            waiting += 1;
        }
        // Every subscription stores its copies at once (with durable storage their syncs
        // are shared); the sender is answered when all have.
        for _ in 0..waiting {
            match replies.recv().await {
                Some(Notification::Reply {
                    result: Err(error), ..
                }) => outcome = Err(error),
                Some(_) => {}
                None => break,
            }
        }
        outcome
    }

    fn manage_rules(
        &mut self,
        subscription: &str,
        operation: RuleOperation,
    ) -> Result<Reply, EntityError> {
        let path = self.path.clone();
        let now = self.clock.now().0;
        let entry = self
            .subscriptions
            .iter_mut()
            .find(|entry| entry.name.eq_ignore_ascii_case(subscription))
            .ok_or_else(|| EntityError::NotFound(format!("{path}/Subscriptions/{subscription}")))?;
        match operation {
            RuleOperation::Add(rule) => {
                if entry
                    .rules
                    .iter()
                    .any(|existing| existing.name.eq_ignore_ascii_case(&rule.name))
                {
                    return Err(EntityError::AlreadyExists(format!(
                        "The rule '{}' already exists on subscription '{}'.",
                        rule.name, entry.name
                    )));
                }
                if entry.rules.len() >= rules::MAX_RULES_PER_SUBSCRIPTION {
                    return Err(EntityError::LimitExceeded(format!(
                        "Subscription '{}' has {} rules, the most a subscription may have.",
                        entry.name,
                        rules::MAX_RULES_PER_SUBSCRIPTION
                    )));
                }
                let mut rule = *rule;
                rule.created_at = now;
                entry.rules.push(rule);
                Ok(Reply::Done)
            }
            RuleOperation::Remove(name) => {
                let before = entry.rules.len();
                entry
                    .rules
                    .retain(|rule| !rule.name.eq_ignore_ascii_case(&name));
                if entry.rules.len() == before {
                    return Err(EntityError::MessageNotFound(format!(
                        "The rule '{name}' could not be found on subscription '{}'.",
                        entry.name
                    )));
                }
                Ok(Reply::Done)
            }
            RuleOperation::Enumerate { skip, top } => Ok(Reply::Rules(
                entry.rules.iter().skip(skip).take(top).cloned().collect(),
            )),
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
