//! The pure core of a topic (issue 11: topics get one like entities): duplicate detection,
//! the rules that decide how many copies each subscription gets, scheduled messages and the
//! topic's sequence counter, rule management. Every operation takes `now`; nothing here
//! awaits, reads a clock or does I/O — the task in [`super::topic`] sends the copies to the
//! subscriptions, arms the timer and makes the changes durable.
//!
//! Durable state goes through a [`MessageLog`] like an entity's: scheduled messages (put
//! when scheduled, removed when cancelled or once published), the counter and the
//! duplicate-detection history, the keys of outbox entries forwarded here from other
//! entities, so the same recovery and checkpoints apply.

use std::collections::{BTreeMap, BTreeSet};

use super::entity::Reply;
use super::entity::duplicates::DuplicateDetector;
use super::entity::state::{Change, ForwardKey, MessageLog, Record, SESSION_ID_IS_NULL};
use super::filter::{FilterEvaluationError, Fuel};
use super::message::Message;
use super::rules::{self, FilterView, Rule, RuleDefinition};
use super::topic::{RuleOperation, TopicCodec};
use super::types::{EntityError, MessageState, SequenceNumber, SubQueue, Timestamp};

/// An edit of a subscription's rule list, replayed at recovery.
type RuleEdit = Box<dyn FnOnce(&mut Vec<Rule>)>;

/// What the core knows of one subscription: its rules and how it takes copies.
#[derive(Clone)]
pub struct SubscriptionRules {
    /// Subscription name.
    pub name: String,
    /// Its rules, in creation order.
    pub rules: Vec<Rule>,
    /// Dead-letter messages whose filter evaluation fails, instead of skipping them.
    pub dead_letter_on_filter_errors: bool,
    /// Messages must carry a session id.
    pub requires_session: bool,
}

/// The copies one subscription gets of a publish.
#[derive(Default)]
pub struct Copies {
    /// Messages to enqueue.
    pub accepted: Vec<Message>,
    /// The topic's sequence number and enqueued time of each accepted message, in order
    /// (rule SEQ-1), carried beside it (see [`crate::broker::entity::BatchedSend`]).
    pub numbers: Vec<(SequenceNumber, Timestamp)>,
    /// Messages to dead-letter on arrival, with reason and description.
    pub dead_lettered: Vec<(Message, String, String)>,
}

/// The state of one topic.
pub struct TopicState {
    /// Configured path.
    path: String,
    /// Subscriptions in configuration order; shared with an evaluation running on another
    /// thread ([`Self::evaluation`]), copied on write.
    subscriptions: std::sync::Arc<Vec<SubscriptionRules>>,
    /// Topic-level duplicate detection, when enabled.
    duplicates: Option<DuplicateDetector>,
    /// Decodes properties and applies rule actions (the AMQP adapter's functions).
    codec: TopicCodec,
    /// Scheduled messages, the sequence counter, duplicate ids: what is durable.
    log: MessageLog,
    /// Scheduled messages by (due time, sequence number): the timer's index over `log`.
    scheduled: BTreeMap<(Timestamp, SequenceNumber), Message>,
    /// Subscriptions (lower case) whose rules were changed at run time: their rule sets
    /// are durable and win over the configuration file's at the next start.
    changed_rules: BTreeSet<String>,
    /// The duplicate-detection window in force (`None`: off).
    duplicate_window: Option<std::time::Duration>,
    /// Picks published messages' partitions (rule PRT-2).
    partitioner: crate::broker::partitions::Partitioner,
    /// Scratch of [`Self::publish_into`]: where each subscription's dead letters of the
    /// message at hand begin.
    dead_letter_marks: Vec<usize>,
}

impl TopicState {
    /// A topic with no scheduled messages and an empty history.
    pub fn new(
        path: String,
        subscriptions: Vec<SubscriptionRules>,
        duplicates: Option<DuplicateDetector>,
        codec: TopicCodec,
    ) -> TopicState {
        TopicState {
            path,
            subscriptions: std::sync::Arc::new(subscriptions),
            duplicates,
            codec,
            log: MessageLog::new(false),
            scheduled: BTreeMap::new(),
            changed_rules: BTreeSet::new(),
            duplicate_window: None,
            partitioner: crate::broker::partitions::Partitioner::new(1, false),
            dead_letter_marks: Vec::new(),
        }
    }

    /// Spreads the topic's messages over `partitions` (rule PRT-1); set before anything is
    /// numbered or restored.
    pub fn set_partitions(&mut self, partitions: u16, by_message_id: bool) {
        self.log.set_partitions(partitions);
        self.partitioner = crate::broker::partitions::Partitioner::new(partitions, by_message_id);
    }

    /// Replays recovered change records (scheduled messages, counter, duplicate history,
    /// forwarded entries' keys).
    pub fn restore(&mut self, now: Timestamp, changes: Vec<Change>) {
        let mut rule_changes = Vec::new();
        self.log
            .replay(changes, self.duplicates.as_mut(), |change| {
                rule_changes.push(change)
            });
        for change in rule_changes {
            self.apply_rule_change(change);
        }
        for record in self.log.records(SubQueue::Main).values() {
            let at = record
                .message
                .extras()
                .scheduled_enqueue_time
                .unwrap_or(now);
            self.scheduled
                .insert((at, record.sequence_number), record.message.clone());
        }
    }

    /// Turns change records on (durable storage).
    pub fn set_journaling(&mut self, on: bool) {
        self.log.set_journaling(on);
    }

    /// Durable changes made since the last call.
    pub fn take_changes(&mut self) -> Vec<Change> {
        self.log.take_changes()
    }

    /// The whole durable state, for a compaction checkpoint: scheduled messages, counter,
    /// forwarded entries' keys, duplicate history, and the rule sets changed at run time.
    pub fn checkpoint(&self) -> Vec<Change> {
        let mut changes = self.log.checkpoint_with(self.duplicates.as_ref());
        for entry in self.subscriptions.iter() {
            if self
                .changed_rules
                .contains(&entry.name.to_ascii_lowercase())
            {
                changes.push(Change::RulesSet {
                    subscription: entry.name.clone(),
                    rules: entry.rules.iter().map(RuleDefinition::of).collect(),
                });
            }
        }
        changes
    }

    /// Replays a recovered rule change onto the configured rules (run-time changes win).
    /// A rule that no longer compiles, or a subscription no longer configured, is skipped
    /// with a warning rather than refusing to start.
    fn apply_rule_change(&mut self, change: Change) {
        let (subscription, apply): (String, RuleEdit) = match change {
            Change::RuleAdded { subscription, rule } => match rule.compile() {
                Ok(rule) => (
                    subscription,
                    Box::new(move |rules: &mut Vec<Rule>| {
                        rules.retain(|existing| !existing.name.eq_ignore_ascii_case(&rule.name));
                        rules.push(rule);
                    }),
                ),
                Err(error) => {
                    tracing::warn!(topic = %self.path, %subscription, %error, "a stored rule does not compile; skipped");
                    return;
                }
            },
            Change::RuleRemoved { subscription, name } => (
                subscription,
                Box::new(move |rules: &mut Vec<Rule>| {
                    rules.retain(|existing| !existing.name.eq_ignore_ascii_case(&name));
                }),
            ),
            Change::RulesSet {
                subscription,
                rules,
            } => {
                let compiled: Vec<Rule> = rules
                    .iter()
                    .filter_map(|definition| match definition.compile() {
                        Ok(rule) => Some(rule),
                        Err(error) => {
                            tracing::warn!(topic = %self.path, %subscription, %error, "a stored rule does not compile; skipped");
                            None
                        }
                    })
                    .collect();
                (
                    subscription,
                    Box::new(move |rules: &mut Vec<Rule>| *rules = compiled),
                )
            }
            _ => return,
        };
        let Some(entry) = std::sync::Arc::make_mut(&mut self.subscriptions)
            .iter_mut()
            .find(|entry| entry.name.eq_ignore_ascii_case(&subscription))
        else {
            tracing::warn!(topic = %self.path, %subscription, "stored rules of a subscription the configuration no longer has are ignored");
            return;
        };
        apply(&mut entry.rules);
        self.changed_rules.insert(subscription.to_ascii_lowercase());
    }

    /// Adds a subscription created at run time, at the end of the subscription order. Its
    /// initial rule set is recorded (journaled) so that a restart replays later rule changes
    /// over these rules, not over those of an earlier subscription of the same name.
    pub fn add_subscription(&mut self, subscription: SubscriptionRules) {
        let name = subscription.name.clone();
        let rules: Vec<RuleDefinition> =
            subscription.rules.iter().map(RuleDefinition::of).collect();
        self.log.note(|| Change::RulesSet {
            subscription: name.clone(),
            rules,
        });
        self.changed_rules.insert(name.to_ascii_lowercase());
        std::sync::Arc::make_mut(&mut self.subscriptions).push(subscription);
    }

    /// Removes a subscription; returns its index in the subscription order (the shell
    /// drops the actor handle at the same index), or `None` when there is none by that name.
    pub fn remove_subscription(&mut self, name: &str) -> Option<usize> {
        let index = self
            .subscriptions
            .iter()
            .position(|entry| entry.name.eq_ignore_ascii_case(name))?;
        std::sync::Arc::make_mut(&mut self.subscriptions).remove(index);
        self.changed_rules.remove(&name.to_ascii_lowercase());
        Some(index)
    }

    /// Replaces the topic-wide duplicate detection (run-time update); history is kept when
    /// only the window is unchanged.
    pub fn set_duplicate_detection(&mut self, window: Option<std::time::Duration>) {
        match window {
            None => self.duplicates = None,
            Some(window) => {
                if self.duplicates.is_none() || self.duplicate_window != Some(window) {
                    self.duplicates = Some(DuplicateDetector::new(window));
                }
            }
        }
        self.duplicate_window = window;
    }

    /// Number of scheduled messages waiting on the topic.
    pub fn scheduled_count(&self) -> usize {
        self.scheduled.len()
    }

    /// The durable state (tests).
    pub fn log(&self) -> &MessageLog {
        &self.log
    }

    /// Number of subscriptions (the copies of [`Self::publish`] come one per subscription).
    pub fn subscription_count(&self) -> usize {
        self.subscriptions.len()
    }

    /// When the next scheduled message is due.
    pub fn next_activation(&self) -> Option<Timestamp> {
        self.scheduled.keys().next().map(|(at, _)| *at)
    }

    /// Whether messages are scheduled (they keep the topic alive, rule IDL-2).
    pub fn has_scheduled(&self) -> bool {
        !self.scheduled.is_empty()
    }

    /// Offers messages to every subscription (rules DLQ-5, FLT-*): drops duplicates (rule
    /// DUP-1, remembered as a change) and returns the copies for each subscription, in
    /// subscription order. Evaluation is bounded per subscription only (see
    /// [`Self::publish_into`]).
    pub fn publish(&mut self, now: Timestamp, messages: Vec<Message>) -> Vec<Copies> {
        let mut all_copies: Vec<Copies> = (0..self.subscriptions.len())
            .map(|_| Copies::default())
            .collect();
        // Without an inline bound no message is handed back.
        let _ = self.publish_into(now, &mut messages.into_iter(), &mut all_copies, None);
        all_copies
    }

    /// [`Self::publish`], appending each subscription's copies to `all_copies` (one entry
    /// per subscription, in order): a batch of publishes reuses the lists (issue 16: four
    /// allocations a message).
    ///
    /// Each subscription's rules may take the topic's evaluation budget in steps on each
    /// message (see [`Fuel`]); past it the message is dead-lettered from that subscription
    /// as a failed filter is, naming the rule. With `inline`, a message whose rules would
    /// take more than that many steps over all subscriptions is handed back untouched
    /// (nothing of it applied, the messages after it left in `messages`), for the caller to
    /// publish where a long evaluation stalls nobody else.
    pub fn publish_into(
        &mut self,
        now: Timestamp,
        messages: &mut impl Iterator<Item = Message>,
        all_copies: &mut [Copies],
        inline: Option<u64>,
    ) -> Result<(), HeavyMessage> {
        // One pass (issue 16: three, each collecting a new list): properties decoded for
        // the filters, duplicates dropped, the rest evaluated, numbered and offered.
        for message in messages {
            let Some(message) = self.admit(now, message) else {
                continue;
            };
            // Every subscription's rules first: a message handed back leaves no trace.
            self.dead_letter_marks.clear();
            let evaluated = evaluate_into(
                &self.codec,
                &self.subscriptions,
                &FilterView::new(&message, now.0),
                all_copies,
                &mut self.dead_letter_marks,
                inline,
            );
            if evaluated.is_err() {
                return Err(HeavyMessage(message));
            }
            self.number(now, &message, all_copies);
        }
        // The counter is not written per publish (that would be a write and sync more per
        // send): the copies' records carry their numbers, and at start the topic numbers
        // past its subscriptions (`raise_sequence_number`). A number no copy kept was seen
        // by no one, so giving it again after a restart is invisible.
        Ok(())
    }

    /// What evaluating a message's rules needs, to run away from the topic's task (see
    /// [`Evaluation::run`]); the rules are shared, not copied.
    pub fn evaluation(&self) -> Evaluation {
        Evaluation {
            codec: self.codec.clone(),
            subscriptions: self.subscriptions.clone(),
        }
    }

    /// Publishes a message handed back by [`Self::publish_into`] whose rules were evaluated
    /// by [`Evaluation::run`] (`evaluated`: each subscription's copies of it), appending to
    /// `all_copies` as [`Self::publish_into`] does.
    pub fn publish_evaluated(
        &mut self,
        now: Timestamp,
        message: &Message,
        evaluated: Vec<Copies>,
        all_copies: &mut [Copies],
    ) {
        self.dead_letter_marks.clear();
        for (copies, mut these) in all_copies.iter_mut().zip(evaluated) {
            self.dead_letter_marks.push(copies.dead_lettered.len());
            copies.accepted.append(&mut these.accepted);
            copies.dead_lettered.append(&mut these.dead_lettered);
        }
        self.number(now, message, all_copies);
    }

    /// Decodes a message's properties for the filters; `None` for a duplicate (rule DUP-1).
    fn admit(&mut self, now: Timestamp, mut message: Message) -> Option<Message> {
        if message.extras().user_properties.is_empty()
            && !message.application_properties_section().is_empty()
        {
            let user_properties = (self.codec.decode_properties)(&message);
            message.edit_extras(|extras| extras.user_properties = user_properties);
        }
        if let Some(detector) = &mut self.duplicates
            && let Some(id) = message.system().message_id()
            && detector.check(now, id).is_some()
        {
            return None;
        }
        Some(message)
    }

    /// After its rules: remembers the message's id (rule DUP-1) and numbers its copies,
    /// those past each subscription's `dead_letter_marks` included.
    fn number(&mut self, now: Timestamp, message: &Message, all_copies: &mut [Copies]) {
        if let Some(detector) = &mut self.duplicates
            && let Some(id) = message.system().message_id()
        {
            detector.remember(now, id, SequenceNumber(0));
            // Written in the publish's record, with the copies (see the shell).
            self.log.note(|| Change::Remembered {
                message_id: id.to_string(),
                sequence_number: SequenceNumber(0),
                at: now,
            });
        }
        // Sequence numbers are the topic's (rule SEQ-1): each message takes the next one,
        // and every subscription's copy carries it with the topic's enqueued time.
        let partition = self.partitioner.partition(message);
        let number = self.log.allocate_in(partition);
        let subscriptions = self.subscriptions.iter().zip(all_copies.iter_mut());
        for ((entry, copies), first_dead) in subscriptions.zip(&self.dead_letter_marks) {
            let first = copies.numbers.len();
            // The first copy takes the message's number. More copies of one message in one
            // subscription (several rules with actions matched) are each a message of its
            // own, with a number of its own from the topic.
            for position in first..copies.accepted.len() {
                let given = if position == first {
                    number
                } else {
                    let partition = crate::broker::partitions::partition_of_number(number.0);
                    self.log.allocate_in(partition)
                };
                copies.numbers.push((given, now));
            }
            // Dead letters (a filter or an action failed) carry the message's number in
            // their rare fields: a rare path, not worth a list of its own.
            for (copy, _, _) in &mut copies.dead_lettered[*first_dead..] {
                copy.edit_extras(|extras| extras.topic_sequence = Some((number, now)));
            }
            if entry.requires_session {
                dead_letter_session_less(copies, first);
            }
        }
    }

    /// Raises the topic's sequence counter past what its subscriptions have already
    /// numbered (start-up: a crash may have lost the topic's own record of it).
    pub fn raise_sequence_number(&mut self, next: i64) {
        self.log.raise_next_sequence_number(next);
    }

    /// Schedules messages on the topic (rules SCH-1, SCH-2): each gets the topic's next
    /// sequence number and waits in the log until its time.
    pub fn schedule(&mut self, now: Timestamp, messages: Vec<Message>) -> Vec<SequenceNumber> {
        messages
            .into_iter()
            .map(|message| {
                let partition = self.partitioner.partition(&message);
                let sequence_number = self.log.allocate_in(partition);
                let at = message.extras().scheduled_enqueue_time.unwrap_or(now);
                self.log.insert(SubQueue::Main, {
                    let mut record = Record::new(
                        message.clone(),
                        sequence_number,
                        now,
                        message.header().time_to_live,
                    );
                    record.set_state(MessageState::Scheduled);
                    record
                });
                self.scheduled.insert((at, sequence_number), message);
                sequence_number
            })
            .collect()
    }

    /// Cancels scheduled messages (rule SCH-4); unknown numbers are ignored.
    pub fn cancel(&mut self, sequence_numbers: &[SequenceNumber]) {
        self.scheduled
            .retain(|(_, number), _| !sequence_numbers.contains(number));
        for number in sequence_numbers {
            self.log.remove(SubQueue::Main, *number);
        }
    }

    /// The next scheduled message due at `now` (rule SCH-3), taken off the timer. It stays
    /// in the log until [`Self::published`].
    pub fn take_due(&mut self, now: Timestamp) -> Option<(SequenceNumber, Message)> {
        let entry = self.scheduled.first_entry()?;
        if entry.key().0 > now {
            return None;
        }
        let ((_, sequence_number), message) = entry.remove_entry();
        Some((sequence_number, message))
    }

    /// Before a message forwarded from another entity's outbox entry `key` is published
    /// (`docs/scale-out.md` §8 item 6, as [`super::entity::state::EntityState::forwarded_already`]
    /// for a queue): forgets the keys of that source numbered below `floor` (it committed
    /// every lower entry as forwarded), then says whether `key` was published here already
    /// (a re-send after a crash between this topic's publish and the source's record of
    /// it), which the caller answers "stored" without publishing it again.
    pub fn forwarded_already(&mut self, key: &ForwardKey, floor: SequenceNumber) -> bool {
        self.log.forget_received(&key.source, floor);
        self.log.was_received(key)
    }

    /// The message of the outbox entry `key` was published (or dropped as a duplicate by
    /// message id) in this turn: its key goes among the topic's changes, so into the
    /// publish's one record with the subscriptions' copies.
    pub fn received_forwarded(&mut self, key: ForwardKey) {
        self.log.note_received(key);
    }

    /// Every subscription has stored its copies of a scheduled message: it leaves the log.
    pub fn published(&mut self, sequence_number: SequenceNumber) {
        self.log.remove(SubQueue::Main, sequence_number);
    }

    /// Adds, removes or lists a subscription's rules.
    pub fn manage_rules(
        &mut self,
        now: Timestamp,
        subscription: &str,
        operation: RuleOperation,
    ) -> Result<Reply, EntityError> {
        let path = self.path.clone();
        let now = now.0;
        let entry = std::sync::Arc::make_mut(&mut self.subscriptions)
            .iter_mut()
            .find(|entry| entry.name.eq_ignore_ascii_case(subscription))
            .ok_or_else(|| EntityError::NotFound(format!("{path}/Subscriptions/{subscription}")))?;
        match operation {
            RuleOperation::Add(rule) => {
                // One set of checks for every way in ($management, the admin API).
                crate::config::names::check_rule_name(&rule.name).map_err(EntityError::Argument)?;
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
                let definition = RuleDefinition::of(&rule);
                let subscription = entry.name.clone();
                entry.rules.push(rule);
                self.log.note(|| Change::RuleAdded {
                    subscription: subscription.clone(),
                    rule: Box::new(definition),
                });
                self.changed_rules.insert(subscription.to_ascii_lowercase());
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
                let subscription = entry.name.clone();
                self.log.note(|| Change::RuleRemoved {
                    subscription: subscription.clone(),
                    name: name.clone(),
                });
                self.changed_rules.insert(subscription.to_ascii_lowercase());
                Ok(Reply::Done)
            }
            RuleOperation::Enumerate { skip, top } => Ok(Reply::Rules(
                entry.rules.iter().skip(skip).take(top).cloned().collect(),
            )),
        }
    }
}

/// Each subscription's copies of one message (see [`copies_into`]), appended to
/// `all_copies`, with where each subscription's dead letters of it begin in `marks`. With
/// `inline`, rules that would take more than that many steps over all subscriptions leave
/// nothing behind and are an `Err`.
fn evaluate_into(
    codec: &TopicCodec,
    subscriptions: &[SubscriptionRules],
    view: &FilterView<'_>,
    all_copies: &mut [Copies],
    marks: &mut Vec<usize>,
    inline: Option<u64>,
) -> Result<(), ()> {
    let budget = codec.evaluation_budget;
    let mut inline_left = inline;
    for (entry, copies) in subscriptions.iter().zip(all_copies.iter_mut()) {
        marks.push(copies.dead_lettered.len());
        let (limit, bound) = match inline_left {
            Some(left) if left < budget => (left, Bound::Inline),
            _ => (budget, Bound::Subscription),
        };
        let mut fuel = Fuel::new(limit);
        if copies_into(codec, entry, view, copies, &mut fuel, bound).is_err() {
            // Accepted copies are numbered per message, so those without a number are
            // this message's.
            for (copies, mark) in all_copies.iter_mut().zip(marks.iter()) {
                copies.accepted.truncate(copies.numbers.len());
                copies.dead_lettered.truncate(*mark);
            }
            return Err(());
        }
        if let Some(left) = &mut inline_left {
            *left = left.saturating_sub(fuel.used());
        }
    }
    Ok(())
}

/// A topic's rules, shared, to evaluate a message away from the topic's task.
pub struct Evaluation {
    codec: TopicCodec,
    subscriptions: std::sync::Arc<Vec<SubscriptionRules>>,
}

impl Evaluation {
    /// Each subscription's copies of `message` as published at `now`, each subscription
    /// within the evaluation budget: pure, for [`TopicState::publish_evaluated`].
    pub fn run(&self, now: Timestamp, message: &Message) -> Vec<Copies> {
        let mut copies: Vec<Copies> = (0..self.subscriptions.len())
            .map(|_| Copies::default())
            .collect();
        let mut marks = Vec::with_capacity(copies.len());
        let view = FilterView::new(message, now.0);
        // Without an inline bound there is nothing to hand back.
        let _ = evaluate_into(
            &self.codec,
            &self.subscriptions,
            &view,
            &mut copies,
            &mut marks,
            None,
        );
        copies
    }
}

/// Which bound a subscription's fuel is: its own budget, or what is left of the inline
/// bound of the message's whole evaluation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Bound {
    Subscription,
    Inline,
}

/// A message whose rules need more evaluation than may run where the topic's core runs,
/// handed back by [`TopicState::publish_into`] with nothing of it applied.
#[derive(Debug)]
pub struct HeavyMessage(pub Message);

/// Appends to `copies` the copies one subscription gets of one message: one per matching
/// rule with an action, one for any plain match (first); filter and action errors
/// dead-letter when the subscription says so; session-less copies for a session
/// subscription dead-letter. Rules that exhaust the subscription's budget leave the message
/// one dead letter naming the rule and no copy; exhausting the inline bound is an `Err`.
fn copies_into(
    codec: &TopicCodec,
    entry: &SubscriptionRules,
    view: &FilterView<'_>,
    copies: &mut Copies,
    fuel: &mut Fuel,
    bound: Bound,
) -> Result<(), ()> {
    let message = view.message;
    let first = copies.accepted.len();
    let mut plain_match = false;
    for rule in &entry.rules {
        let changes = match rule.filter.evaluate_within(view, fuel) {
            Ok(false) => continue,
            Ok(true) => match &rule.action {
                None => {
                    plain_match = true;
                    continue;
                }
                Some(action) => action
                    .apply_within(view, fuel)
                    .map_err(|error| ("Action of rule", error)),
            },
            Err(error) => Err(("Rule", error)),
        };
        match changes {
            Ok(changes) => copies
                .accepted
                .push((codec.rewrite)(message, &changes, &rule.name)),
            Err((_, FilterEvaluationError::BudgetExceeded { .. })) if bound == Bound::Inline => {
                return Err(());
            }
            Err((part, error @ FilterEvaluationError::BudgetExceeded { .. })) => {
                // No partial delivery: the message leaves this subscription as one dead
                // letter naming the rule that ran out.
                copies.accepted.truncate(first);
                let description = format!("{part} '{}': {error}", rule.name);
                filter_error(entry, copies, message, description);
                return Ok(());
            }
            Err((part, error)) => {
                let description = format!("{part} '{}': {error}", rule.name);
                filter_error(entry, copies, message, description);
            }
        }
    }
    if plain_match {
        copies.accepted.insert(first, message.clone());
    }
    Ok(())
}

/// A rule's filter or action failed on `message`: a dead letter when the subscription says
/// so (rule DLQ-3), else nothing.
fn filter_error(
    entry: &SubscriptionRules,
    copies: &mut Copies,
    message: &Message,
    description: String,
) {
    if entry.dead_letter_on_filter_errors {
        copies.dead_lettered.push((
            message.clone(),
            crate::broker::entity::state::FILTER_EVALUATION_EXCEPTION.to_string(),
            description,
        ));
    }
}

/// A session subscription cannot hold session-less messages: the copies from `first` on
/// that have no session id move to its dead letters, with their numbers.
fn dead_letter_session_less(copies: &mut Copies, first: usize) {
    if copies.accepted[first..]
        .iter()
        .all(|copy| copy.system().session_id().is_some())
    {
        return;
    }
    let these: Vec<Message> = copies.accepted.drain(first..).collect();
    let numbers: Vec<_> = copies.numbers.drain(first..).collect();
    for (mut copy, number) in these.into_iter().zip(numbers) {
        if copy.system().session_id().is_some() {
            copies.accepted.push(copy);
            copies.numbers.push(number);
        } else {
            copy.edit_extras(|extras| extras.topic_sequence = Some(number));
            copies.dead_lettered.push((
                copy,
                SESSION_ID_IS_NULL.to_string(),
                "The message has no session id and the subscription requires sessions.".to_string(),
            ));
        }
    }
}

#[cfg(test)]
#[path = "topic_state_tests.rs"]
mod tests;
