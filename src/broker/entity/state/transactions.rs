//! Transactions (rules TXN-1..4): what a client did under one transaction on this entity —
//! sends, settlements of messages it locked, and sends through this entity to another
//! (send-via) — is checked whole and applied whole in one call, so it lands in one turn
//! and one durable log record, or not at all. Until the commit the connection holds the
//! work and the entity knows nothing of it: a lock settled in a transaction stays held.

use std::collections::HashSet;

use super::*;

/// A transaction's work on one entity, in the order the client did it.
#[derive(Debug, Default)]
pub struct TransactionWork {
    /// Messages sent to this entity.
    pub sends: Vec<Message>,
    /// Messages sent through this entity to another (send-via): destination path, message.
    /// They wait in this entity's outbox until the destination has them (rule TXN-3).
    pub via: Vec<(Arc<str>, Message)>,
    /// Settlements of messages this entity locked.
    pub settlements: Vec<(LockToken, Settlement)>,
}

impl TransactionWork {
    /// How many operations it holds (the cloud's limit per transaction counts them).
    pub fn operations(&self) -> usize {
        self.sends.len() + self.via.len() + self.settlements.len()
    }
}

impl EntityState {
    /// Commits a transaction's work (rule TXN-1): every settlement's lock must still be
    /// held and every message must fit, else nothing changes and the first problem is the
    /// error. Returns the sequence numbers of the messages sent to this entity.
    pub fn commit_transaction(
        &mut self,
        now: Timestamp,
        work: TransactionWork,
    ) -> Result<super::super::SequenceNumbers, EntityError> {
        self.touch(now);
        self.advance(now);
        let mut tokens = HashSet::new();
        for (token, _) in &work.settlements {
            let locked = self.locked(now, *token).filter(|_| tokens.insert(*token));
            let Some((sub_queue, sequence_number)) = locked else {
                return Err(if self.settings.requires_session {
                    EntityError::SessionLockLost(
                        "The session lock was lost; accept the session again.".to_string(),
                    )
                } else {
                    EntityError::LockLost
                });
            };
            if sub_queue == SubQueue::Main && !self.session_lock_held(now, sequence_number) {
                return Err(EntityError::SessionLockLost(
                    "The session lock was lost; accept the session again.".to_string(),
                ));
            }
        }
        let via_bytes = work
            .via
            .iter()
            .map(|(_, message)| message.size() as u64)
            .sum();
        self.admit(&work.sends, via_bytes)?;
        // Checked: nothing below can fail.
        for (token, settlement) in work.settlements {
            self.settle(now, token, settlement)?;
        }
        let numbers = if work.sends.is_empty() {
            Default::default()
        } else {
            self.enqueue(now, work.sends)?
        };
        for (destination, message) in work.via {
            let sequence_number = self.allocate_sequence_number();
            self.stored_bytes += message.size() as u64;
            let record = self.arrival_record(message, sequence_number, now);
            self.send_through_outbox(record, OutboxTarget::Via(destination));
        }
        Ok(numbers)
    }
}
