//! The actor shell around [`EntityState`]: receives commands, reads the clock, runs the
//! pure core, and carries out its effects. One timer is kept armed no later than the core's
//! earliest deadline (lock expiry, message expiry, scheduled activation, idleness); there is
//! no polling.

use std::collections::{HashMap, VecDeque};

use tokio::sync::{mpsc, watch};

use super::settings::EntitySettings;
use super::state::{Change, EntityState, Lock, Record};
use super::{
    Command, Delivery, EntityHandle, Notification, NotificationSender, Reply, SessionOperation,
};
use crate::broker::budget::MemoryBudget;
use crate::broker::forwarder::ForwardSender;
use crate::broker::leadership::Leadership;
use crate::broker::lifecycle::{Lifecycle, stopped};
use crate::broker::storage::Storage;
use crate::broker::types::{EntityError, ReceiverId, SubQueue, Timestamp};
use crate::clock::Clock;
use std::sync::Arc;

mod turns;

use turns::{TURNS_IN_FLIGHT, Turn, next_durable};

/// A management reply carrying records of `sub_queue` (peek, deferred receive).
fn messages(sub_queue: SubQueue, records: Vec<(Record, Option<Lock>)>) -> Reply {
    Reply::Messages(
        records
            .into_iter()
            .map(|(record, lock)| Delivery {
                sub_queue,
                receiver: None,
                record,
                lock,
            })
            .collect(),
    )
}

/// Commands an entity may have queued before senders wait.
const COMMAND_CAPACITY: usize = 1024;

/// Where an idle entity reports that it deleted itself (its path).
pub type IdleSender = mpsc::UnboundedSender<String>;

/// Where an entity keeps its state: its key in the storage, and what recovery read for it.
pub struct Durability {
    /// The shared storage.
    pub storage: Storage,
    /// The entity's key in the log.
    pub key: String,
    /// Its change records as recovered (empty for a new entity).
    pub recovered: Vec<Change>,
}

/// Starts the actor for one entity and returns its handle. With `durability`, the entity
/// starts from its recovered records and every turn's changes are durable before the
/// turn's replies, dispositions and deliveries go out. Its lock tokens come from a seed of
/// `leadership` (no token of an earlier leadership, or an earlier process, settles
/// anything here).
#[allow(clippy::too_many_arguments)]
pub fn spawn(
    settings: EntitySettings,
    clock: Clock,
    leadership: Leadership,
    on_idle: IdleSender,
    forwarder: Option<ForwardSender>,
    budget: Arc<MemoryBudget>,
    durability: Option<Durability>,
    lifecycle: &Lifecycle,
) -> EntityHandle {
    let (commands, inbox) = mpsc::channel(COMMAND_CAPACITY);
    let handle = EntityHandle {
        path: settings.path.as_str().into(),
        commands,
    };
    let now = clock.now();
    let token_seed = leadership.token_seed(&settings.path.to_ascii_lowercase());
    let (state, storage) = match durability {
        Some(Durability {
            storage,
            key,
            recovered,
        }) => {
            let mut state = if recovered.is_empty() {
                EntityState::new(settings, token_seed, now)
            } else {
                EntityState::restore(settings, token_seed, now, recovered)
            };
            state.set_journaling(true);
            storage.register(&key);
            (state, Some((storage, key)))
        }
        None => (EntityState::new(settings, token_seed, now), None),
    };
    let actor = Actor {
        state,
        clock,
        sinks: HashMap::new(),
        on_idle,
        forwarder,
        budget,
        charged: 0,
        storage,
        held_replies: Vec::new(),
        held_batches: Vec::new(),
        checkpointed: 0,
        deleting: None,
        staging: None,
        turns: VecDeque::new(),
        idle: false,
        commands_per_turn: None,
    };
    let mut actor = actor;
    actor.commands_per_turn = actor
        .storage
        .as_ref()
        .and_then(|(storage, _)| storage.commands_per_turn());
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
    /// The durable storage and this entity's key in it (`None`: in memory).
    storage: Option<(Storage, String)>,
    /// The most commands one turn takes (the storage's bound; `None`: all that wait).
    commands_per_turn: Option<usize>,
    /// Replies of this turn, released once the turn's changes are durable.
    held_replies: Vec<(super::ReplyTo, Result<super::Reply, EntityError>)>,
    /// The same for the batched sends of this turn: each batch's replies go out together.
    held_batches: Vec<HeldBatch>,
    /// The last compaction round this entity wrote a checkpoint for.
    checkpointed: u64,
    /// A deletion was asked for (admin API): who waits for it.
    deleting: Option<super::ReplyTo>,
    /// This turn holds a topic's staged copies: its changes go to this topic, which
    /// writes them with the rest of the publish, instead of to the log.
    staging: Option<super::StagedSender>,
    /// Sealed turns on their way to the log, oldest first (see [`Actor::seal`]).
    turns: VecDeque<Turn>,
    /// The entity must delete itself for idleness (a released turn said so).
    idle: bool,
}

/// The replies of one batch of sends, held until the turn's changes are durable.
pub(super) type HeldBatch = (
    super::NotificationSender,
    Vec<(super::RequestId, Result<Reply, EntityError>)>,
);

impl Actor {
    async fn run(
        mut self,
        mut inbox: mpsc::Receiver<Command>,
        mut stopping: watch::Receiver<bool>,
    ) {
        let mut epochs = self.storage.as_ref().map(|(storage, _)| storage.epochs());
        // Deadlines that passed while the broker was down run now.
        if self.storage.is_some() {
            let now = self.clock.now();
            self.state.advance(now);
            self.seal();
            self.drain().await;
            if self.idle {
                self.delete_for_idleness(inbox).await;
                return;
            }
        }
        // One timer for the actor's life, moved only to an earlier deadline: a deadline
        // that moved later (its lock settled) or went away leaves the timer to fire early
        // and find nothing due. A timer made afresh each turn was a registration with the
        // runtime's timer wheel per turn, and a wake of the I/O driver (a write to its
        // eventfd and one more `epoll_wait`) each time it was the only timer (issue 16).
        let timer = tokio::time::sleep(std::time::Duration::ZERO);
        tokio::pin!(timer);
        let mut armed: Option<Timestamp> = None;
        loop {
            if let Some(at) = self.state.next_deadline()
                && armed.is_none_or(|armed| at < armed)
            {
                timer.as_mut().reset(self.clock.instant_at(at));
                armed = Some(at);
            }
            let room = self.turns.len() < TURNS_IN_FLIGHT;
            let mut seal = true;
            tokio::select! {
                // Writes first: polling them starts the ones just sealed, in order, and a
                // settled turn goes out before more commands are taken.
                biased;
                turn = next_durable(&mut self.turns), if !self.turns.is_empty() => {
                    // After a failed write what was taken back waits for the next turn:
                    // retrying at once against a log that refuses would go round in circles.
                    seal = self.release(turn);
                }
                command = inbox.recv(), if room => {
                    let Some(command) = command else { break };
                    // One reading of the clock per turn: the commands taken together are
                    // handled at the same instant (they arrived within microseconds).
                    let now = self.clock.now();
                    let mut next = Some(command);
                    let mut handled = false;
                    let mut taken = 0usize;
                    while let Some(command) = next.take() {
                        taken += 1;
                        if matches!(command, Command::Stage { .. }) {
                            // A topic's staged copies are a turn of their own: what came
                            // before them is durable first, nothing after joins them.
                            if handled {
                                self.seal();
                            }
                            self.drain().await;
                            if self.idle {
                                // Deleted for idleness meanwhile: the topic still gets its
                                // word from this entity.
                                self.refuse(command);
                                break;
                            }
                            self.handle(command, now);
                            self.recharge();
                            seal = self.commit_staged().await;
                            break;
                        }
                        self.handle(command, now);
                        self.recharge();
                        handled = true;
                        // Take whatever else is queued before sealing the turn (up to the
                        // storage's bound: the rest waits for the next turn).
                        let full = self.commands_per_turn.is_some_and(|most| taken >= most);
                        if self.deleting.is_none() && !full {
                            next = inbox.try_recv().ok();
                        }
                    }
                }
                () = &mut timer, if armed.is_some() => {
                    armed = None;
                    let now = self.clock.now();
                    self.state.advance(now);
                }
                () = stopped(&mut stopping) => break,
                Ok(()) = async {
                    match &mut epochs {
                        Some(epochs) => epochs.changed().await,
                        None => std::future::pending().await,
                    }
                } => {}
            }
            if seal {
                self.seal();
            }
            self.recharge();
            if self.deleting.is_some() || self.idle {
                self.drain().await;
            }
            if let Some(reply) = self.deleting.take() {
                self.delete(inbox, reply).await;
                return;
            }
            if self.idle {
                self.delete_for_idleness(inbox).await;
                return;
            }
            if let Some(epochs) = &mut epochs {
                let epoch = *epochs.borrow_and_update();
                if epoch > self.checkpointed {
                    // A checkpoint holds what the log holds: every turn on its way first.
                    self.drain().await;
                    self.checkpoint(epoch).await;
                }
            }
        }
        self.drain().await;
        self.stop();
    }

    /// Deleted for idleness (rule IDL-1): stop taking commands, answer the ones already
    /// queued with not-found, forget the stored state, and stop; handles then report
    /// not-found.
    async fn delete_for_idleness(self, mut inbox: mpsc::Receiver<Command>) {
        let _ = self.on_idle.send(self.state.settings().path.clone());
        inbox.close();
        while let Some(command) = inbox.recv().await {
            self.refuse(command);
        }
        if let Some((storage, key)) = &self.storage
            && let Err(error) = storage.drop_entity(key).await
        {
            tracing::warn!(entity = %key, %error, "cannot record the deletion of an idle entity");
        }
        self.stop();
    }

    /// Deleted on request (admin API): receivers are detached with not-found, commands
    /// still queued are refused, the stored state is forgotten, then the caller is told.
    async fn delete(mut self, mut inbox: mpsc::Receiver<Command>, reply: super::ReplyTo) {
        for (receiver, sink) in self.sinks.drain() {
            let _ = sink.send(Notification::EntityDeleted { receiver });
        }
        inbox.close();
        while let Some(command) = inbox.recv().await {
            self.refuse(command);
        }
        let mut result = Ok(Reply::Done);
        if let Some((storage, key)) = &self.storage
            && let Err(error) = storage.drop_entity(key).await
        {
            tracing::warn!(entity = %key, %error, "cannot record the deletion of an entity");
            result = Err(EntityError::StorageFailed(format!(
                "The broker could not store the deletion durably: {error}"
            )));
        }
        tracing::info!(entity = %self.state.settings().path, "entity deleted");
        self.stop();
        reply.send(result);
    }

    /// The actor ends: what it stored no longer counts against the memory budget.
    fn stop(self) {
        self.budget.recharge(self.charged, 0);
        if let Some((storage, key)) = &self.storage {
            storage.unregister(key);
        }
    }

    /// Writes this entity's whole durable state for compaction round `epoch`.
    async fn checkpoint(&mut self, epoch: u64) {
        let Some((storage, key)) = &self.storage else {
            return;
        };
        let changes = self.state.checkpoint();
        match storage.checkpoint(key, epoch, changes).await {
            Ok(()) => self.checkpointed = epoch,
            Err(error) => {
                tracing::error!(entity = %key, %error, "cannot write a checkpoint");
                self.checkpointed = epoch;
            }
        }
    }

    /// Answers a command: at once in memory, after the turn's commit when durable.
    fn answer(&mut self, reply: super::ReplyTo, result: Result<super::Reply, EntityError>) {
        if self.storage.is_some() {
            self.held_replies.push((reply, result));
        } else {
            reply.send(result);
        }
    }

    /// Brings this entity's charge on the memory budget up to date.
    fn recharge(&mut self) {
        let stored = self.state.stored_bytes();
        if stored != self.charged {
            self.budget.recharge(self.charged, stored);
            self.charged = stored;
        }
    }

    /// What the shell checks before a transaction's sends reach the core: the entity's
    /// status, the disk and the broker's memory budget.
    fn admit_transaction(&mut self, work: &super::TransactionWork) -> Result<(), EntityError> {
        let sends = !work.sends.is_empty() || !work.via.is_empty();
        if !sends {
            return Ok(());
        }
        let settings = self.state.settings();
        if !settings.status.allows_send() {
            return Err(EntityError::Disabled(format!(
                "Messaging entity '{}' is currently disabled for sending ({}).",
                settings.path,
                settings.status.as_str()
            )));
        }
        if let Some((storage, _)) = &self.storage
            && !storage.has_room()
        {
            return Err(EntityError::StorageFull(storage.full_error()));
        }
        let incoming: u64 = work
            .sends
            .iter()
            .chain(work.via.iter().map(|(_, message)| message))
            .map(|message| message.size() as u64)
            .sum();
        self.budget
            .admit(incoming)
            .map_err(|used| EntityError::QuotaExceeded {
                entity: "the broker's memory budget (server.memory_budget)".into(),
                size: used,
                limit: self.budget.limit(),
            })
    }

    /// One send: the entity's status, the disk and the broker's memory budget are checked
    /// before the messages reach the core.
    fn send(
        &mut self,
        now: Timestamp,
        messages: super::Messages,
        numbers: &[(crate::broker::types::SequenceNumber, Timestamp)],
    ) -> Result<super::SequenceNumbers, EntityError> {
        if !self.state.settings().status.allows_send() {
            return Err(EntityError::Disabled(format!(
                "Messaging entity '{}' is currently disabled for sending ({}).",
                self.state.settings().path,
                self.state.settings().status.as_str()
            )));
        }
        if let Some((storage, _)) = &self.storage
            && !storage.has_room()
        {
            return Err(EntityError::StorageFull(storage.full_error()));
        }
        let incoming: u64 = messages.iter().map(|message| message.size() as u64).sum();
        if let Err(used) = self.budget.admit(incoming) {
            return Err(EntityError::QuotaExceeded {
                entity: "the broker's memory budget (server.memory_budget)".into(),
                size: used,
                limit: self.budget.limit(),
            });
        }
        self.state.enqueue_numbered(now, messages, numbers)
    }

    /// Handles the sends of a batch, each with its own outcome; the outcomes go to `sink`
    /// together, after the turn's commit when durable.
    fn send_batch(
        &mut self,
        now: Timestamp,
        mut sends: Vec<super::BatchedSend>,
        sink: NotificationSender,
    ) {
        let mut replies = Vec::with_capacity(sends.len());
        for send in sends.drain(..) {
            let result = self.send(now, send.messages, &send.numbers);
            // The next send is admitted against the budget with this one counted.
            self.recharge();
            if let Some(request) = send.request {
                replies.push((request, result.map(Reply::SequenceNumbers)));
            }
        }
        super::BatchedSend::recycle(sends);
        if !replies.is_empty() {
            if self.storage.is_some() {
                self.held_batches.push((sink, replies));
            } else {
                let _ = sink.send(Notification::Replies { replies });
            }
        }
    }

    fn handle(&mut self, command: Command, now: Timestamp) {
        match command {
            Command::Send { messages, reply } => {
                let result = self.send(now, messages, &[]);
                if let Some(reply) = reply {
                    self.answer(reply, result.map(Reply::SequenceNumbers));
                }
            }
            Command::SendBatch { sends, sink } => self.send_batch(now, sends, sink),
            Command::SendForwarded {
                message,
                key,
                floor,
                reply,
            } => {
                let result = if self.state.forwarded_already(&key, floor) {
                    Ok(super::SequenceNumbers::new())
                } else {
                    let result = self.send(now, smallvec::smallvec![message], &[]);
                    if result.is_ok() {
                        self.state.received_forwarded(key);
                    }
                    result
                };
                self.answer(reply, result.map(Reply::SequenceNumbers));
            }
            Command::Stage {
                sends,
                dead_letters,
                sink,
                staged,
            } => {
                for (message, reason, description) in dead_letters {
                    self.state
                        .enqueue_dead_lettered(now, message, reason, description);
                }
                self.send_batch(now, sends, sink);
                // In memory nothing is written: the topic is answered as for any batch.
                if self.storage.is_some() {
                    self.staging = Some(staged);
                }
            }
            Command::Commit { work, reply } => {
                let result = self.admit_transaction(&work);
                let result = result.and_then(|()| self.state.commit_transaction(now, *work));
                self.answer(reply, result.map(Reply::SequenceNumbers));
            }
            Command::Forwarded { sequence_number } => self.state.forwarded(now, sequence_number),
            Command::ForwardFailed {
                sequence_number,
                reason,
                description,
            } => self
                .state
                .forward_failed(now, sequence_number, reason, description),
            Command::Return {
                receiver,
                sub_queue,
                record,
                lock,
            } => self
                .state
                .return_undelivered(now, receiver, sub_queue, *record, lock),
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
                self.answer(reply, result);
            }
            Command::ListSessions {
                last_updated,
                skip,
                top,
                reply,
            } => {
                let sessions = self.state.message_sessions(now, last_updated, skip, top);
                self.answer(reply, Ok(Reply::Sessions(sessions)));
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
            Command::Fence { receiver } => self.state.fence(receiver),
            Command::Settle {
                token,
                settlement,
                reply,
            } => {
                let result = self.state.settle(now, token, settlement);
                if let Some(reply) = reply {
                    self.answer(reply, result.map(|()| Reply::Done));
                }
            }
            Command::SettleAll { tokens, settlement } => {
                // Nobody waits: a lock lost on the way is the client's to find out (as
                // for a single settlement the client settled first).
                self.state.settle_all(now, &tokens, &settlement);
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
                self.answer(reply, Ok(messages(sub_queue, records)));
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
                self.answer(reply, result);
            }
            Command::Take {
                sub_queue,
                sequence_numbers,
                mode,
                reply,
            } => {
                let result = self
                    .state
                    .take_by_sequence(now, sub_queue, &sequence_numbers, mode)
                    .map(|records| messages(sub_queue, records));
                self.answer(reply, result);
            }
            Command::Purge {
                sub_queue,
                before,
                session_id,
                max,
                reply,
            } => {
                let deleted = self
                    .state
                    .purge(now, sub_queue, before, session_id.as_deref(), max);
                self.answer(reply, Ok(Reply::Count(deleted)));
            }
            Command::CancelScheduled {
                sequence_numbers,
                reply,
            } => {
                self.state.cancel_scheduled(now, &sequence_numbers);
                self.answer(reply, Ok(Reply::Done));
            }
            Command::RenewLocks { tokens, reply } => {
                let result: Result<Vec<_>, _> = tokens
                    .into_iter()
                    .map(|token| self.state.renew_lock(now, token))
                    .collect();
                self.answer(reply, result.map(Reply::Expirations));
            }
            Command::UpdateSettings { settings, reply } => {
                self.state.update_settings(now, *settings);
                self.answer(reply, Ok(Reply::Done));
            }
            Command::Describe { reply } => {
                let counts = self.state.counts();
                self.answer(reply, Ok(Reply::Counts(Box::new(counts))));
            }
            Command::Delete { reply } => self.deleting = Some(reply),
        }
    }

    /// Answers a command that arrived after the entity deleted itself.
    fn refuse(&self, command: Command) {
        let gone = EntityError::NotFound(self.state.settings().path.clone());
        if let Command::Stage { staged, .. } = &command {
            // The topic waits for a word from every entity it staged copies with.
            let (durable, _) = tokio::sync::oneshot::channel();
            let _ = staged.send(super::Staged {
                entity: self.state.settings().path.to_ascii_lowercase(),
                changes: Vec::new(),
                durable,
            });
        }
        command.refuse_with(gone);
    }

    fn notify(&self, receiver: ReceiverId, notification: Notification) {
        if let Some(sink) = self.sinks.get(&receiver) {
            let _ = sink.send(notification);
        }
    }
}
