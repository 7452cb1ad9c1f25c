//! The actor shell around [`EntityState`]: receives commands, reads the clock, runs the
//! pure core, and carries out its effects. One timer is kept armed to the core's earliest
//! deadline (lock expiry, message expiry, scheduled activation); there is no polling.

use std::collections::HashMap;

use tokio::sync::{mpsc, watch};

use super::settings::EntitySettings;
use super::state::{Effect, EntityState, Record};
use super::{
    Command, Delivery, EntityHandle, Notification, NotificationSender, Reply, SessionOperation,
};
use crate::broker::budget::MemoryBudget;
use crate::broker::forwarder::{Forward, ForwardSender};
use crate::broker::lifecycle::{Lifecycle, stopped};
use crate::broker::types::{EntityError, ReceiverId, SubQueue};
use crate::clock::Clock;
use std::sync::Arc;

/// A management reply carrying records of `sub_queue` (peek, deferred receive).
fn messages(sub_queue: SubQueue, records: Vec<Record>) -> Reply {
    Reply::Messages(
        records
            .into_iter()
            .map(|record| Delivery {
                sub_queue,
                receiver: None,
                record,
            })
            .collect(),
    )
}

/// Commands an entity may have queued before senders wait.
const COMMAND_CAPACITY: usize = 1024;

/// Where an idle entity reports that it deleted itself (its path).
pub type IdleSender = mpsc::UnboundedSender<String>;

/// Starts the actor for one entity and returns its handle.
pub fn spawn(
    settings: EntitySettings,
    clock: Clock,
    token_seed: u64,
    on_idle: IdleSender,
    forwarder: Option<ForwardSender>,
    budget: Arc<MemoryBudget>,
    lifecycle: &Lifecycle,
) -> EntityHandle {
    let (commands, inbox) = mpsc::channel(COMMAND_CAPACITY);
    let handle = EntityHandle {
        path: settings.path.as_str().into(),
        commands,
    };
    let actor = Actor {
        state: EntityState::new(settings, token_seed, clock.now()),
        clock,
        sinks: HashMap::new(),
        on_idle,
        forwarder,
        budget,
        charged: 0,
    };
    lifecycle.spawn(actor.run(inbox, lifecycle.stopping()));
    handle
}

/// The task state.
struct Actor {
    /// The pure core.
    state: EntityState,
    /// Wall-clock source.
    clock: Clock,
    /// Where each receiver's deliveries go.
    sinks: HashMap<ReceiverId, NotificationSender>,
    /// Told when the entity deletes itself for idleness.
    on_idle: IdleSender,
    /// Takes messages to auto-forward, when the entity forwards.
    forwarder: Option<ForwardSender>,
    /// The broker-wide memory budget this entity's stored bytes are charged to.
    budget: Arc<MemoryBudget>,
    /// What this entity has charged to it.
    charged: u64,
}

impl Actor {
    async fn run(
        mut self,
        mut inbox: mpsc::Receiver<Command>,
        mut stopping: watch::Receiver<bool>,
    ) {
        loop {
            let deadline = self.state.next_deadline();
            let timer = async {
                match deadline {
                    Some(at) => tokio::time::sleep_until(self.clock.instant_at(at)).await,
                    None => std::future::pending::<()>().await,
                }
            };
            tokio::select! {
                command = inbox.recv() => {
                    let Some(command) = command else { break };
                    self.handle(command);
                    self.recharge();
                    // Take whatever else is queued before flushing effects.
                    while let Ok(command) = inbox.try_recv() {
                        self.handle(command);
                        self.recharge();
                    }
                }
                () = timer => {
                    let now = self.clock.now();
                    self.state.advance(now);
                }
                () = stopped(&mut stopping) => break,
            }
            let deleted = self.carry_out_effects();
            self.recharge();
            if deleted {
                // Deleted for idleness (rule IDL-1): stop taking commands, answer the ones
                // already queued with not-found, and stop; handles then report not-found.
                let _ = self.on_idle.send(self.state.settings().path.clone());
                inbox.close();
                while let Some(command) = inbox.recv().await {
                    self.refuse(command);
                }
                break;
            }
        }
        // The entity is gone: what it stored no longer counts.
        self.budget.recharge(self.charged, 0);
    }

    /// Brings this entity's charge on the memory budget up to date.
    fn recharge(&mut self) {
        let stored = self.state.stored_bytes();
        if stored != self.charged {
            self.budget.recharge(self.charged, stored);
            self.charged = stored;
        }
    }

    fn handle(&mut self, command: Command) {
        let now = self.clock.now();
        match command {
            Command::Send { messages, reply } => {
                let incoming: u64 = messages.iter().map(|message| message.size() as u64).sum();
                if let Err(used) = self.budget.admit(incoming) {
                    if let Some(reply) = reply {
                        reply.send(Err(EntityError::QuotaExceeded {
                            entity: "the broker's memory budget (server.memory_budget)".into(),
                            size: used,
                            limit: self.budget.limit(),
                        }));
                    }
                    return;
                }
                let result = self.state.enqueue(now, messages);
                if let Some(reply) = reply {
                    reply.send(result.map(Reply::SequenceNumbers));
                }
            }
            Command::TransferDeadLetter {
                message,
                reason,
                description,
            } => self
                .state
                .enqueue_transfer_dead_lettered(now, message, reason, description),
            Command::Return {
                receiver,
                sub_queue,
                record,
            } => self
                .state
                .return_undelivered(now, receiver, sub_queue, *record),
            Command::DeadLetterOnArrival { messages } => {
                for (message, reason, description) in messages {
                    self.state
                        .enqueue_dead_lettered(now, message, reason, description);
                }
            }
            Command::AttachReceiver {
                receiver,
                sub_queue,
                mode,
                sink,
            } => {
                self.sinks.insert(receiver, sink);
                self.state.attach_receiver(now, receiver, sub_queue, mode);
            }
            Command::AttachSessionReceiver {
                receiver,
                mode,
                session_id,
                wait,
                sink,
            } => {
                self.sinks.insert(receiver, sink);
                self.state
                    .attach_session_receiver(now, receiver, mode, session_id, wait);
            }
            Command::Session {
                session_id,
                operation,
                reply,
            } => {
                let result = match operation {
                    SessionOperation::RenewLock => self
                        .state
                        .renew_session_lock(now, &session_id)
                        .map(|until| Reply::Expirations(vec![until])),
                    SessionOperation::SetState(state) => self
                        .state
                        .set_session_state(now, &session_id, state)
                        .map(|()| Reply::Done),
                    SessionOperation::GetState => self
                        .state
                        .session_state(now, &session_id)
                        .map(Reply::SessionState),
                };
                reply.send(result);
            }
            Command::ListSessions {
                last_updated,
                skip,
                top,
                reply,
            } => {
                let sessions = self.state.message_sessions(now, last_updated, skip, top);
                reply.send(Ok(Reply::Sessions(sessions)));
            }
            Command::DetachReceiver { receiver } => {
                // Deliveries already sent to this receiver's connection precede this
                // notification; later ones are returned here (no sink).
                if let Some(sink) = self.sinks.remove(&receiver) {
                    let _ = sink.send(Notification::ReceiverDetached { receiver });
                }
                self.state.detach_receiver(now, receiver);
            }
            Command::Credit {
                receiver,
                delivery_count,
                link_credit,
                drain,
            } => self
                .state
                .grant_credit(now, receiver, delivery_count, link_credit, drain),
            Command::Settle {
                token,
                settlement,
                reply,
            } => {
                let result = self.state.settle(now, token, settlement);
                if let Some(reply) = reply {
                    reply.send(result.map(|()| Reply::Done));
                }
            }
            Command::Peek {
                sub_queue,
                from,
                count,
                session_id,
                reply,
            } => {
                let records = self
                    .state
                    .peek(now, sub_queue, from, count, session_id.as_deref());
                reply.send(Ok(messages(sub_queue, records)));
            }
            Command::ReceiveDeferred {
                sub_queue,
                sequence_numbers,
                mode,
                reply,
            } => {
                let result = self
                    .state
                    .receive_deferred(now, sub_queue, &sequence_numbers, mode)
                    .map(|records| messages(sub_queue, records));
                reply.send(result);
            }
            Command::CancelScheduled {
                sequence_numbers,
                reply,
            } => {
                self.state.cancel_scheduled(now, &sequence_numbers);
                reply.send(Ok(Reply::Done));
            }
            Command::RenewLocks { tokens, reply } => {
                let result: Result<Vec<_>, _> = tokens
                    .into_iter()
                    .map(|token| self.state.renew_lock(now, token))
                    .collect();
                reply.send(result.map(Reply::Expirations));
            }
        }
    }

    /// Answers a command that arrived after the entity deleted itself.
    fn refuse(&self, command: Command) {
        let gone = EntityError::NotFound(self.state.settings().path.clone());
        match command {
            Command::Send {
                reply: Some(reply), ..
            }
            | Command::Settle {
                reply: Some(reply), ..
            }
            | Command::RenewLocks { reply, .. }
            | Command::Peek { reply, .. }
            | Command::ReceiveDeferred { reply, .. }
            | Command::CancelScheduled { reply, .. }
            | Command::Session { reply, .. }
            | Command::ListSessions { reply, .. } => reply.send(Err(gone)),
            Command::AttachSessionReceiver { receiver, sink, .. } => {
                let _ = sink.send(Notification::SessionRefused {
                    receiver,
                    error: gone,
                });
            }
            _ => {}
        }
    }

    fn notify(&self, receiver: ReceiverId, notification: Notification) {
        if let Some(sink) = self.sinks.get(&receiver) {
            let _ = sink.send(notification);
        }
    }

    /// Carries out effects; returns true when the entity must be deleted.
    fn carry_out_effects(&mut self) -> bool {
        let mut idle = false;
        let mut returned = Vec::new();
        for effect in self.state.take_effects() {
            match effect {
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
                        returned.push(delivery);
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
                    dead_letter,
                } => {
                    if let Some(forwarder) = &self.forwarder {
                        let _ = forwarder.send(Forward {
                            message,
                            dead_letter,
                        });
                    }
                }
            }
        }
        if !returned.is_empty() {
            let now = self.clock.now();
            for delivery in returned {
                if let Some(receiver) = delivery.receiver {
                    self.state.detach_receiver(now, receiver);
                }
                self.state
                    .return_undelivered(now, None, delivery.sub_queue, delivery.record);
            }
            // Returning may dispatch to other receivers.
            idle |= self.carry_out_effects();
        }
        idle
    }
}
