//! The message log of one entity: the only owner of its records (main, dead-letter and
//! transfer dead-letter sub-queues, with their active, deferred and scheduled messages),
//! its sequence counter, its session states and its forwarding outbox. Every durable change
//! goes through a method here and, when journaling is on, leaves a [`Change`] record;
//! replaying those records with [`MessageLog::apply`] rebuilds the same log (the property
//! test checks it). What is not durable lives beside the log, not in it: locks, receivers
//! and link credit are `EntityState`'s — a restart releases every lock (issue 11).
//!
//! The `available` sets are indexes over the records (what a receiver can take next); the
//! core maintains them, and recovery rebuilds them from the records.

use std::collections::BTreeMap;

use super::Record;
use super::records::RecordMap;
use crate::broker::entity::duplicates::DuplicateDetector;
use crate::broker::rules::RuleDefinition;
use crate::broker::types::{
    MessageState, OutboxTarget, PropertyChanges, SequenceNumber, SubQueue, Timestamp,
};

/// One durable change to an entity's state, in the order the core made it.
#[derive(Debug, Clone)]
pub enum Change {
    /// A record entered a sub-queue (a send, a scheduled message, an arrival dead-lettered,
    /// an activated scheduled message under its new number).
    Put {
        /// Where.
        sub_queue: SubQueue,
        /// The record, message included.
        record: Box<Record>,
    },
    /// The durable fields of a record changed (delivery count bumped, deferred, property
    /// changes merged, activated in place).
    Update {
        /// Where.
        sub_queue: SubQueue,
        /// Which record.
        sequence_number: SequenceNumber,
        /// The new delivery count.
        delivery_count: u32,
        /// The new state.
        state: MessageState,
        /// The enqueued time (an activation restamps it).
        enqueued_time: Timestamp,
        /// The absolute expiry.
        expires_at: Option<Timestamp>,
        /// The application properties this change merged into the record's message (data
        /// written before issue 16's fourth pass lists every change merged so far: merging
        /// them again gives the same properties).
        property_changes: PropertyChanges,
    },
    /// A record moved between sub-queues under the same number (dead-lettered).
    Move {
        /// From.
        from: SubQueue,
        /// To.
        to: SubQueue,
        /// Which record.
        sequence_number: SequenceNumber,
    },
    /// A record left the entity (completed, received and deleted, expired, cancelled,
    /// forwarded, replaced by its activation).
    Remove {
        /// Where.
        sub_queue: SubQueue,
        /// Which record.
        sequence_number: SequenceNumber,
    },
    /// The sequence counter (written by checkpoints; sends imply it).
    NextSequence(i64),
    /// A session's state was set or cleared.
    SessionState {
        /// The session.
        session_id: String,
        /// Its state.
        state: Option<Vec<u8>>,
    },
    /// A message waits in the forwarding outbox until its target has it (rule FWD-1):
    /// already stamped for the target (hop count, source sequence number, properties).
    Outbox {
        /// The outgoing message under the source's sequence number.
        record: Box<Record>,
        /// Where it goes.
        target: OutboxTarget,
    },
    /// The target stored an outbox message: it leaves the source.
    Forwarded {
        /// Its number in the source.
        sequence_number: SequenceNumber,
    },
    /// A rule was added to a topic's subscription at run time.
    RuleAdded {
        /// The subscription's name.
        subscription: String,
        /// The rule.
        rule: Box<RuleDefinition>,
    },
    /// A rule was removed from a topic's subscription at run time.
    RuleRemoved {
        /// The subscription's name.
        subscription: String,
        /// The rule's name.
        name: String,
    },
    /// A subscription's whole rule set, as changed at run time (written by checkpoints).
    RulesSet {
        /// The subscription's name.
        subscription: String,
        /// Its rules, in order.
        rules: Vec<RuleDefinition>,
    },
    /// A message forwarded from another entity's outbox was stored here (in the same record
    /// as its `Put`): the same outbox entry sent again is answered "stored" and not stored
    /// twice (`docs/scale-out.md` §8 item 6).
    Received {
        /// The key of the outbox entry.
        key: ForwardKey,
    },
    /// The source of forwarded messages has committed every outbox entry numbered below
    /// `below` as forwarded: their keys are forgotten.
    ForgetReceived {
        /// The source entity's path.
        source: String,
        /// Keys of `source` numbered below it are dropped.
        below: SequenceNumber,
    },
    /// Duplicate detection remembered a message id.
    Remembered {
        /// The message id.
        message_id: String,
        /// The number it was accepted under.
        sequence_number: SequenceNumber,
        /// When.
        at: Timestamp,
    },
}

/// Names one entry of a forwarding source's outbox: the source's path and the entry's
/// sequence number there, with the time the source stamped the entry (a source deleted and
/// created again numbers from 1 again; its entries carry later times).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ForwardKey {
    /// The source entity's path (registry key: trimmed, lower case).
    pub source: String,
    /// The entry's sequence number in the source.
    pub sequence_number: SequenceNumber,
    /// The entry's enqueued time in the source.
    pub enqueued_time: Timestamp,
}

impl Change {
    /// The broker time this change recorded as "now" (an enqueued time, the time a message
    /// id was remembered), if it records one. Times clients chose (scheduled enqueue time)
    /// and deadlines (expiry) are not: they may lie ahead of the clock.
    pub fn recorded_time(&self) -> Option<Timestamp> {
        match self {
            Change::Put { record, .. } | Change::Outbox { record, .. } => {
                Some(record.enqueued_time())
            }
            Change::Update { enqueued_time, .. } => Some(*enqueued_time),
            Change::Remembered { at, .. } => Some(*at),
            _ => None,
        }
    }
}

pub use super::available::{Available, delivery_order};

/// Messages of one sub-queue.
#[derive(Debug, Default)]
pub(super) struct Store {
    /// Every record of this sub-queue by sequence number.
    pub(super) records: RecordMap,
    /// Active, unlocked records in delivery order (an index the core maintains).
    pub(super) available: Available,
    /// Records in the deferred state (kept with every change, so counts need no scan).
    deferred: usize,
}

impl Store {
    /// Adds or replaces a record.
    fn put(&mut self, sequence_number: SequenceNumber, record: Record) {
        if record.state() == MessageState::Deferred {
            self.deferred += 1;
        }
        debug_assert_eq!(sequence_number, record.sequence_number);
        if let Some(old) = self.records.insert(record)
            && old.state() == MessageState::Deferred
        {
            self.deferred -= 1;
        }
    }

    /// Removes a record.
    fn take(&mut self, sequence_number: SequenceNumber) -> Option<Record> {
        let record = self.records.remove(&sequence_number)?;
        if record.state() == MessageState::Deferred {
            self.deferred -= 1;
        }
        Some(record)
    }

    /// Changes a record in place.
    fn change(
        &mut self,
        sequence_number: SequenceNumber,
        change: impl FnOnce(&mut Record),
    ) -> Option<&Record> {
        let record = self.records.get_mut(&sequence_number)?;
        let was_deferred = record.state() == MessageState::Deferred;
        change(record);
        let is_deferred = record.state() == MessageState::Deferred;
        match (was_deferred, is_deferred) {
            (false, true) => self.deferred += 1,
            (true, false) => self.deferred -= 1,
            _ => {}
        }
        self.records.get(&sequence_number)
    }

    /// Records in the deferred state.
    pub(super) fn deferred(&self) -> usize {
        self.deferred
    }
}

/// Sequence numbers of a partitioned entity carry the partition above this bit.
pub const PARTITION_SHIFT: u32 = 48;
/// The bits of a sequence number counted within a partition.
const LOW_BITS: i64 = (1 << PARTITION_SHIFT) - 1;

/// The durable state of one entity; see the module documentation.
#[derive(Debug)]
pub struct MessageLog {
    main: Store,
    dead_letter: Store,
    transfer_dead_letter: Store,
    /// The next sequence number to assign (rule SEQ-1: from 1, never reused), one counter
    /// per partition (rule PRT-1: a partitioned entity's numbers carry the partition in
    /// their top 16 bits; each partition counts from 1 in the low 48).
    counters: Vec<i64>,
    /// Session states (`set-session-state`), kept even without messages.
    session_states: BTreeMap<String, Vec<u8>>,
    /// Messages on their way to a forwarding target, by source sequence number, with
    /// whether they are dead letters.
    outbox: BTreeMap<SequenceNumber, (Record, OutboxTarget)>,
    /// Outbox entries of other entities stored here, by source path, then source number,
    /// with the source's enqueued time: a re-sent entry is not stored twice. Bounded: a
    /// source's keys below the lowest entry still in its outbox are dropped when its next
    /// forward arrives ([`Change::ForgetReceived`]).
    received: BTreeMap<String, BTreeMap<SequenceNumber, Timestamp>>,
    /// Changes not yet taken by the shell, when journaling is on.
    journal: Option<Vec<Change>>,
}

impl Default for MessageLog {
    fn default() -> MessageLog {
        MessageLog::new(false)
    }
}

impl MessageLog {
    /// An empty log; `journal` turns change records on (durable storage).
    pub fn new(journal: bool) -> MessageLog {
        MessageLog {
            main: Store::default(),
            dead_letter: Store::default(),
            transfer_dead_letter: Store::default(),
            counters: vec![1],
            session_states: BTreeMap::new(),
            outbox: BTreeMap::new(),
            received: BTreeMap::new(),
            journal: journal.then(Vec::new),
        }
    }

    /// Numbers sequence numbers in `partitions` partitions (1: not partitioned). Set before
    /// anything is assigned or replayed.
    pub fn set_partitions(&mut self, partitions: u16) {
        let partitions = i64::from(partitions.max(1));
        self.counters = (0..partitions)
            .map(|partition| (partition << PARTITION_SHIFT) | 1)
            .collect();
    }

    /// How many partitions the numbers are spread over (1: not partitioned).
    pub fn partitions(&self) -> u16 {
        self.counters.len() as u16
    }

    /// The counter a number belongs to.
    fn counter_index(&self, number: i64) -> usize {
        if self.counters.len() == 1 {
            return 0;
        }
        ((number >> PARTITION_SHIFT) as usize).min(self.counters.len() - 1)
    }

    /// Keeps the counter of `number`'s partition past it.
    fn count_past(&mut self, number: i64) {
        let index = self.counter_index(number);
        let counter = &mut self.counters[index];
        *counter = (*counter).max(number + 1);
    }

    /// Whether changes are recorded.
    pub fn journaling(&self) -> bool {
        self.journal.is_some()
    }

    /// Turns change records on or off (recovery replays with them off).
    pub fn set_journaling(&mut self, on: bool) {
        self.journal = on.then(Vec::new);
    }

    /// Changes made since the last call, in order.
    pub fn take_changes(&mut self) -> Vec<Change> {
        match &mut self.journal {
            Some(journal) => std::mem::take(journal),
            None => Vec::new(),
        }
    }

    /// Records a change made outside the records (duplicate detection).
    pub(crate) fn note(&mut self, change: impl FnOnce() -> Change) {
        if let Some(journal) = &mut self.journal {
            journal.push(change());
        }
    }

    pub(super) fn store(&self, sub_queue: SubQueue) -> &Store {
        match sub_queue {
            SubQueue::Main => &self.main,
            SubQueue::DeadLetter => &self.dead_letter,
            SubQueue::TransferDeadLetter => &self.transfer_dead_letter,
        }
    }

    fn store_mut(&mut self, sub_queue: SubQueue) -> &mut Store {
        match sub_queue {
            SubQueue::Main => &mut self.main,
            SubQueue::DeadLetter => &mut self.dead_letter,
            SubQueue::TransferDeadLetter => &mut self.transfer_dead_letter,
        }
    }

    /// The records of a sub-queue.
    pub fn records(&self, sub_queue: SubQueue) -> &RecordMap {
        &self.store(sub_queue).records
    }

    /// One record.
    pub fn get(&self, sub_queue: SubQueue, sequence_number: SequenceNumber) -> Option<&Record> {
        self.store(sub_queue).records.get(&sequence_number)
    }

    /// The available index of a sub-queue, to change.
    pub(super) fn available_mut(&mut self, sub_queue: SubQueue) -> &mut Available {
        &mut self.store_mut(sub_queue).available
    }

    /// Assigns the next sequence number (of partition 0 when partitioned).
    pub(crate) fn allocate(&mut self) -> SequenceNumber {
        self.allocate_in(0)
    }

    /// Assigns the next sequence number of `partition` (rule PRT-1); within a partition the
    /// low 48 bits roll over to 1.
    pub(crate) fn allocate_in(&mut self, partition: u16) -> SequenceNumber {
        let index = (partition as usize).min(self.counters.len() - 1);
        let counter = &mut self.counters[index];
        let sequence_number = SequenceNumber(*counter);
        *counter += 1;
        if *counter & LOW_BITS == 0 {
            *counter = ((index as i64) << PARTITION_SHIFT) | 1;
        }
        sequence_number
    }

    /// Takes `sequence_number`, given by a topic, when no number at or after it has been
    /// assigned here; `None` otherwise (the caller assigns its own).
    pub(crate) fn allocate_given(
        &mut self,
        sequence_number: SequenceNumber,
    ) -> Option<SequenceNumber> {
        let index = self.counter_index(sequence_number.0);
        if sequence_number.0 < self.counters[index] {
            return None;
        }
        self.counters[index] = sequence_number.0 + 1;
        Some(sequence_number)
    }

    /// Raises the counter to at least `next` (a topic starting after its subscriptions),
    /// noting it for the log.
    pub(crate) fn raise_next_sequence_number(&mut self, next: i64) {
        let index = self.counter_index(next);
        if next > self.counters[index] {
            self.counters[index] = next;
            self.note(|| Change::NextSequence(next));
        }
    }

    /// The next number to assign (of partition 0 when partitioned).
    pub fn next_sequence_number(&self) -> i64 {
        self.counters[0]
    }

    /// The next number of every partition.
    pub fn next_sequence_numbers(&self) -> &[i64] {
        &self.counters
    }

    /// Adds a record.
    pub(crate) fn insert(&mut self, sub_queue: SubQueue, record: Record) {
        let sequence_number = record.sequence_number;
        if let Some(journal) = &mut self.journal {
            journal.push(Change::Put {
                sub_queue,
                record: Box::new(record.clone()),
            });
        }
        self.store_mut(sub_queue).put(sequence_number, record);
    }

    /// Removes a record (and its entry in the available index).
    pub(crate) fn remove(
        &mut self,
        sub_queue: SubQueue,
        sequence_number: SequenceNumber,
    ) -> Option<Record> {
        let store = self.store_mut(sub_queue);
        store.available.remove(&sequence_number);
        let record = store.take(sequence_number)?;
        if let Some(journal) = &mut self.journal {
            journal.push(Change::Remove {
                sub_queue,
                sequence_number,
            });
        }
        Some(record)
    }

    /// Changes the durable fields of a record through `change`; records an update.
    pub(super) fn update(
        &mut self,
        sub_queue: SubQueue,
        sequence_number: SequenceNumber,
        change: impl FnOnce(&mut Record),
    ) -> bool {
        self.update_merging(sub_queue, sequence_number, Vec::new(), change)
            .is_some()
    }

    /// [`Self::update`], merging `properties` into the record's message first (in the same
    /// logged change). How many bytes the message's size grew by, if the record is there.
    pub(super) fn update_merging(
        &mut self,
        sub_queue: SubQueue,
        sequence_number: SequenceNumber,
        properties: PropertyChanges,
        change: impl FnOnce(&mut Record),
    ) -> Option<i64> {
        let store = match sub_queue {
            SubQueue::Main => &mut self.main,
            SubQueue::DeadLetter => &mut self.dead_letter,
            SubQueue::TransferDeadLetter => &mut self.transfer_dead_letter,
        };
        let mut grown = 0;
        let record = store.change(sequence_number, |record| {
            grown = record.message.merge_application_properties(&properties);
            change(record);
        })?;
        if let Some(journal) = &mut self.journal {
            journal.push(Change::Update {
                sub_queue,
                sequence_number,
                delivery_count: record.delivery_count(),
                state: record.state(),
                enqueued_time: record.enqueued_time(),
                expires_at: record.expires_at(),
                property_changes: properties,
            });
        }
        Some(grown)
    }

    /// Moves a record to another sub-queue under the same number (it leaves the available
    /// index of its old sub-queue).
    pub(super) fn move_to(
        &mut self,
        from: SubQueue,
        to: SubQueue,
        sequence_number: SequenceNumber,
    ) -> bool {
        let store = self.store_mut(from);
        store.available.remove(&sequence_number);
        let Some(record) = store.take(sequence_number) else {
            return false;
        };
        self.store_mut(to).put(sequence_number, record);
        if let Some(journal) = &mut self.journal {
            journal.push(Change::Move {
                from,
                to,
                sequence_number,
            });
        }
        true
    }

    /// Puts a stamped message into the forwarding outbox.
    pub(super) fn add_to_outbox(&mut self, record: Record, target: OutboxTarget) {
        if let Some(journal) = &mut self.journal {
            journal.push(Change::Outbox {
                record: Box::new(record.clone()),
                target: target.clone(),
            });
        }
        self.outbox.insert(record.sequence_number, (record, target));
    }

    /// Takes a message out of the outbox (its target has it, or it failed).
    pub(super) fn take_from_outbox(
        &mut self,
        sequence_number: SequenceNumber,
    ) -> Option<(Record, OutboxTarget)> {
        let entry = self.outbox.remove(&sequence_number)?;
        if let Some(journal) = &mut self.journal {
            journal.push(Change::Forwarded { sequence_number });
        }
        Some(entry)
    }

    /// The forwarding outbox.
    pub fn outbox(&self) -> &BTreeMap<SequenceNumber, (Record, OutboxTarget)> {
        &self.outbox
    }

    /// Whether the outbox entry `key` was stored here already.
    pub fn was_received(&self, key: &ForwardKey) -> bool {
        self.received
            .get(&key.source)
            .and_then(|keys| keys.get(&key.sequence_number))
            == Some(&key.enqueued_time)
    }

    /// Remembers that the outbox entry `key` is stored here (in the same turn as its put).
    pub(crate) fn note_received(&mut self, key: ForwardKey) {
        self.received
            .entry(key.source.clone())
            .or_default()
            .insert(key.sequence_number, key.enqueued_time);
        if let Some(journal) = &mut self.journal {
            journal.push(Change::Received { key });
        }
    }

    /// Forgets the keys of `source` numbered below `below`: the source committed them as
    /// forwarded and never sends them again. Records a change only when one was dropped.
    pub(crate) fn forget_received(&mut self, source: &str, below: SequenceNumber) {
        if self.drop_received(source, below)
            && let Some(journal) = &mut self.journal
        {
            journal.push(Change::ForgetReceived {
                source: source.to_string(),
                below,
            });
        }
    }

    fn drop_received(&mut self, source: &str, below: SequenceNumber) -> bool {
        let Some(keys) = self.received.get_mut(source) else {
            return false;
        };
        let kept = keys.split_off(&below);
        let dropped = !keys.is_empty();
        if kept.is_empty() {
            self.received.remove(source);
        } else {
            *keys = kept;
        }
        dropped
    }

    /// How many outbox keys of other entities are remembered (tests, diagnostics).
    pub fn received_count(&self) -> usize {
        self.received.values().map(BTreeMap::len).sum()
    }

    /// A session's state.
    pub fn session_state(&self, session_id: &str) -> Option<&Vec<u8>> {
        self.session_states.get(session_id)
    }

    /// Every session with state.
    pub fn session_states(&self) -> &BTreeMap<String, Vec<u8>> {
        &self.session_states
    }

    /// Sets or clears a session's state.
    pub(super) fn set_session_state(&mut self, session_id: &str, state: Option<Vec<u8>>) {
        if let Some(journal) = &mut self.journal {
            journal.push(Change::SessionState {
                session_id: session_id.to_string(),
                state: state.clone(),
            });
        }
        match state {
            Some(state) => {
                self.session_states.insert(session_id.to_string(), state);
            }
            None => {
                self.session_states.remove(session_id);
            }
        }
    }

    /// Replays one change (recovery, and the property test's replica). Indexes are not
    /// touched: recovery rebuilds them from the records. Duplicate-detection changes are
    /// returned to the caller, which owns the detector.
    pub fn apply(&mut self, change: Change) -> Option<Change> {
        match change {
            Change::Put { sub_queue, record } => {
                let sequence_number = record.sequence_number;
                self.count_past(sequence_number.0);
                self.store_mut(sub_queue).put(sequence_number, *record);
            }
            Change::Update {
                sub_queue,
                sequence_number,
                delivery_count,
                state,
                enqueued_time,
                expires_at,
                property_changes,
            } => {
                self.store_mut(sub_queue).change(sequence_number, |record| {
                    record.set_delivery_count(delivery_count);
                    record.set_state(state);
                    record.set_enqueued_time(enqueued_time);
                    record.set_expires_at(expires_at);
                    record
                        .message
                        .merge_application_properties(&property_changes);
                });
            }
            Change::Move {
                from,
                to,
                sequence_number,
            } => {
                if let Some(record) = self.store_mut(from).take(sequence_number) {
                    self.store_mut(to).put(sequence_number, record);
                }
            }
            Change::Remove {
                sub_queue,
                sequence_number,
            } => {
                self.store_mut(sub_queue).take(sequence_number);
            }
            Change::NextSequence(next) => {
                let index = self.counter_index(next);
                self.counters[index] = self.counters[index].max(next);
            }
            Change::SessionState { session_id, state } => match state {
                Some(state) => {
                    self.session_states.insert(session_id, state);
                }
                None => {
                    self.session_states.remove(&session_id);
                }
            },
            Change::Outbox { record, target } => {
                let sequence_number = record.sequence_number;
                self.count_past(sequence_number.0);
                self.outbox.insert(sequence_number, (*record, target));
            }
            Change::Forwarded { sequence_number } => {
                self.outbox.remove(&sequence_number);
            }
            Change::Received { key } => {
                self.received
                    .entry(key.source)
                    .or_default()
                    .insert(key.sequence_number, key.enqueued_time);
            }
            Change::ForgetReceived { source, below } => {
                self.drop_received(&source, below);
            }
            other @ (Change::Remembered { .. }
            | Change::RuleAdded { .. }
            | Change::RuleRemoved { .. }
            | Change::RulesSet { .. }) => return Some(other),
        }
        None
    }

    /// A canonical text of the durable state (records without locks, counter, session
    /// states): equal fingerprints mean equal logs. For tests.
    pub fn fingerprint(&self) -> String {
        let mut text = format!("next {:?}\n", self.counters);
        for sub_queue in [
            SubQueue::Main,
            SubQueue::DeadLetter,
            SubQueue::TransferDeadLetter,
        ] {
            for record in self.store(sub_queue).records.values() {
                text.push_str(&format!("{sub_queue:?} {record:?}\n"));
            }
        }
        text.push_str(&format!("{:?}\n", self.session_states));
        for (record, dead_letter) in self.outbox.values() {
            text.push_str(&format!("outbox {dead_letter:?} {record:?}\n"));
        }
        text.push_str(&format!("received {:?}\n", self.received));
        text
    }

    /// Replays recovered change records into this (empty) log, and the duplicate-detection
    /// history they carry into `duplicates` (entities and topics recover the same way);
    /// changes that are not the log's (a topic's rules) go to `other`.
    pub fn replay(
        &mut self,
        changes: impl IntoIterator<Item = Change>,
        mut duplicates: Option<&mut DuplicateDetector>,
        mut other: impl FnMut(Change),
    ) {
        for change in changes {
            match self.apply(change) {
                Some(Change::Remembered {
                    message_id,
                    sequence_number,
                    at,
                }) => {
                    if let Some(detector) = duplicates.as_deref_mut() {
                        detector.remember(at, &message_id, sequence_number);
                    }
                }
                Some(change) => other(change),
                None => {}
            }
        }
    }

    /// [`Self::checkpoint`] followed by the duplicate-detection history, oldest first.
    pub fn checkpoint_with(&self, duplicates: Option<&DuplicateDetector>) -> Vec<Change> {
        let mut changes = self.checkpoint();
        if let Some(detector) = duplicates {
            changes.extend(detector.entries().map(|(id, at, sequence_number)| {
                Change::Remembered {
                    message_id: id.to_string(),
                    sequence_number,
                    at,
                }
            }));
        }
        changes
    }

    /// The whole durable state as change records: what a checkpoint writes so that older
    /// log segments can be dropped. Replaying it into an empty log rebuilds this one.
    pub fn checkpoint(&self) -> Vec<Change> {
        let mut changes: Vec<Change> = self
            .counters
            .iter()
            .map(|next| Change::NextSequence(*next))
            .collect();
        for sub_queue in [
            SubQueue::Main,
            SubQueue::DeadLetter,
            SubQueue::TransferDeadLetter,
        ] {
            for record in self.store(sub_queue).records.values() {
                changes.push(Change::Put {
                    sub_queue,
                    record: Box::new(record.clone()),
                });
            }
        }
        for (session_id, state) in &self.session_states {
            changes.push(Change::SessionState {
                session_id: session_id.clone(),
                state: Some(state.clone()),
            });
        }
        for (record, target) in self.outbox.values() {
            changes.push(Change::Outbox {
                record: Box::new(record.clone()),
                target: target.clone(),
            });
        }
        for (source, keys) in &self.received {
            for (sequence_number, enqueued_time) in keys {
                changes.push(Change::Received {
                    key: ForwardKey {
                        source: source.clone(),
                        sequence_number: *sequence_number,
                        enqueued_time: *enqueued_time,
                    },
                });
            }
        }
        changes
    }
}
