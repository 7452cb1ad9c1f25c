//! A topic: it holds no messages (rule DLQ-5); each message sent to it is offered to every
//! subscription, whose rules decide how many copies it gets (see [`super::rules`]). The
//! message bytes are shared (`Arc`), not copied, unless a rule action changes them.
//!
//! The topic task also owns its subscriptions' rules (filters are evaluated here, before a
//! copy exists), answers rule management, detects duplicates for the topic, and deletes
//! itself when idle. It awaits its subscriptions' replies (await order: topic →
//! subscription, never the reverse) and answers the sender once every copy is stored.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;

use super::entity::actor::IdleSender;
use super::entity::duplicates::DuplicateDetector;
use super::entity::{Command, EntityHandle, Notification, Reply, ReplyTo, RequestId};
use super::filter::PropertyChange;
use super::message::Message;
use super::rules::{self, FilterView, Rule};
use super::types::{EntityError, SequenceNumber, Timestamp};
use crate::clock::Clock;
use crate::config::TopicConfig;

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
    /// Next topic-level sequence number for scheduled messages.
    next_sequence_number: i64,
    /// Scheduled messages by (due time, sequence number).
    scheduled: BTreeMap<(Timestamp, SequenceNumber), Arc<Message>>,
}

/// Starts a topic's task.
pub fn spawn(
    config: &TopicConfig,
    subscriptions: Vec<SubscriptionEntry>,
    clock: Clock,
    on_idle: IdleSender,
    codec: TopicCodec,
    lifecycle: &crate::broker::lifecycle::Lifecycle,
) -> TopicHandle {
    let (commands, inbox) = mpsc::channel::<TopicCommand>(1024);
    let handle = TopicHandle {
        path: config.name.as_str().into(),
        commands,
    };
    let topic = Topic {
        path: config.name.clone(),
        subscriptions,
        duplicates: config
            .requires_duplicate_detection
            .then(|| DuplicateDetector::new(config.duplicate_detection_history_time_window)),
        auto_delete_on_idle: config.auto_delete_on_idle,
        clock,
        codec,
        next_sequence_number: 1,
        scheduled: BTreeMap::new(),
    };
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
    async fn run(
        mut self,
        mut inbox: mpsc::Receiver<TopicCommand>,
        on_idle: IdleSender,
        mut stopping: tokio::sync::watch::Receiver<bool>,
    ) {
        let (sink, mut replies) = mpsc::unbounded_channel();
        let mut last_activity = tokio::time::Instant::now();
        loop {
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
                    break;
                }
            };
            let Some(command) = command else { break };
            last_activity = tokio::time::Instant::now();
            match command {
                TopicCommand::Publish { messages, reply } => {
                    let outcome = self.publish(messages, &sink, &mut replies).await;
                    if let Some(reply) = reply {
                        reply.send(outcome);
                    }
                }
                TopicCommand::Schedule { messages, reply } => {
                    let now = self.clock.now();
                    let numbers = messages
                        .into_iter()
                        .map(|message| {
                            let sequence_number = SequenceNumber(self.next_sequence_number);
                            self.next_sequence_number += 1;
                            let at = message.scheduled_enqueue_time.unwrap_or(now);
                            self.scheduled.insert((at, sequence_number), message);
                            sequence_number
                        })
                        .collect();
                    reply.send(Ok(Reply::SequenceNumbers(numbers)));
                    self.activate_due(&sink, &mut replies).await;
                }
                TopicCommand::CancelScheduled {
                    sequence_numbers,
                    reply,
                } => {
                    self.scheduled
                        .retain(|(_, number), _| !sequence_numbers.contains(number));
                    reply.send(Ok(Reply::Done));
                }
                TopicCommand::Rules {
                    subscription,
                    operation,
                    reply,
                } => reply.send(self.manage_rules(&subscription, operation)),
            }
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
            let message = entry.remove();
            if let Err(error) = self.publish(vec![message], sink, replies).await {
                tracing::warn!(topic = %self.path, %error, "a scheduled message could not be published");
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
                        true
                    }
                    None => true,
                })
                .collect(),
        };
        let mut outcome: Result<Reply, EntityError> = Ok(Reply::Done);
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
            if let Some(Notification::Reply {
                result: Err(error), ..
            }) = replies.recv().await
            {
                outcome = Err(error);
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
