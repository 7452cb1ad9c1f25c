//! The bytes of the log's records: an entity's change records (one log record per actor
//! turn, so a turn is durable whole or not at all), checkpoint parts, entity drops and the
//! namespace's run-time changes.
//!
//! Hand-written and versioned by the record kind byte: the format is the durable contract
//! between releases, so it must not move when a Rust type gains a field. Integers are
//! LEB128 varints (zig-zag for signed), strings and byte strings are length-prefixed.

use std::time::Duration;

use crate::broker::entity::state::{Change, ForwardKey, Record};
use crate::broker::message::{Extras, HeaderFields, MAX_HEADER_SECTIONS, Message};
use crate::broker::rules::{FilterDefinition, RuleDefinition};
use crate::broker::types::{
    MessageState, OutboxTarget, PropertyChanges, PropertyValue, SequenceNumber, SubQueue, Timestamp,
};
use crate::config::ParameterValue;

mod raft;
pub use raft::*;

/// One record of the log.
#[derive(Debug, Clone)]
pub enum LogRecord {
    /// Changes of one entity made in one turn.
    Changes {
        /// The entity's path.
        entity: String,
        /// In order.
        changes: Vec<Change>,
    },
    /// Part of a checkpoint: the entity's whole durable state, written in parts. A complete
    /// checkpoint (first to last part) replaces everything recorded for the entity before it.
    Checkpoint {
        /// The entity's path.
        entity: String,
        /// The first part: what was recorded before is about to be replaced.
        first: bool,
        /// The last part: the replacement is complete.
        last: bool,
        /// This part's changes.
        changes: Vec<Change>,
    },
    /// The entity was deleted (auto-delete-on-idle): forget what was recorded for it.
    Dropped {
        /// The entity's path.
        entity: String,
    },
    /// Changes of several entities made in one turn (a topic's publish: the topic's changes
    /// and every subscription's copies), durable together or not at all.
    Batch {
        /// Each entity's path and changes, in order.
        entries: Vec<(String, Vec<Change>)>,
    },
    /// The namespace's run-time changes (entities created, changed or deleted at run time),
    /// replacing what was recorded before: the metadata group's state.
    Namespace {
        /// The changes as TOML (`config::changes`).
        text: String,
    },
}

const KIND_CHANGES: u8 = 1;
const KIND_CHECKPOINT: u8 = 2;
const KIND_DROPPED: u8 = 3;
const KIND_BATCH: u8 = 4;
// 5 to 8 are the Raft records (`codec/raft.rs`).
const KIND_NAMESPACE: u8 = 9;

const CHANGE_PUT: u8 = 1;
const CHANGE_UPDATE: u8 = 2;
const CHANGE_MOVE: u8 = 3;
const CHANGE_REMOVE: u8 = 4;
const CHANGE_NEXT_SEQUENCE: u8 = 5;
const CHANGE_SESSION_STATE: u8 = 6;
const CHANGE_REMEMBERED: u8 = 7;
const CHANGE_OUTBOX: u8 = 8;
const CHANGE_FORWARDED: u8 = 9;
const CHANGE_RULE_ADDED: u8 = 10;
const CHANGE_RULE_REMOVED: u8 = 11;
const CHANGE_RULES_SET: u8 = 12;
const CHANGE_RECEIVED: u8 = 13;
const CHANGE_FORGET_RECEIVED: u8 = 14;

// A rule's filter kind. A SQL filter with `@parameters` has a kind of its own, and an action
// with parameters a presence byte of its own (2), so that a rule without parameters is
// written byte for byte as before they existed and data written before reads unchanged.
const FILTER_TRUE: u8 = 0;
const FILTER_FALSE: u8 = 1;
const FILTER_SQL: u8 = 2;
const FILTER_CORRELATION: u8 = 3;
const FILTER_SQL_WITH_PARAMETERS: u8 = 4;
const ACTION_NONE: u8 = 0;
const ACTION_SQL: u8 = 1;
const ACTION_SQL_WITH_PARAMETERS: u8 = 2;

// A parameter value's type.
const PARAMETER_STRING: u8 = 0;
const PARAMETER_INT: u8 = 1;
const PARAMETER_LONG: u8 = 2;
const PARAMETER_DOUBLE: u8 = 3;
const PARAMETER_BOOL: u8 = 4;
const PARAMETER_DATETIME: u8 = 5;
const PARAMETER_DURATION: u8 = 6;
const PARAMETER_GUID: u8 = 7;

/// Why bytes could not be read as a record.
#[derive(Debug, thiserror::Error)]
#[error("malformed log record: {0}")]
pub struct DecodeError(pub(crate) String);

/// An entity's checkpoint as records, one a part, the first and the last marked (a
/// complete checkpoint replaces everything recorded for the entity before it).
pub fn checkpoint_records(entity: &str, parts: Vec<Vec<Change>>) -> Vec<LogRecord> {
    let count = parts.len();
    parts
        .into_iter()
        .enumerate()
        .map(|(index, changes)| LogRecord::Checkpoint {
            entity: entity.to_string(),
            first: index == 0,
            last: index + 1 == count,
            changes,
        })
        .collect()
}

/// `changes` cut into parts of `per_part` changes, in order (one empty part when there are
/// none).
pub fn parts_of(changes: Vec<Change>, per_part: usize) -> Vec<Vec<Change>> {
    let count = changes.len().div_ceil(per_part).max(1);
    let mut changes = changes.into_iter();
    (0..count)
        .map(|_| changes.by_ref().take(per_part).collect())
        .collect()
}

/// Encodes a log record.
pub fn encode(record: &LogRecord) -> Vec<u8> {
    let mut output = Vec::with_capacity(256);
    encode_into(&mut output, record);
    output
}

/// Appends a log record's encoding to `output` (a caller that keeps its buffer from record
/// to record saves the allocations and the copies of a growing one).
pub fn encode_into(output: &mut Vec<u8>, record: &LogRecord) {
    let mut out = Out(std::mem::take(output));
    match record {
        LogRecord::Changes { entity, changes } => {
            out.u8(KIND_CHANGES);
            out.str(entity);
            out.changes(changes);
        }
        LogRecord::Checkpoint {
            entity,
            first,
            last,
            changes,
        } => {
            out.u8(KIND_CHECKPOINT);
            out.str(entity);
            out.u8(u8::from(*first) | (u8::from(*last) << 1));
            out.changes(changes);
        }
        LogRecord::Dropped { entity } => {
            out.u8(KIND_DROPPED);
            out.str(entity);
        }
        LogRecord::Batch { entries } => {
            out.u8(KIND_BATCH);
            out.u64(entries.len() as u64);
            for (entity, changes) in entries {
                out.str(entity);
                out.changes(changes);
            }
        }
        LogRecord::Namespace { text } => {
            out.u8(KIND_NAMESPACE);
            out.str(text);
        }
    }
    *output = out.0;
}

/// Decodes a log record.
pub fn decode(bytes: &[u8]) -> Result<LogRecord, DecodeError> {
    let mut input = In { bytes, at: 0 };
    let record = match input.u8()? {
        KIND_CHANGES => LogRecord::Changes {
            entity: input.string()?,
            changes: input.changes()?,
        },
        KIND_CHECKPOINT => {
            let entity = input.string()?;
            let flags = input.u8()?;
            LogRecord::Checkpoint {
                entity,
                first: flags & 1 != 0,
                last: flags & 2 != 0,
                changes: input.changes()?,
            }
        }
        KIND_DROPPED => LogRecord::Dropped {
            entity: input.string()?,
        },
        KIND_BATCH => {
            let count = input.u32()? as usize;
            // Each entry takes at least its name's length prefix: a count beyond the
            // bytes left is malformed, not an allocation.
            if count > bytes.len() {
                return Err(DecodeError(format!(
                    "a batch of {count} entries in {} bytes",
                    bytes.len()
                )));
            }
            let mut entries = Vec::with_capacity(count);
            for _ in 0..count {
                entries.push((input.string()?, input.changes()?));
            }
            LogRecord::Batch { entries }
        }
        KIND_NAMESPACE => LogRecord::Namespace {
            text: input.string()?,
        },
        kind => return Err(DecodeError(format!("unknown record kind {kind}"))),
    };
    if input.at != bytes.len() {
        return Err(DecodeError(format!(
            "{} bytes left over",
            bytes.len() - input.at
        )));
    }
    Ok(record)
}

pub(crate) struct Out(pub(crate) Vec<u8>);

impl Out {
    pub(crate) fn u8(&mut self, value: u8) {
        self.0.push(value);
    }
    pub(crate) fn u64(&mut self, mut value: u64) {
        loop {
            let byte = (value & 0x7f) as u8;
            value >>= 7;
            if value == 0 {
                self.0.push(byte);
                return;
            }
            self.0.push(byte | 0x80);
        }
    }
    pub(crate) fn i64(&mut self, value: i64) {
        self.u64(((value << 1) ^ (value >> 63)) as u64);
    }
    pub(crate) fn bytes(&mut self, value: &[u8]) {
        self.u64(value.len() as u64);
        self.0.extend_from_slice(value);
    }
    pub(crate) fn str(&mut self, value: &str) {
        self.bytes(value.as_bytes());
    }
    pub(crate) fn opt_str(&mut self, value: Option<&str>) {
        match value {
            Some(value) => {
                self.u8(1);
                self.str(value);
            }
            None => self.u8(0),
        }
    }
    pub(crate) fn opt_i64(&mut self, value: Option<i64>) {
        match value {
            Some(value) => {
                self.u8(1);
                self.i64(value);
            }
            None => self.u8(0),
        }
    }
    pub(crate) fn sub_queue(&mut self, value: SubQueue) {
        self.u8(match value {
            SubQueue::Main => 0,
            SubQueue::DeadLetter => 1,
            SubQueue::TransferDeadLetter => 2,
        });
    }
    fn state(&mut self, value: MessageState) {
        self.u8(value as u8);
    }
    pub(crate) fn duration(&mut self, value: Option<Duration>) {
        self.opt_i64(value.map(|ttl| i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX)));
    }
    fn value(&mut self, value: &PropertyValue) {
        match value {
            PropertyValue::Null => self.u8(0),
            PropertyValue::Bool(value) => {
                self.u8(1);
                self.u8(u8::from(*value));
            }
            PropertyValue::Long(value) => {
                self.u8(2);
                self.i64(*value);
            }
            PropertyValue::Double(value) => {
                self.u8(3);
                self.0.extend_from_slice(&value.to_bits().to_le_bytes());
            }
            PropertyValue::String(value) => {
                self.u8(4);
                self.str(value);
            }
            PropertyValue::Timestamp(value) => {
                self.u8(5);
                self.i64(*value);
            }
            PropertyValue::Uuid(value) => {
                self.u8(6);
                self.0.extend_from_slice(value);
            }
            PropertyValue::Binary(value) => {
                self.u8(7);
                self.bytes(value);
            }
        }
    }
    pub(crate) fn properties(&mut self, values: &[(String, PropertyValue)]) {
        self.u64(values.len() as u64);
        for (name, value) in values {
            self.str(name);
            self.value(value);
        }
    }
    pub(crate) fn message(&mut self, message: &Message) {
        let header = message.header();
        self.u8(u8::from(header.durable));
        self.u8(header.priority);
        self.duration(header.time_to_live);
        self.bytes(message.annotation_entries());
        self.u64(u64::from(message.annotation_element_count()));
        self.bytes(message.properties_section());
        self.bytes(message.application_properties_section());
        self.bytes(message.body());
        for field in message.system().values() {
            self.opt_str(field);
        }
        let extras = message.extras();
        self.opt_i64(extras.scheduled_enqueue_time.map(|at| at.0));
        self.opt_i64(extras.original_sequence_number);
        self.properties(&extras.user_properties);
        self.u8(message.hop_count());
        self.opt_str(extras.dead_letter_source.as_deref());
        self.properties(&extras.extra_properties);
    }
    pub(crate) fn record(&mut self, record: &Record) {
        // Where older builds kept the record's property changes: now in its message.
        self.record_with_changes(record, &[]);
    }
    fn record_with_changes(&mut self, record: &Record, changes: &[(String, PropertyValue)]) {
        self.message(&record.message);
        self.i64(record.sequence_number.0);
        self.i64(record.enqueued_time().0);
        self.duration(record.time_to_live());
        self.opt_i64(record.expires_at().map(|at| at.0));
        self.u64(u64::from(record.delivery_count()));
        self.state(record.state());
        self.properties(changes);
    }
    fn rule(&mut self, rule: &RuleDefinition) {
        self.str(&rule.name);
        match &rule.filter {
            FilterDefinition::True => self.u8(FILTER_TRUE),
            FilterDefinition::False => self.u8(FILTER_FALSE),
            FilterDefinition::Sql(expression) if rule.filter_parameters.is_empty() => {
                self.u8(FILTER_SQL);
                self.str(expression);
            }
            FilterDefinition::Sql(expression) => {
                self.u8(FILTER_SQL_WITH_PARAMETERS);
                self.str(expression);
                self.parameters(&rule.filter_parameters);
            }
            FilterDefinition::Correlation { fields, properties } => {
                self.u8(FILTER_CORRELATION);
                for field in fields {
                    self.opt_str(field.as_deref());
                }
                self.properties(properties);
            }
        }
        match &rule.action {
            None => self.u8(ACTION_NONE),
            Some(expression) if rule.action_parameters.is_empty() => {
                self.u8(ACTION_SQL);
                self.str(expression);
            }
            Some(expression) => {
                self.u8(ACTION_SQL_WITH_PARAMETERS);
                self.str(expression);
                self.parameters(&rule.action_parameters);
            }
        }
        self.i64(rule.created_at);
    }
    fn parameters(&mut self, parameters: &[(String, ParameterValue)]) {
        self.u64(parameters.len() as u64);
        for (name, value) in parameters {
            self.str(name);
            match value {
                ParameterValue::String(text) => {
                    self.u8(PARAMETER_STRING);
                    self.str(text);
                }
                ParameterValue::Int(number) => {
                    self.u8(PARAMETER_INT);
                    self.i64(i64::from(*number));
                }
                ParameterValue::Long(number) => {
                    self.u8(PARAMETER_LONG);
                    self.i64(*number);
                }
                ParameterValue::Double(number) => {
                    self.u8(PARAMETER_DOUBLE);
                    self.0.extend_from_slice(&number.to_bits().to_le_bytes());
                }
                ParameterValue::Bool(flag) => {
                    self.u8(PARAMETER_BOOL);
                    self.u8(u8::from(*flag));
                }
                ParameterValue::DateTime(ticks) => {
                    self.u8(PARAMETER_DATETIME);
                    self.i64(*ticks);
                }
                ParameterValue::Duration(ticks) => {
                    self.u8(PARAMETER_DURATION);
                    self.i64(*ticks);
                }
                ParameterValue::Guid(bytes) => {
                    self.u8(PARAMETER_GUID);
                    self.0.extend_from_slice(bytes);
                }
            }
        }
    }
    fn changes(&mut self, changes: &[Change]) {
        self.u64(changes.len() as u64);
        for change in changes {
            match change {
                Change::Put { sub_queue, record } => {
                    self.u8(CHANGE_PUT);
                    self.sub_queue(*sub_queue);
                    self.record(record);
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
                    self.u8(CHANGE_UPDATE);
                    self.sub_queue(*sub_queue);
                    self.i64(sequence_number.0);
                    self.u64(u64::from(*delivery_count));
                    self.state(*state);
                    self.i64(enqueued_time.0);
                    self.opt_i64(expires_at.map(|at| at.0));
                    self.properties(property_changes);
                }
                Change::Move {
                    from,
                    to,
                    sequence_number,
                } => {
                    self.u8(CHANGE_MOVE);
                    self.sub_queue(*from);
                    self.sub_queue(*to);
                    self.i64(sequence_number.0);
                }
                Change::Remove {
                    sub_queue,
                    sequence_number,
                } => {
                    self.u8(CHANGE_REMOVE);
                    self.sub_queue(*sub_queue);
                    self.i64(sequence_number.0);
                }
                Change::NextSequence(next) => {
                    self.u8(CHANGE_NEXT_SEQUENCE);
                    self.i64(*next);
                }
                Change::SessionState { session_id, state } => {
                    self.u8(CHANGE_SESSION_STATE);
                    self.str(session_id);
                    match state {
                        Some(state) => {
                            self.u8(1);
                            self.bytes(state);
                        }
                        None => self.u8(0),
                    }
                }
                Change::Outbox { record, target } => {
                    self.u8(CHANGE_OUTBOX);
                    match target {
                        OutboxTarget::Forward => self.u8(0),
                        OutboxTarget::DeadLetters => self.u8(1),
                        OutboxTarget::Via(destination) => {
                            self.u8(2);
                            self.str(destination);
                        }
                    }
                    self.record(record);
                }
                Change::Forwarded { sequence_number } => {
                    self.u8(CHANGE_FORWARDED);
                    self.i64(sequence_number.0);
                }
                Change::RuleAdded { subscription, rule } => {
                    self.u8(CHANGE_RULE_ADDED);
                    self.str(subscription);
                    self.rule(rule);
                }
                Change::RuleRemoved { subscription, name } => {
                    self.u8(CHANGE_RULE_REMOVED);
                    self.str(subscription);
                    self.str(name);
                }
                Change::RulesSet {
                    subscription,
                    rules,
                } => {
                    self.u8(CHANGE_RULES_SET);
                    self.str(subscription);
                    self.u64(rules.len() as u64);
                    for rule in rules {
                        self.rule(rule);
                    }
                }
                Change::Remembered {
                    message_id,
                    sequence_number,
                    at,
                } => {
                    self.u8(CHANGE_REMEMBERED);
                    self.str(message_id);
                    self.i64(sequence_number.0);
                    self.i64(at.0);
                }
                Change::Received { key } => {
                    self.u8(CHANGE_RECEIVED);
                    self.str(&key.source);
                    self.i64(key.sequence_number.0);
                    self.i64(key.enqueued_time.0);
                }
                Change::ForgetReceived { source, below } => {
                    self.u8(CHANGE_FORGET_RECEIVED);
                    self.str(source);
                    self.i64(below.0);
                }
            }
        }
    }
}

pub(crate) struct In<'a> {
    pub(crate) bytes: &'a [u8],
    pub(crate) at: usize,
}

impl<'a> In<'a> {
    pub(crate) fn fail<T>(&self, what: &str) -> Result<T, DecodeError> {
        Err(DecodeError(format!("{what} at byte {}", self.at)))
    }
    pub(crate) fn u8(&mut self) -> Result<u8, DecodeError> {
        match self.bytes.get(self.at) {
            Some(byte) => {
                self.at += 1;
                Ok(*byte)
            }
            None => self.fail("unexpected end"),
        }
    }
    pub(crate) fn u64(&mut self) -> Result<u64, DecodeError> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = self.u8()?;
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        self.fail("varint too long")
    }
    pub(crate) fn i64(&mut self) -> Result<i64, DecodeError> {
        let raw = self.u64()?;
        Ok(((raw >> 1) as i64) ^ -((raw & 1) as i64))
    }
    pub(crate) fn u32(&mut self) -> Result<u32, DecodeError> {
        let value = self.u64()?;
        u32::try_from(value).or_else(|_| self.fail("value out of range"))
    }
    pub(crate) fn slice(&mut self) -> Result<&'a [u8], DecodeError> {
        let length = self.u64()? as usize;
        let end = self
            .at
            .checked_add(length)
            .filter(|end| *end <= self.bytes.len());
        let Some(end) = end else {
            return self.fail("length past the end");
        };
        let slice = &self.bytes[self.at..end];
        self.at = end;
        Ok(slice)
    }
    pub(crate) fn string(&mut self) -> Result<String, DecodeError> {
        let at = self.at;
        let slice = self.slice()?;
        String::from_utf8(slice.to_vec())
            .map_err(|_| DecodeError(format!("invalid UTF-8 at byte {at}")))
    }
    pub(crate) fn opt_string(&mut self) -> Result<Option<String>, DecodeError> {
        match self.u8()? {
            0 => Ok(None),
            _ => self.string().map(Some),
        }
    }
    /// An optional text borrowed from the input.
    fn opt_text(&mut self) -> Result<Option<&'a str>, DecodeError> {
        if self.u8()? == 0 {
            return Ok(None);
        }
        let at = self.at;
        let slice = self.slice()?;
        std::str::from_utf8(slice)
            .map(Some)
            .map_err(|_| DecodeError(format!("invalid UTF-8 at byte {at}")))
    }
    pub(crate) fn opt_i64(&mut self) -> Result<Option<i64>, DecodeError> {
        match self.u8()? {
            0 => Ok(None),
            _ => self.i64().map(Some),
        }
    }
    pub(crate) fn sub_queue(&mut self) -> Result<SubQueue, DecodeError> {
        match self.u8()? {
            0 => Ok(SubQueue::Main),
            1 => Ok(SubQueue::DeadLetter),
            2 => Ok(SubQueue::TransferDeadLetter),
            _ => self.fail("unknown sub-queue"),
        }
    }
    fn state(&mut self) -> Result<MessageState, DecodeError> {
        match self.u8()? {
            0 => Ok(MessageState::Active),
            1 => Ok(MessageState::Deferred),
            2 => Ok(MessageState::Scheduled),
            _ => self.fail("unknown message state"),
        }
    }
    pub(crate) fn duration(&mut self) -> Result<Option<Duration>, DecodeError> {
        Ok(self
            .opt_i64()?
            .map(|millis| Duration::from_millis(millis.max(0) as u64)))
    }
    fn value(&mut self) -> Result<PropertyValue, DecodeError> {
        Ok(match self.u8()? {
            0 => PropertyValue::Null,
            1 => PropertyValue::Bool(self.u8()? != 0),
            2 => PropertyValue::Long(self.i64()?),
            3 => {
                let mut bits = [0u8; 8];
                for byte in &mut bits {
                    *byte = self.u8()?;
                }
                PropertyValue::Double(f64::from_bits(u64::from_le_bytes(bits)))
            }
            4 => PropertyValue::String(self.string()?),
            5 => PropertyValue::Timestamp(self.i64()?),
            6 => {
                let mut uuid = [0u8; 16];
                for byte in &mut uuid {
                    *byte = self.u8()?;
                }
                PropertyValue::Uuid(uuid)
            }
            7 => PropertyValue::Binary(self.slice()?.to_vec()),
            _ => return self.fail("unknown property type"),
        })
    }
    pub(crate) fn properties(&mut self) -> Result<PropertyChanges, DecodeError> {
        let count = self.u64()?;
        let mut values = Vec::with_capacity(count.min(1024) as usize);
        for _ in 0..count {
            let name = self.string()?;
            values.push((name, self.value()?));
        }
        Ok(values)
    }
    pub(crate) fn message(&mut self) -> Result<Message, DecodeError> {
        let header = HeaderFields {
            durable: self.u8()? != 0,
            priority: self.u8()?,
            time_to_live: self.duration()?,
        };
        let annotation_entries = self.slice()?;
        // The element count: written for older builds, counted from the entries here.
        self.u32()?;
        let properties_section = self.slice()?;
        let application_properties_section = self.slice()?;
        let body = self.slice()?;
        let mut system: [Option<&str>; 8] = [None; 8];
        for field in &mut system {
            *field = self.opt_text()?;
        }
        let header_length = annotation_entries.len()
            + properties_section.len()
            + application_properties_section.len();
        if header_length > MAX_HEADER_SECTIONS {
            return self.fail(&format!(
                "a message whose annotations and properties take {header_length} bytes (at most {MAX_HEADER_SECTIONS})"
            ));
        }
        let mut message = Message::from_parts_with_header(
            header,
            [
                annotation_entries,
                properties_section,
                application_properties_section,
                body,
            ],
            system,
        );
        let extras = Extras {
            scheduled_enqueue_time: self.opt_i64()?.map(Timestamp),
            original_sequence_number: self.opt_i64()?,
            user_properties: self.properties()?,
            // In transit only: the record's own sequence number is what is stored.
            topic_sequence: None,
            // Used on arrival only: a stored message's partition is in its sequence number.
            partition_key: None,
            dead_letter_source: None,
            extra_properties: Vec::new(),
        };
        message.set_hop_count(self.u8()?);
        let dead_letter_source = self.opt_string()?;
        let extra_properties = self.properties()?;
        if extras.scheduled_enqueue_time.is_some()
            || extras.original_sequence_number.is_some()
            || !extras.user_properties.is_empty()
            || dead_letter_source.is_some()
            || !extra_properties.is_empty()
        {
            message.edit_extras(|kept| {
                *kept = Extras {
                    dead_letter_source,
                    extra_properties,
                    ..extras
                }
            });
        }
        Ok(message)
    }
    pub(crate) fn record(&mut self) -> Result<Record, DecodeError> {
        let message = self.message()?;
        let sequence_number = SequenceNumber(self.i64()?);
        let enqueued_time = Timestamp(self.i64()?);
        let mut record = Record::new(message, sequence_number, enqueued_time, self.duration()?);
        record.set_expires(self.opt_i64()?.is_some());
        record.set_delivery_count(self.u32()?);
        record.set_state(self.state()?);
        // Written by a build that kept them beside the message (none from this one).
        record
            .message
            .merge_application_properties(&self.properties()?);
        Ok(record)
    }
    fn rule(&mut self) -> Result<RuleDefinition, DecodeError> {
        let name = self.string()?;
        let mut filter_parameters = Vec::new();
        let filter = match self.u8()? {
            FILTER_TRUE => FilterDefinition::True,
            FILTER_FALSE => FilterDefinition::False,
            FILTER_SQL => FilterDefinition::Sql(self.string()?),
            FILTER_SQL_WITH_PARAMETERS => {
                let expression = self.string()?;
                filter_parameters = self.parameters()?;
                FilterDefinition::Sql(expression)
            }
            FILTER_CORRELATION => {
                let mut fields: [Option<String>; 8] = Default::default();
                for field in &mut fields {
                    *field = self.opt_string()?;
                }
                FilterDefinition::Correlation {
                    fields,
                    properties: self.properties()?,
                }
            }
            _ => return self.fail("unknown filter kind"),
        };
        let mut action_parameters = Vec::new();
        let action = match self.u8()? {
            ACTION_NONE => None,
            ACTION_SQL => Some(self.string()?),
            ACTION_SQL_WITH_PARAMETERS => {
                let expression = self.string()?;
                action_parameters = self.parameters()?;
                Some(expression)
            }
            _ => return self.fail("unknown rule action kind"),
        };
        Ok(RuleDefinition {
            name,
            filter,
            action,
            filter_parameters,
            action_parameters,
            created_at: self.i64()?,
        })
    }
    fn parameters(&mut self) -> Result<Vec<(String, ParameterValue)>, DecodeError> {
        let count = self.u64()?;
        let mut parameters = Vec::with_capacity(count.min(256) as usize);
        for _ in 0..count {
            let name = self.string()?;
            let value = match self.u8()? {
                PARAMETER_STRING => ParameterValue::String(self.string()?),
                PARAMETER_INT => match i32::try_from(self.i64()?) {
                    Ok(number) => ParameterValue::Int(number),
                    Err(_) => return self.fail("an int parameter out of range"),
                },
                PARAMETER_LONG => ParameterValue::Long(self.i64()?),
                PARAMETER_DOUBLE => {
                    let mut bits = [0u8; 8];
                    for byte in &mut bits {
                        *byte = self.u8()?;
                    }
                    ParameterValue::Double(f64::from_bits(u64::from_le_bytes(bits)))
                }
                PARAMETER_BOOL => ParameterValue::Bool(self.u8()? != 0),
                PARAMETER_DATETIME => ParameterValue::DateTime(self.i64()?),
                PARAMETER_DURATION => ParameterValue::Duration(self.i64()?),
                PARAMETER_GUID => {
                    let mut guid = [0u8; 16];
                    for byte in &mut guid {
                        *byte = self.u8()?;
                    }
                    ParameterValue::Guid(guid)
                }
                _ => return self.fail("unknown parameter type"),
            };
            parameters.push((name, value));
        }
        Ok(parameters)
    }
    fn changes(&mut self) -> Result<Vec<Change>, DecodeError> {
        let count = self.u64()?;
        let mut changes = Vec::with_capacity(count.min(4096) as usize);
        for _ in 0..count {
            let change = match self.u8()? {
                CHANGE_PUT => Change::Put {
                    sub_queue: self.sub_queue()?,
                    record: Box::new(self.record()?),
                },
                CHANGE_UPDATE => Change::Update {
                    sub_queue: self.sub_queue()?,
                    sequence_number: SequenceNumber(self.i64()?),
                    delivery_count: self.u32()?,
                    state: self.state()?,
                    enqueued_time: Timestamp(self.i64()?),
                    expires_at: self.opt_i64()?.map(Timestamp),
                    property_changes: self.properties()?,
                },
                CHANGE_MOVE => Change::Move {
                    from: self.sub_queue()?,
                    to: self.sub_queue()?,
                    sequence_number: SequenceNumber(self.i64()?),
                },
                CHANGE_REMOVE => Change::Remove {
                    sub_queue: self.sub_queue()?,
                    sequence_number: SequenceNumber(self.i64()?),
                },
                CHANGE_NEXT_SEQUENCE => Change::NextSequence(self.i64()?),
                CHANGE_SESSION_STATE => {
                    let session_id = self.string()?;
                    let state = match self.u8()? {
                        0 => None,
                        _ => Some(self.slice()?.to_vec()),
                    };
                    Change::SessionState { session_id, state }
                }
                CHANGE_OUTBOX => {
                    let target = match self.u8()? {
                        0 => OutboxTarget::Forward,
                        1 => OutboxTarget::DeadLetters,
                        2 => OutboxTarget::Via(self.string()?.into()),
                        other => {
                            return Err(DecodeError(format!("unknown outbox target {other}")));
                        }
                    };
                    Change::Outbox {
                        target,
                        record: Box::new(self.record()?),
                    }
                }
                CHANGE_FORWARDED => Change::Forwarded {
                    sequence_number: SequenceNumber(self.i64()?),
                },
                CHANGE_RULE_ADDED => Change::RuleAdded {
                    subscription: self.string()?,
                    rule: Box::new(self.rule()?),
                },
                CHANGE_RULE_REMOVED => Change::RuleRemoved {
                    subscription: self.string()?,
                    name: self.string()?,
                },
                CHANGE_RULES_SET => {
                    let subscription = self.string()?;
                    let count = self.u64()?;
                    let mut rules = Vec::with_capacity(count.min(2048) as usize);
                    for _ in 0..count {
                        rules.push(self.rule()?);
                    }
                    Change::RulesSet {
                        subscription,
                        rules,
                    }
                }
                CHANGE_REMEMBERED => Change::Remembered {
                    message_id: self.string()?,
                    sequence_number: SequenceNumber(self.i64()?),
                    at: Timestamp(self.i64()?),
                },
                CHANGE_RECEIVED => Change::Received {
                    key: ForwardKey {
                        source: self.string()?,
                        sequence_number: SequenceNumber(self.i64()?),
                        enqueued_time: Timestamp(self.i64()?),
                    },
                },
                CHANGE_FORGET_RECEIVED => Change::ForgetReceived {
                    source: self.string()?,
                    below: SequenceNumber(self.i64()?),
                },
                kind => return Err(DecodeError(format!("unknown change kind {kind}"))),
            };
            changes.push(change);
        }
        Ok(changes)
    }
}

#[cfg(test)]
#[path = "codec_tests.rs"]
mod tests;
