//! A turn's way to the log: sealing a turn (its changes appended, its replies, dispositions
//! and deliveries held), keeping up to [`TURNS_IN_FLIGHT`] on their way at once, and
//! releasing them in order once each is durable — or, after a failed write, failing it and
//! every later one (sends withdrawn, deliveries taken back).

use std::collections::VecDeque;
use std::task::Poll;

use tokio::sync::mpsc;

use super::super::state::{Change, Effect};
use super::super::{Delivery, Notification, Reply};
use super::{Actor, HeldBatch};
use crate::broker::forwarder::Forward;
use crate::broker::storage::{Durable, StorageError};
use crate::broker::types::{EntityError, ReceiverId, SequenceNumber, SubQueue, Timestamp};

/// Hands a staged turn's changes to the topic that writes them (see
/// [`Command::Stage`](super::super::Command::Stage)) and waits for its word on whether they
/// are durable.
pub(super) async fn hand_over(
    topic: super::super::StagedSender,
    key: &str,
    changes: Vec<Change>,
) -> Result<(), StorageError> {
    let (durable, answer) = tokio::sync::oneshot::channel();
    let staged = super::super::Staged {
        entity: key.to_string(),
        changes,
        durable,
    };
    let sent = topic.send(staged);
    // The topic reads staged turns until every entity it staged with lets go of its sender.
    drop(topic);
    if sent.is_err() {
        return Err(StorageError::Failed(
            "the topic that published the copies is gone".to_string(),
        ));
    }
    answer.await.unwrap_or_else(|_| {
        Err(StorageError::Failed(
            "the topic that published the copies stopped before storing them".to_string(),
        ))
    })
}

/// Most turns one entity has on their way to the log at once: while one is being written,
/// the next ones are handled and sealed, and their writes share the group's next entries.
pub(super) const TURNS_IN_FLIGHT: usize = 8;

/// A sealed turn: its write to the log, and what goes out once it is durable.
pub(super) struct Turn {
    /// The write, until it is settled (`None`: nothing to write, or settled).
    durable: Option<Durable<'static>>,
    /// How the write went, once it is settled.
    outcome: Option<Result<(), StorageError>>,
    /// Replies held until the turn is durable.
    replies: Vec<(super::super::ReplyTo, Result<Reply, EntityError>)>,
    /// Batched sends' replies held until the turn is durable.
    batches: Vec<HeldBatch>,
    /// Deliveries, forwards and notifications held until the turn is durable.
    effects: Vec<Effect>,
    /// [`Actor::forward_details`] of the forwards among `effects`.
    forwards: Vec<(Timestamp, SequenceNumber)>,
}

/// A delivery that did not go out: its receiver, the delivery, and whether the receiver's
/// connection is gone.
type Returned = (ReceiverId, Delivery, bool);

/// Waits until the oldest turn's write is settled and takes it. Every write still unsettled
/// is polled, oldest first, so that they reach the log in the order they were sealed.
pub(super) async fn next_durable(turns: &mut VecDeque<Turn>) -> Turn {
    std::future::poll_fn(|context| {
        for turn in turns.iter_mut() {
            if let Some(durable) = &mut turn.durable
                && let Poll::Ready(outcome) = durable.as_mut().poll(context)
            {
                turn.durable = None;
                turn.outcome = Some(outcome);
            }
        }
        match turns.front() {
            Some(turn) if turn.outcome.is_some() => {
                Poll::Ready(turns.pop_front().expect("a turn is in front"))
            }
            _ => Poll::Pending,
        }
    })
    .await
}

impl Actor {
    /// Ends a turn: its changes go to the log (group commit with every other entity's),
    /// and its replies, dispositions and deliveries wait in [`Actor::turns`] until they are
    /// durable and every earlier turn has been released. The actor meanwhile takes the next
    /// commands. In memory everything goes out at once.
    pub(super) fn seal(&mut self) {
        let Some((storage, key)) = &self.storage else {
            // In memory: effects that change the state again (a delivery returned because
            // its connection is gone) are carried out until none is left.
            loop {
                let effects = self.state.take_effects();
                let forwards = self.forward_details(&effects);
                let (idle, returned) = self.carry_out_effects(effects, forwards, None);
                self.idle |= idle;
                if returned.is_empty() {
                    return;
                }
                self.take_back(returned, &[]);
            }
        };
        let changes = self.state.take_changes();
        if changes.is_empty()
            && self.held_replies.is_empty()
            && self.held_batches.is_empty()
            && !self.state.has_effects()
        {
            return;
        }
        let effects = self.state.take_effects();
        let forwards = self.forward_details(&effects);
        let (durable, outcome) = if changes.is_empty() {
            (None, Some(Ok(())))
        } else {
            (Some(storage.append_owned(key, changes)), None)
        };
        self.turns.push_back(Turn {
            durable,
            outcome,
            replies: std::mem::take(&mut self.held_replies),
            batches: std::mem::take(&mut self.held_batches),
            effects,
            forwards,
        });
    }

    /// A turn holding a topic's staged copies: the topic writes its changes with the rest
    /// of the publish; released once the topic says they are durable (no turn is on its
    /// way to the log then). Returns whether the next turn may be sealed at once (false
    /// after a failure, as [`Actor::release`]).
    pub(super) async fn commit_staged(&mut self) -> bool {
        let Some(topic) = self.staging.take() else {
            return true;
        };
        let Some((_, key)) = &self.storage else {
            return true;
        };
        let changes = self.state.take_changes();
        let outcome = hand_over(topic, key, changes).await;
        let effects = self.state.take_effects();
        let forwards = self.forward_details(&effects);
        let turn = Turn {
            durable: None,
            outcome: Some(outcome),
            replies: std::mem::take(&mut self.held_replies),
            batches: std::mem::take(&mut self.held_batches),
            effects,
            forwards,
        };
        self.release(turn)
    }

    /// Releases every turn on its way to the log, in order, and what they give rise to.
    pub(super) async fn drain(&mut self) {
        while !self.turns.is_empty() {
            let turn = next_durable(&mut self.turns).await;
            if self.release(turn) {
                self.seal();
            }
        }
    }

    /// Releases the oldest turn once its write is settled: its replies, dispositions and
    /// deliveries go out. A failed write fails this turn and every later one on its way
    /// (they were built on it; whatever of them the log may still keep, nothing of them
    /// is acknowledged): each successful reply is answered with the storage error, their
    /// sends are withdrawn, their deliveries taken back. Returns false after a failure.
    pub(super) fn release(&mut self, mut turn: Turn) -> bool {
        let error = match turn.outcome.take() {
            Some(Ok(())) | None => None,
            Some(Err(error)) => Some(error),
        };
        let Some(error) = error else {
            for (reply, result) in turn.replies {
                reply.send(result);
            }
            for (sink, replies) in turn.batches {
                let _ = sink.send(Notification::Replies { replies });
            }
            let (idle, returned) = self.carry_out_effects(turn.effects, turn.forwards, None);
            self.idle |= idle;
            self.take_back(returned, &[]);
            return true;
        };
        let key = self.storage.as_ref().map_or("", |(_, key)| key.as_str());
        tracing::error!(entity = %key, %error, "cannot make a change durable; the operation is refused");
        let failure = match error {
            StorageError::NoSpace(text) => EntityError::StorageFull(format!(
                "The broker's disk is full; nothing was stored: {text}"
            )),
            other => EntityError::StorageFailed(format!(
                "The broker could not store the operation durably: {other}"
            )),
        };
        let mut failed = vec![turn];
        failed.extend(self.turns.drain(..));
        let mut withdrawn = Vec::new();
        let mut returned = Vec::new();
        for turn in failed {
            let batched = turn.batches.iter().flat_map(|(_, replies)| replies);
            for result in turn
                .replies
                .iter()
                .map(|(_, result)| result)
                .chain(batched.map(|(_, result)| result))
            {
                if let Ok(Reply::SequenceNumbers(numbers)) = result {
                    withdrawn.extend(numbers.iter().copied());
                }
            }
            for (reply, result) in turn.replies {
                reply.send(result.and(Err(failure.clone())));
            }
            for (sink, mut replies) in turn.batches {
                for (_, result) in &mut replies {
                    if result.is_ok() {
                        *result = Err(failure.clone());
                    }
                }
                let _ = sink.send(Notification::Replies { replies });
            }
            let (idle, taken) = self.carry_out_effects(turn.effects, turn.forwards, Some(&failure));
            self.idle |= idle;
            returned.extend(taken);
        }
        // Sends of these turns were refused: their messages must not be delivered.
        self.state.withdraw(&withdrawn);
        self.take_back(returned, &withdrawn);
        false
    }

    /// For each forward among `effects`, in order: the entry's enqueued time in the outbox
    /// and the lowest number left in the outbox, read now, when the state is what the
    /// turn's record makes durable (a later turn may forward more before this one is).
    fn forward_details(&self, effects: &[Effect]) -> Vec<(Timestamp, SequenceNumber)> {
        if self.forwarder.is_none() {
            return Vec::new();
        }
        effects
            .iter()
            .filter_map(|effect| match effect {
                Effect::Forward {
                    sequence_number, ..
                } => {
                    let enqueued_time = self
                        .state
                        .log()
                        .outbox()
                        .get(sequence_number)
                        .map_or(Timestamp(0), |(record, _)| record.enqueued_time());
                    let floor = self.state.outbox_floor().unwrap_or(*sequence_number);
                    Some((enqueued_time, floor))
                }
                _ => None,
            })
            .collect()
    }

    /// Takes back deliveries that did not go out (their connection is gone, or their turn
    /// failed): the messages are available again. A message whose send was `withdrawn`
    /// stays gone; its receiver gets back the credit it spent on it.
    fn take_back(&mut self, returned: Vec<Returned>, withdrawn: &[SequenceNumber]) {
        if returned.is_empty() {
            return;
        }
        let now = self.clock.now();
        for (receiver, delivery, gone) in returned {
            if gone {
                self.state.detach_receiver(now, receiver);
            }
            let receiver = (!gone).then_some(receiver);
            if delivery.sub_queue != SubQueue::TransferDeadLetter
                && withdrawn.contains(&delivery.record.sequence_number)
            {
                self.state.forget_undelivered(receiver);
            } else {
                // Not sent: the receiver keeps the credit it spent on it.
                self.state.return_undelivered(
                    now,
                    receiver,
                    delivery.sub_queue,
                    delivery.record,
                    delivery.lock,
                );
            }
        }
    }

    /// Carries out a turn's effects (`forwards`: [`Actor::forward_details`] of them);
    /// returns whether the entity must be deleted, and the deliveries to take back (their
    /// connection is gone). After a failed write (`failure`) every delivery is taken back
    /// instead of sent: nothing leaves that the log does not have.
    fn carry_out_effects(
        &mut self,
        mut effects: Vec<Effect>,
        forwards: Vec<(Timestamp, SequenceNumber)>,
        failure: Option<&EntityError>,
    ) -> (bool, Vec<Returned>) {
        let mut idle = false;
        let mut returned = Vec::new();
        let mut forwards = forwards.into_iter();
        for effect in effects.drain(..) {
            match effect {
                Effect::Deliver(delivery) if failure.is_some() => {
                    if let Some(receiver) = delivery.receiver {
                        returned.push((receiver, delivery, false));
                    }
                }
                Effect::Deliver(delivery) => {
                    let Some(receiver) = delivery.receiver else {
                        continue;
                    };
                    let undelivered = match self.sinks.get(&receiver) {
                        Some(sink) => match sink.send(Notification::Deliver(delivery)) {
                            Ok(()) => None,
                            Err(mpsc::error::SendError(Notification::Deliver(delivery))) => {
                                Some(delivery)
                            }
                            Err(_) => None,
                        },
                        None => Some(delivery),
                    };
                    if let Some(delivery) = undelivered {
                        // The connection is gone: take the message back (no loss, no
                        // delivery counted) and stop serving that receiver.
                        returned.push((receiver, delivery, true));
                        self.sinks.remove(&receiver);
                    }
                }
                Effect::Drained {
                    receiver,
                    delivery_count,
                } => {
                    if let Some(sink) = self.sinks.get(&receiver) {
                        let _ = sink.send(Notification::Drained {
                            receiver,
                            delivery_count,
                        });
                    }
                }
                Effect::Fenced { receiver } => {
                    if let Some(sink) = self.sinks.get(&receiver) {
                        let _ = sink.send(Notification::Fenced { receiver });
                    }
                }
                Effect::DeadLettered { .. } => {}
                Effect::Idle => idle = true,
                Effect::SessionAccepted {
                    receiver,
                    session_id,
                    locked_until,
                } => self.notify(
                    receiver,
                    Notification::SessionAccepted {
                        receiver,
                        session_id,
                        locked_until,
                    },
                ),
                Effect::SessionRefused { receiver, error } => {
                    self.notify(receiver, Notification::SessionRefused { receiver, error });
                    self.sinks.remove(&receiver);
                }
                Effect::SessionLost { receiver } => {
                    self.notify(receiver, Notification::SessionLost { receiver })
                }
                Effect::Forward {
                    message,
                    sequence_number,
                    target,
                } => {
                    if let Some(forwarder) = &self.forwarder {
                        let (enqueued_time, floor) =
                            forwards.next().unwrap_or((Timestamp(0), sequence_number));
                        // Only what is durable may be forgotten: after a failed write the
                        // head may be ahead of the log.
                        let floor = match failure {
                            None => floor,
                            Some(_) => SequenceNumber(i64::MIN),
                        };
                        let _ = forwarder.send(Forward {
                            message,
                            sequence_number,
                            enqueued_time,
                            floor,
                            target,
                        });
                    }
                }
            }
        }
        // Its room serves the next turn's effects (issue 16: grown again every turn).
        self.state.recycle_effects(effects);
        (idle, returned)
    }
}
