//! Message sessions (rules SES-1, SES-2, TTL-9): in a session entity every message belongs
//! to the session named by its session id; a session receiver locks one session and gets
//! only that session's messages, in sequence order. Sessions with available messages and
//! no holder wait in `ready`, ordered by their oldest available message, so next-available
//! selection is a lookup, not a scan of all sessions.

use std::collections::BTreeSet;
use std::time::Duration;

use super::{Deadline, Effect, EntityState, Record};
use crate::broker::types::{EntityError, ReceiverId, SequenceNumber, SubQueue, Timestamp};

/// The .NET `DateTime.MaxValue` sentinel Python sends for "sessions with messages or state".
const LAST_UPDATED_ANY: i64 = 253_402_300_800_000;

/// One session of a session entity.
#[derive(Debug, Default)]
pub struct SessionEntry {
    /// Active, unlocked messages of this session, in order.
    pub(super) available: super::log::Available,
    /// The receiver holding the session lock.
    pub(super) holder: Option<ReceiverId>,
    /// When the session lock lapses.
    pub(super) locked_until: Timestamp,
    /// Last state change or lock, for `get-message-sessions`.
    pub(super) last_updated: Timestamp,
    /// The key under which the session sits in `ready`, if it does.
    pub(super) ready_key: Option<u64>,
}

impl EntityState {
    /// The session id of a main-queue record, for session entities.
    pub(super) fn session_of(&self, sequence_number: SequenceNumber) -> Option<String> {
        if !self.settings.requires_session {
            return None;
        }
        self.log
            .get(SubQueue::Main, sequence_number)
            .and_then(|record| record.message.system().session_id().map(str::to_string))
    }

    /// Keeps `ready` consistent with a session's lock and available messages.
    pub(super) fn refresh_ready(&mut self, session_id: &str) {
        let Some(entry) = self.sessions.get_mut(session_id) else {
            return;
        };
        if let Some(key) = entry.ready_key.take() {
            self.ready.remove(&(key, session_id.to_string()));
        }
        if entry.holder.is_none()
            && let Some(first) = entry.available.first()
        {
            let key = super::log::delivery_order(first);
            entry.ready_key = Some(key);
            self.ready.insert((key, session_id.to_string()));
        }
    }

    /// Marks a main-queue record of a session entity available within its session.
    pub(super) fn session_make_available(&mut self, sequence_number: SequenceNumber) {
        let Some(session_id) = self.session_of(sequence_number) else {
            return;
        };
        let entry = self.sessions.entry(session_id.clone()).or_default();
        entry.available.insert(sequence_number);
        if entry.holder.is_some() {
            self.dirty_sessions.insert(session_id.clone());
        }
        self.refresh_ready(&session_id);
    }

    /// Removes a record from its session's available set.
    pub(super) fn session_remove_available(&mut self, sequence_number: SequenceNumber) {
        let Some(session_id) = self.session_of(sequence_number) else {
            return;
        };
        if let Some(entry) = self.sessions.get_mut(&session_id) {
            entry.available.remove(&sequence_number);
        }
        self.refresh_ready(&session_id);
    }

    /// Locks `session_id` for `receiver` (rule SES-2).
    fn lock_session(
        &mut self,
        now: Timestamp,
        receiver: ReceiverId,
        session_id: &str,
    ) -> Timestamp {
        let until = now.plus(self.settings.lock_duration);
        let entry = self.sessions.entry(session_id.to_string()).or_default();
        entry.holder = Some(receiver);
        entry.locked_until = until;
        entry.last_updated = now;
        self.deadlines
            .insert((until, Deadline::SessionLock(receiver)));
        if let Some(state) = self.receivers.get_mut(&receiver) {
            state.session = Some(session_id.to_string());
            state.session_wait_until = None;
        }
        self.dirty_sessions.insert(session_id.to_string());
        self.refresh_ready(session_id);
        self.effects.push(Effect::SessionAccepted {
            receiver,
            session_id: session_id.to_string(),
            locked_until: until,
        });
        until
    }

    /// Attaches a session receiver: for a named session, locks it or refuses with
    /// `SessionCannotBeLocked`; for next-available, locks the session with the oldest
    /// available message, or waits up to `wait` for one. The outcome arrives as
    /// `Effect::SessionAccepted` or `Effect::SessionRefused`.
    pub fn attach_session_receiver(
        &mut self,
        now: Timestamp,
        receiver: ReceiverId,
        mode: crate::broker::types::ReceiveMode,
        requested: Option<String>,
        wait: Duration,
    ) {
        // Activity first: a command arriving at the idle deadline keeps the entity.
        self.touch(now);
        self.advance(now);
        if !self.settings.requires_session {
            self.effects.push(Effect::SessionRefused {
                receiver,
                error: EntityError::NotAllowed(format!(
                    "The entity '{}' does not require sessions: attach without a session filter.",
                    self.settings.path
                )),
            });
            return;
        }
        self.attach_receiver(now, receiver, SubQueue::Main, mode);
        // Session receivers are served through their session, not the round-robin (they
        // never enter `ready_receivers`: they have no credit yet and hold no session).
        match requested {
            Some(session_id) => {
                let held = self
                    .sessions
                    .get(&session_id)
                    .is_some_and(|entry| entry.holder.is_some());
                if held {
                    self.detach_receiver(now, receiver);
                    self.effects.push(Effect::SessionRefused {
                        receiver,
                        error: EntityError::SessionCannotBeLocked(format!(
                            "The requested session '{session_id}' cannot be accepted. It may be locked by another receiver."
                        )),
                    });
                } else {
                    self.lock_session(now, receiver, &session_id);
                }
            }
            None => {
                let until = now.plus(wait);
                if let Some(state) = self.receivers.get_mut(&receiver) {
                    state.session_wait_until = Some(until);
                }
                self.waiters.push_back(receiver);
                self.deadlines
                    .insert((until, Deadline::SessionWait(receiver)));
                self.assign_waiting_sessions(now);
            }
        }
    }

    /// Gives ready sessions to next-available receivers, oldest waiter first.
    pub(super) fn assign_waiting_sessions(&mut self, now: Timestamp) {
        while !self.waiters.is_empty() {
            let Some((_, session_id)) = self.ready.first().cloned() else {
                return;
            };
            let Some(receiver) = self.waiters.pop_front() else {
                return;
            };
            let waiting = self
                .receivers
                .get(&receiver)
                .is_some_and(|state| state.session_wait_until.is_some());
            if waiting {
                self.lock_session(now, receiver, &session_id);
            }
        }
    }

    /// A next-available wait ran out: refuse with a timeout.
    pub(super) fn session_wait_expired(&mut self, now: Timestamp, receiver: ReceiverId) {
        let expired = self
            .receivers
            .get(&receiver)
            .and_then(|state| state.session_wait_until)
            .is_some_and(|until| until <= now);
        if !expired {
            return;
        }
        self.waiters.retain(|waiting| *waiting != receiver);
        self.detach_receiver(now, receiver);
        self.effects.push(Effect::SessionRefused {
            receiver,
            error: EntityError::Timeout(
                "No unlocked session with messages became available in time.".to_string(),
            ),
        });
    }

    /// A session lock lapsed: the session and its message locks are released (delivery
    /// count + 1) and the receiver is told (rule SES-2).
    pub(super) fn session_lock_expired(&mut self, now: Timestamp, receiver: ReceiverId) {
        let Some(session_id) = self
            .receivers
            .get(&receiver)
            .and_then(|state| state.session.clone())
        else {
            return;
        };
        let lapsed = self
            .sessions
            .get(&session_id)
            .is_some_and(|entry| entry.holder == Some(receiver) && entry.locked_until <= now);
        if !lapsed {
            return;
        }
        self.release_session(now, &session_id);
        if let Some(state) = self.receivers.get_mut(&receiver) {
            state.session = None;
            state.credit = 0;
        }
        self.effects.push(Effect::SessionLost { receiver });
    }

    /// Releases a session: no holder, and its locked messages return with delivery count + 1.
    pub(super) fn release_session(&mut self, now: Timestamp, session_id: &str) {
        if let Some(entry) = self.sessions.get_mut(session_id) {
            entry.holder = None;
            entry.last_updated = now;
        }
        let locked: Vec<_> = self
            .held
            .keys()
            .filter(|(sub_queue, sequence_number)| {
                *sub_queue == SubQueue::Main
                    && self.session_of(*sequence_number).as_deref() == Some(session_id)
            })
            .copied()
            .collect();
        for (sub_queue, sequence_number) in locked {
            self.set_lock(SubQueue::Main, sequence_number, None);
            self.count_failed_delivery(now, sub_queue, sequence_number);
        }
        self.refresh_ready(session_id);
    }

    /// Whether `receiver` currently holds the session of the main-queue record.
    pub(super) fn session_lock_held(
        &self,
        now: Timestamp,
        sequence_number: SequenceNumber,
    ) -> bool {
        let Some(session_id) = self.session_of(sequence_number) else {
            return true;
        };
        self.sessions
            .get(&session_id)
            .is_some_and(|entry| entry.holder.is_some() && entry.locked_until > now)
    }

    fn held_session(
        &mut self,
        now: Timestamp,
        session_id: &str,
    ) -> Result<&mut SessionEntry, EntityError> {
        match self.sessions.get_mut(session_id) {
            Some(entry) if entry.holder.is_some() && entry.locked_until > now => Ok(entry),
            _ => Err(EntityError::SessionLockLost(format!(
                "The session lock has expired on the session '{session_id}'. Accept a new session."
            ))),
        }
    }

    /// Extends a session lock (`renew-session-lock`).
    pub fn renew_session_lock(
        &mut self,
        now: Timestamp,
        session_id: &str,
    ) -> Result<Timestamp, EntityError> {
        // Activity first: a command arriving at the idle deadline keeps the entity.
        self.touch(now);
        self.advance(now);
        let until = now.plus(self.settings.lock_duration);
        let entry = self.held_session(now, session_id)?;
        entry.locked_until = until;
        let holder = entry.holder;
        // The session's message locks are extended with it (the SDKs cannot renew them).
        let tokens: Vec<_> = self
            .held
            .iter()
            .filter(|((sub_queue, sequence_number), _)| {
                *sub_queue == SubQueue::Main
                    && self.session_of(*sequence_number).as_deref() == Some(session_id)
            })
            .map(|((_, sequence_number), lock)| (lock.token, *sequence_number))
            .collect();
        for (token, sequence_number) in tokens {
            if self.extend_lock(SubQueue::Main, sequence_number, until) {
                self.arm_lock(until, token);
            }
        }
        if let Some(receiver) = holder {
            self.deadlines
                .insert((until, Deadline::SessionLock(receiver)));
        }
        Ok(until)
    }

    /// Sets a session's state (`set-session-state`); the session must be locked.
    pub fn set_session_state(
        &mut self,
        now: Timestamp,
        session_id: &str,
        state: Option<Vec<u8>>,
    ) -> Result<(), EntityError> {
        // Activity first: a command arriving at the idle deadline keeps the entity.
        self.touch(now);
        self.advance(now);
        let entry = self.held_session(now, session_id)?;
        entry.last_updated = now;
        self.log.set_session_state(session_id, state);
        Ok(())
    }

    /// Reads a session's state (`get-session-state`); the session must be locked.
    pub fn session_state(
        &mut self,
        now: Timestamp,
        session_id: &str,
    ) -> Result<Option<Vec<u8>>, EntityError> {
        // Activity first: a command arriving at the idle deadline keeps the entity.
        self.touch(now);
        self.advance(now);
        self.held_session(now, session_id)?;
        Ok(self.log.session_state(session_id).cloned())
    }

    /// Sessions with messages or state (`get-message-sessions`), or, for a real
    /// `last_updated` time, sessions updated since then.
    pub fn message_sessions(
        &mut self,
        now: Timestamp,
        last_updated: i64,
        skip: usize,
        top: usize,
    ) -> Vec<String> {
        self.advance(now);
        let mut with_messages: BTreeSet<String> = self
            .log
            .records(SubQueue::Main)
            .values()
            .filter_map(|record: &Record| record.message.system().session_id().map(str::to_string))
            .collect();
        with_messages.extend(self.log.session_states().keys().cloned());
        with_messages
            .into_iter()
            .filter(|session_id| {
                last_updated >= LAST_UPDATED_ANY
                    || self
                        .sessions
                        .get(session_id)
                        .is_some_and(|entry| entry.last_updated.0 >= last_updated)
            })
            .skip(skip)
            .take(top)
            .collect()
    }

    /// Expires every available message of a session once one of them has expired, while
    /// a receiver is active on it (rule TTL-9).
    pub(super) fn expire_session(&mut self, now: Timestamp, session_id: &str) {
        let members: Vec<SequenceNumber> = self
            .sessions
            .get(session_id)
            .map(|entry| entry.available.iter().collect())
            .unwrap_or_default();
        for sequence_number in members {
            self.session_remove_available(sequence_number);
            self.expire(now, sequence_number);
        }
    }
}
