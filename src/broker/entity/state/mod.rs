//! The pure core of a queue or subscription: its message log and every rule that changes it.
//!
//! Owns sequence numbers, enqueued times, locks, delivery counts, TTL expiry, scheduled
//! activation, the dead-letter sub-queue and credit-based dispatch to receivers. Every
//! operation takes `now` (wall-clock milliseconds) as an argument and first advances the
//! state to it, so deadlines are honoured even when the shell's timer fires late. It never
//! reads a clock, awaits, or performs I/O: deliveries and other consequences are queued as
//! [`Effect`]s that the actor shell drains with [`EntityState::take_effects`].
//!
//! Invariants: a sequence number is assigned once and never reused; a record is in exactly
//! one store (main or dead-letter); `available` holds exactly the active, unlocked records
//! of its store; a lock token maps to exactly one locked record.

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

mod available;
mod browse;
mod counts;
mod dead_letters;
mod dispatch;
mod enqueue;
mod expiry;
mod locks;
pub mod log;
pub mod packed;
mod records;
mod recovery;
mod sequential;
mod sessions;
mod stamp;
mod transactions;

pub use counts::{DeadLetterReasons, EntityCounts, EntityTotals, FILTER_EVALUATION_EXCEPTION};
use log::Store;
pub use log::{Change, ForwardKey, MessageLog};
use stamp::Stamp;
pub use transactions::TransactionWork;

/// A hash map for keys the broker makes itself (lock tokens, sequence numbers, receiver
/// ids): foldhash instead of SipHash on the per-message path (issue 16); maps keyed by what
/// a client chooses keep the keyed SipHash.
pub type FastMap<K, V> = foldhash::HashMap<K, V>;
pub use sequential::SequenceMap;

use super::duplicates::DuplicateDetector;
use super::settings::EntitySettings;
use crate::broker::message::Message;
use crate::broker::types::{
    EntityError, LockToken, MessageState, OutboxTarget, PropertyChanges, ReceiveMode, ReceiverId,
    SequenceNumber, Settlement, SubQueue, Timestamp,
};

/// Reason recorded when the delivery count reaches the maximum (rule LCK-2).
pub const MAX_DELIVERY_COUNT_EXCEEDED: &str = "MaxDeliveryCountExceeded";
/// Reason recorded when an expired message is dead-lettered (rule TTL-6).
pub const TTL_EXPIRED: &str = "TTLExpiredException";
/// Reason recorded when a message exceeds the forwarding hop limit (rule FWD-2).
pub const MAX_TRANSFER_HOP_COUNT_EXCEEDED: &str = "MaxTransferHopCountExceeded";
/// Reason recorded for session-less messages forwarded into a session entity (rule SES-1).
pub const SESSION_ID_IS_NULL: &str = "Session ID is null.";
/// Forwarding hops allowed before a message is dead-lettered (rule FWD-2).
pub const MAX_TRANSFER_HOPS: u8 = 4;

/// A message's state inside one entity (one copy: subscriptions each hold their own).
#[derive(Clone)]
pub struct Record {
    /// The shared, immutable message.
    pub message: Message,
    /// Assigned at enqueue (or activation for scheduled messages).
    pub sequence_number: SequenceNumber,
    /// The enqueued time, stamped by the broker at enqueue (rule SEQ-3), the effective time
    /// to live (the message's own, lowered to the entity default: rule TTL-2), the delivery
    /// count (`header.delivery-count`: failed deliveries so far), the state (active,
    /// deferred or scheduled) and whether the record expires (rule TTL-1) at
    /// [`Record::expires_at`] (dead letters do not: rule TTL-8), in eight bytes: a record is
    /// 24 bytes (issue 43). Application properties the broker sets on a record (dead-letter
    /// reason, properties-to-modify) are merged into its message
    /// (`Message::merge_application_properties`).
    stamp: Stamp,
}

impl Record {
    /// A fresh active record with this effective time to live: no expiry yet, no failed
    /// deliveries.
    pub fn new(
        message: Message,
        sequence_number: SequenceNumber,
        enqueued_time: Timestamp,
        time_to_live: Option<Duration>,
    ) -> Record {
        let stamp = Stamp::new(enqueued_time, time_to_live, &message);
        Record {
            message,
            sequence_number,
            stamp,
        }
    }

    /// When the broker enqueued it (rule SEQ-3).
    #[inline]
    pub fn enqueued_time(&self) -> Timestamp {
        self.stamp.enqueued_time()
    }

    /// Sets the enqueued time (a scheduled message's activation, a log's replay).
    pub fn set_enqueued_time(&mut self, enqueued_time: Timestamp) {
        self.stamp.set_enqueued_time(enqueued_time, &self.message);
    }

    /// The effective time to live (rule TTL-2), in whole milliseconds.
    pub fn time_to_live(&self) -> Option<Duration> {
        self.stamp.time_to_live(&self.message)
    }

    /// Sets the effective time to live.
    pub fn set_time_to_live(&mut self, time_to_live: Option<Duration>) {
        self.stamp.set_time_to_live(time_to_live, &self.message);
    }

    /// Failed deliveries so far (`header.delivery-count`).
    pub fn delivery_count(&self) -> u32 {
        self.stamp.delivery_count()
    }

    /// Sets the failed deliveries (counting stops at [`packed::MAX_DELIVERY_COUNT`]).
    pub fn set_delivery_count(&mut self, count: u32) {
        self.stamp.set_delivery_count(count, &self.message);
    }

    /// Active, deferred or scheduled.
    pub fn state(&self) -> MessageState {
        self.stamp.state()
    }

    /// Sets the state.
    pub fn set_state(&mut self, state: MessageState) {
        self.stamp.set_state(state);
    }

    /// Whether the record expires (at [`Record::expires_at`]).
    pub fn expires(&self) -> bool {
        self.stamp.expires()
    }

    /// Sets whether the record expires (a record read back from the log: its expiry was
    /// written beside it).
    pub fn set_expires(&mut self, expires: bool) {
        self.stamp.set_expires(expires);
    }

    /// Absolute expiry (rule TTL-1): the enqueued time plus the time to live, for a record
    /// that expires; `None` never expires.
    pub fn expires_at(&self) -> Option<Timestamp> {
        if self.stamp.expires() {
            self.time_to_live()
                .map(|ttl| self.enqueued_time().plus(ttl))
        } else {
            None
        }
    }

    /// Makes the record expire at `at` (which is its enqueued time plus its time to live)
    /// or never.
    pub fn set_expires_at(&mut self, at: Option<Timestamp>) {
        self.stamp.set_expires(at.is_some());
        debug_assert_eq!(
            self.expires_at(),
            at,
            "expiry is enqueued time + time to live"
        );
    }
}

impl std::fmt::Debug for Record {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("Record")
            .field("message", &self.message)
            .field("sequence_number", &self.sequence_number)
            .field("enqueued_time", &self.enqueued_time())
            .field("time_to_live", &self.time_to_live())
            .field("state", &self.state())
            .field("expires", &self.expires())
            .field("delivery_count", &self.delivery_count())
            .finish()
    }
}

/// A peek-lock held on a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lock {
    /// The token the receiver settles with.
    pub token: LockToken,
    /// When the lock lapses.
    pub until: Timestamp,
}

/// A message handed to a receiver (or returned by a peek), with the broker's metadata.
#[derive(Debug, Clone)]
pub struct Delivery {
    /// The receiving link, or `None` for management replies.
    pub receiver: Option<ReceiverId>,
    /// A snapshot of the record at delivery time.
    pub record: Record,
    /// The peek-lock the receiver holds on it (none for receive-and-delete and peeks).
    pub lock: Option<Lock>,
    /// The sub-queue it came from.
    pub sub_queue: SubQueue,
}

impl std::ops::Deref for Delivery {
    type Target = Record;

    /// A delivery reads as the record it carries.
    fn deref(&self) -> &Record {
        &self.record
    }
}

/// A consequence of an operation that the shell carries out.
#[derive(Debug, Clone)]
pub enum Effect {
    /// Send this message to its receiver.
    Deliver(Delivery),
    /// A drain request was honoured: the receiver's delivery count advanced to this value.
    Drained {
        /// The draining receiver.
        receiver: ReceiverId,
        /// The link delivery-count after consuming all credit.
        delivery_count: u32,
    },
    /// Every delivery to `receiver` before this is out: answer its connection's fence.
    Fenced {
        /// The receiver.
        receiver: ReceiverId,
    },
    /// The entity was idle for its `auto_delete_on_idle` and must be deleted (rule IDL-1).
    Idle,
    /// A session receiver now holds `session_id` (answer its attach).
    SessionAccepted {
        /// The receiver.
        receiver: ReceiverId,
        /// The locked session.
        session_id: String,
        /// Until when.
        locked_until: Timestamp,
    },
    /// A session receiver could not get a session (refuse its attach).
    SessionRefused {
        /// The receiver.
        receiver: ReceiverId,
        /// Why.
        error: EntityError,
    },
    /// A session receiver lost its session lock (detach it).
    SessionLost {
        /// The receiver.
        receiver: ReceiverId,
    },
    /// Forward this message (already stamped with hop count and source data); it stays in
    /// the source's outbox until [`EntityState::forwarded`] or
    /// [`EntityState::forward_failed`].
    Forward {
        /// The message to hand to the target.
        message: Message,
        /// Its number in the source's outbox.
        sequence_number: SequenceNumber,
        /// Where it goes.
        target: OutboxTarget,
    },
    /// A message entered the dead-letter sub-queue.
    DeadLettered {
        /// Its sequence number.
        sequence_number: SequenceNumber,
        /// The recorded reason.
        reason: Option<String>,
    },
}

/// What a timer deadline is for; ordered so the deadline set is a priority queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Deadline {
    /// A peek-lock lapses.
    Lock(LockToken),
    /// A main-queue message reaches its expiry.
    Expiry(SequenceNumber),
    /// A scheduled message becomes active.
    Activation(SequenceNumber),
    /// A receiver's session lock lapses.
    SessionLock(ReceiverId),
    /// A next-available session receiver stops waiting.
    SessionWait(ReceiverId),
}

/// A receiver's credit. Link credit is a full `uint` (AMQP 1.0 §2.7.4): it is kept as the
/// remaining count, never as a limit in wrapping delivery-count space (where a credit of
/// 2^31 or more would look negative).
#[derive(Debug)]
struct ReceiverState {
    /// The sub-queue it takes from.
    sub_queue: SubQueue,
    /// Peek-lock or receive-and-delete.
    mode: ReceiveMode,
    /// Deliveries so far (the link's delivery-count, wrapping).
    delivered: u32,
    /// Deliveries the receiver may still take.
    credit: u32,
    /// Whether it is in its sub-queue's `ready_receivers` list.
    in_ready: bool,
    /// A drain was requested and is answered after the next dispatch.
    drain: bool,
    /// The session this receiver holds (session entities).
    session: Option<String>,
    /// A next-available receiver waits for a session until then.
    session_wait_until: Option<Timestamp>,
}

impl ReceiverState {
    fn has_credit(&self) -> bool {
        self.credit > 0
    }
}

/// The most room an emptied effects list keeps for the next turn
/// ([`EntityState::recycle_effects`]).
const KEPT_EFFECTS: usize = 1024;

/// The state of one queue or subscription.
#[derive(Debug)]
pub struct EntityState {
    /// The rules this entity runs with.
    settings: EntitySettings,
    /// The records of the main, dead-letter (rule DLQ-1) and transfer dead-letter (rule
    /// FWD-3) sub-queues, the sequence counter (rule SEQ-1) and session states: everything
    /// durable, changed only through its methods.
    log: MessageLog,
    /// The lock held on each locked record. Locks are volatile: they live here, beside the
    /// log, and a restart releases them. A lock token says which record it locks
    /// ([`EntityState::new_lock`]), so a token finds its lock with one lookup here.
    held: SequenceMap<(SubQueue, SequenceNumber), Lock>,
    /// Pending deadlines, earliest first. Entries may be stale; they are checked on firing.
    deadlines: BTreeSet<(Timestamp, Deadline)>,
    /// Lock lapses in the order they were armed, which is their time order while the lock
    /// duration stays the same (a lock taken or renewed later lapses later); one that would
    /// break the order goes to `deadlines` instead. Settled locks are dropped from the front
    /// as they go, and the rest when more than half are stale (see `arm_lock`).
    lock_deadlines: VecDeque<(Timestamp, LockToken)>,
    /// Attached receivers.
    receivers: FastMap<ReceiverId, ReceiverState>,
    /// Round-robin order of the receivers that have credit, per sub-queue (main, DLQ,
    /// transfer DLQ): dispatch touches only receivers that can take a message, so idle
    /// receivers cost nothing per send. Entries of detached receivers are dropped lazily.
    ready_receivers: [VecDeque<ReceiverId>; 3],
    /// Receivers dispatch has looked at so far: the cost of dispatch, observable by tests
    /// (it grows with deliveries, never with idle receivers).
    dispatch_visits: u64,
    /// Bytes stored across both sub-queues, counted against `max_size_bytes`.
    stored_bytes: u64,
    /// Mixed into lock tokens so tokens differ across entities and restarts.
    token_seed: u64,
    /// Lock tokens issued so far.
    tokens_issued: u64,
    /// Effects not yet taken by the shell.
    effects: Vec<Effect>,
    /// Message ids seen recently, when duplicate detection is on.
    duplicates: Option<DuplicateDetector>,
    /// Picks arriving messages' partitions (rule PRT-2).
    partitioner: crate::broker::partitions::Partitioner,
    /// Cumulative event counts (metrics).
    totals: EntityTotals,
    /// Last send, receive, settlement, peek or schedule (rule IDL-2).
    last_activity: Timestamp,
    /// Scheduled messages not yet activated; they keep the entity alive.
    scheduled_count: usize,
    /// `Effect::Idle` was emitted; the entity is being deleted.
    idle_reported: bool,
    /// Sessions by id (session entities).
    sessions: HashMap<String, sessions::SessionEntry>,
    /// Unlocked sessions with available messages, by their oldest available message.
    ready: BTreeSet<(u64, String)>,
    /// Next-available receivers waiting for a session, oldest first.
    waiters: VecDeque<ReceiverId>,
    /// Locked sessions to serve at the next dispatch (new messages or holder credit).
    dirty_sessions: HashSet<String>,
    /// Receivers with a drain request to answer at the next dispatch.
    draining: Vec<ReceiverId>,
}

/// Index of a sub-queue in `ready_receivers`.
fn ready_index(sub_queue: SubQueue) -> usize {
    match sub_queue {
        SubQueue::Main => 0,
        SubQueue::DeadLetter => 1,
        SubQueue::TransferDeadLetter => 2,
    }
}

fn mix(mut value: u64) -> u64 {
    // splitmix64 finaliser: spreads a counter over all bits.
    value = value.wrapping_add(0x9e37_79b9_7f4a_7c15);
    value = (value ^ (value >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    value = (value ^ (value >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    value ^ (value >> 31)
}

impl EntityState {
    /// An empty entity. `token_seed` must differ per entity and per leadership
    /// ([`crate::broker::leadership::Leadership::token_seed`]).
    pub fn new(settings: EntitySettings, token_seed: u64, now: Timestamp) -> EntityState {
        let mut log = MessageLog::default();
        log.set_partitions(settings.partitions);
        EntityState {
            partitioner: crate::broker::partitions::Partitioner::new(
                settings.partitions,
                settings.duplicate_detection_window.is_some(),
            ),
            duplicates: settings
                .duplicate_detection_window
                .map(DuplicateDetector::new),
            last_activity: now,
            totals: EntityTotals::default(),
            scheduled_count: 0,
            idle_reported: false,
            sessions: HashMap::new(),
            ready: BTreeSet::new(),
            waiters: VecDeque::new(),
            dirty_sessions: HashSet::new(),
            draining: Vec::new(),
            settings,
            log,
            held: SequenceMap::default(),
            deadlines: BTreeSet::new(),
            lock_deadlines: VecDeque::new(),
            receivers: FastMap::default(),
            ready_receivers: Default::default(),
            dispatch_visits: 0,
            stored_bytes: 0,
            token_seed,
            tokens_issued: 0,
            effects: Vec::new(),
        }
    }

    /// The settings this entity runs with.
    pub fn settings(&self) -> &EntitySettings {
        &self.settings
    }

    /// Applies settings changed at run time (the admin API): lock duration, delivery
    /// count, TTL, expiry dead-lettering, size quota, idle deletion and forwarding apply to
    /// what happens from `now` on; messages already stored keep their expiry. The path and
    /// `requires_session` cannot change (Service Bus refuses both). Duplicate detection
    /// keeps its history when only the window changes.
    pub fn update_settings(&mut self, now: Timestamp, settings: EntitySettings) {
        match (settings.duplicate_detection_window, &mut self.duplicates) {
            (None, duplicates) => *duplicates = None,
            (Some(window), None) => self.duplicates = Some(DuplicateDetector::new(window)),
            (Some(window), Some(_)) if Some(window) != self.settings.duplicate_detection_window => {
                self.duplicates = Some(DuplicateDetector::new(window));
            }
            (Some(_), Some(_)) => {}
        }
        let path = std::mem::take(&mut self.settings.path);
        let requires_session = self.settings.requires_session;
        self.settings = EntitySettings {
            path,
            requires_session,
            ..settings
        };
        self.touch(now);
        // Receiving may have been enabled again.
        self.dispatch(now);
    }

    /// Message counts and size, for the admin API's runtime properties and metrics.
    pub fn counts(&self) -> EntityCounts {
        let main = self.log.records(SubQueue::Main).len() as u64;
        let scheduled = self.scheduled_count as u64;
        EntityCounts {
            active: main.saturating_sub(scheduled),
            scheduled,
            deferred: self.log.store(SubQueue::Main).deferred() as u64,
            dead_letter: self.log.records(SubQueue::DeadLetter).len() as u64,
            transfer: self.log.outbox().len() as u64,
            transfer_dead_letter: self.log.records(SubQueue::TransferDeadLetter).len() as u64,
            size_in_bytes: self.stored_bytes,
            totals: self.totals,
            next_sequence_number: self.log.next_sequence_number(),
            last_activity: self.last_activity,
            kept_alive: self.settings.forwards
                || !self.receivers.is_empty()
                || self.scheduled_count > 0,
            next_sequence_numbers: {
                let mut numbers = [0; crate::broker::partitions::PARTITIONS as usize];
                for (slot, next) in numbers.iter_mut().zip(self.log.next_sequence_numbers()) {
                    *slot = *next;
                }
                numbers
            },
        }
    }

    /// Effects produced since the last call, in order.
    pub fn take_effects(&mut self) -> Vec<Effect> {
        std::mem::take(&mut self.effects)
    }

    /// Whether effects wait to be taken ([`Self::take_effects`]).
    pub fn has_effects(&self) -> bool {
        !self.effects.is_empty()
    }

    /// Gives back an emptied effects list taken by [`Self::take_effects`], so that the
    /// next turn's effects do not grow a new one from nothing (kept only while no new
    /// effects are pending, and up to `KEPT_EFFECTS` entries of room).
    pub fn recycle_effects(&mut self, mut spare: Vec<Effect>) {
        if self.effects.is_empty() && spare.capacity() <= KEPT_EFFECTS {
            spare.clear();
            self.effects = spare;
        }
    }

    /// The earliest pending deadline, for the shell's single timer (never a lock that was
    /// settled, released or renewed: those are dropped off the lock queue's front first).
    pub fn next_deadline(&mut self) -> Option<Timestamp> {
        self.trim_lock_deadlines();
        let first = match (
            self.deadlines.first().map(|(at, _)| *at),
            self.lock_deadlines.front().map(|(at, _)| *at),
        ) {
            (Some(first), Some(lock)) => Some(first.min(lock)),
            (first, lock) => first.or(lock),
        };
        match (first, self.idle_deadline()) {
            (Some(first), Some(idle)) => Some(first.min(idle)),
            (first, idle) => first.or(idle),
        }
    }

    /// When the entity becomes idle (rules IDL-1, IDL-2, FWD-4): never while a receiver is
    /// attached, a scheduled message is pending, or the entity forwards.
    fn idle_deadline(&self) -> Option<Timestamp> {
        let idle_after = self.settings.auto_delete_on_idle?;
        if self.idle_reported
            || self.settings.forwards
            || !self.receivers.is_empty()
            || self.scheduled_count > 0
        {
            return None;
        }
        Some(self.last_activity.plus(idle_after))
    }

    /// Records activity that keeps the entity alive.
    fn touch(&mut self, now: Timestamp) {
        self.last_activity = self.last_activity.max(now);
    }

    /// Bytes stored across the sub-queues (what the quota counts).
    pub fn stored_bytes(&self) -> u64 {
        self.stored_bytes
    }

    /// Number of records in a sub-queue (all states), for tests and diagnostics.
    pub fn message_count(&self, sub_queue: SubQueue) -> usize {
        self.store(sub_queue).records.len()
    }

    /// Whether a record is in its sub-queue's available index (sessionless entities).
    pub fn is_available(&self, sub_queue: SubQueue, sequence_number: SequenceNumber) -> bool {
        self.store(sub_queue).available.contains(&sequence_number)
    }

    /// Looks up a record by sequence number.
    pub fn record(&self, sub_queue: SubQueue, sequence_number: SequenceNumber) -> Option<&Record> {
        self.store(sub_queue).records.get(&sequence_number)
    }

    fn store(&self, sub_queue: SubQueue) -> &Store {
        self.log.store(sub_queue)
    }

    /// The entity's message log (read only: changes go through the core's operations).
    pub fn log(&self) -> &MessageLog {
        &self.log
    }

    /// Turns change records on (durable storage) or off.
    pub fn set_journaling(&mut self, on: bool) {
        self.log.set_journaling(on);
    }

    /// Durable changes made since the last call, in order.
    pub fn take_changes(&mut self) -> Vec<Change> {
        self.log.take_changes()
    }

    /// Processes every deadline due at `now`: lock expiry, message expiry, activation.
    pub fn advance(&mut self, now: Timestamp) {
        loop {
            // The earliest of both sources; a lock first on a tie, as `Deadline` orders.
            let queued = self.lock_deadlines.front().copied();
            let first = self.deadlines.first().copied();
            let (at, deadline) = match (queued, first) {
                (Some((at, token)), first)
                    if at <= now && first.is_none_or(|(first_at, _)| at <= first_at) =>
                {
                    self.lock_deadlines.pop_front();
                    (at, Deadline::Lock(token))
                }
                (_, Some((at, deadline))) if at <= now => {
                    self.deadlines.pop_first();
                    (at, deadline)
                }
                _ => break,
            };
            match deadline {
                Deadline::Lock(token) => self.expire_lock(now, token),
                Deadline::Expiry(sequence_number) => self.expire_if_due(now, sequence_number),
                // Activation is stamped with the scheduled time, even when the timer ran
                // late, so TTL counts from the scheduled time (rule TTL-10).
                Deadline::Activation(sequence_number) => self.activate(now, at, sequence_number),
                Deadline::SessionLock(receiver) => self.session_lock_expired(now, receiver),
                Deadline::SessionWait(receiver) => self.session_wait_expired(now, receiver),
            }
        }
        self.trim_lock_deadlines();
        self.dispatch(now);
        if let Some(idle) = self.idle_deadline()
            && idle <= now
        {
            self.idle_reported = true;
            self.effects.push(Effect::Idle);
        }
    }

    /// A delivery of a message whose send was withdrawn did not go out: the message stays
    /// gone, and `receiver` gets back the credit it spent on it.
    pub fn forget_undelivered(&mut self, receiver: Option<ReceiverId>) {
        if let Some(state) = receiver.and_then(|receiver| self.receivers.get_mut(&receiver)) {
            state.delivered = state.delivered.wrapping_sub(1);
        }
    }

    /// Takes back a record whose delivery never reached its receiver (the link detached
    /// meanwhile): a receive-and-delete record is restored, a locked one is released, in
    /// both cases without counting a delivery.
    pub fn return_undelivered(
        &mut self,
        now: Timestamp,
        receiver: Option<ReceiverId>,
        sub_queue: SubQueue,
        record: Record,
        lock: Option<Lock>,
    ) {
        self.advance(now);
        if let Some(state) = receiver.and_then(|receiver| self.receivers.get_mut(&receiver)) {
            state.delivered = state.delivered.wrapping_sub(1);
        }
        let sequence_number = record.sequence_number;
        let stored = self.store(sub_queue).records.contains_key(&sequence_number);
        match (lock, stored) {
            (Some(lock), true) => {
                let _ = self.settle(now, lock.token, Settlement::Release);
            }
            (None, false) => {
                // Removed on delivery: restore it where receive-and-delete took it from.
                self.stored_bytes += record.message.size() as u64;
                if sub_queue == SubQueue::Main
                    && let Some(at) = record.expires_at()
                {
                    self.deadlines
                        .insert((at, Deadline::Expiry(sequence_number)));
                }
                self.log.insert(sub_queue, record);
                self.make_available(now, sub_queue, sequence_number);
                self.dispatch(now);
            }
            _ => {}
        }
    }
}
