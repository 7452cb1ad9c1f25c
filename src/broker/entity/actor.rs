//! The actor shell around [`EntityState`]: receives commands, reads the clock, runs the
//! pure core, and carries out its effects. One timer is kept armed no later than the core's
//! earliest deadline (lock expiry, message expiry, scheduled activation, idleness); there is
//! no polling.

use std::collections::{HashMap, VecDeque};
use std::task::Poll;

use tokio::sync::{mpsc, watch};

use super::settings::EntitySettings;
use super::state::{Change, Effect, EntityState, Lock, Record};
use super::{
    Command, Delivery, EntityHandle, Notification, NotificationSender, Reply, SessionOperation,
};
use crate::broker::budget::MemoryBudget;
use crate::broker::forwarder::{Forward, ForwardSender};
use crate::broker::leadership::Leadership;
use crate::broker::lifecycle::{Lifecycle, stopped};
use crate::broker::storage::{Durable, Storage, StorageError};
use crate::broker::types::{EntityError, ReceiverId, SequenceNumber, SubQueue, Timestamp};
use crate::clock::Clock;
use std::sync::Arc;

/// Hands a staged turn's changes to the topic that writes them (see [`Command::Stage`]) and
/// waits for its word on whether they are durable.
async fn hand_over(
    topic: super::StagedSender,
    key: &str,
    changes: Vec<Change>,
) -> Result<(), StorageError> {
    let (durable, answer) = tokio::sync::oneshot::channel();
    let staged = super::Staged {
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
    /// The durable storage and this entity's key in it (`None`: in memory).
    storage: Option<(Storage, String)>,
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

/// Most turns one entity has on their way to the log at once: while one is being written,
/// the next ones are handled and sealed, and their writes share the group's next entries.
const TURNS_IN_FLIGHT: usize = 8;

/// A sealed turn: its write to the log, and what goes out once it is durable.
struct Turn {
    /// The write, until it is settled (`None`: nothing to write, or settled).
    durable: Option<Durable<'static>>,
    /// How the write went, once it is settled.
    outcome: Option<Result<(), StorageError>>,
    /// Replies held until the turn is durable.
    replies: Vec<(super::ReplyTo, Result<super::Reply, EntityError>)>,
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
async fn next_durable(turns: &mut VecDeque<Turn>) -> Turn {
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

/// The replies of one batch of sends, held until the turn's changes are durable.
type HeldBatch = (
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
                    while let Some(command) = next.take() {
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
                        // Take whatever else is queued before sealing the turn.
                        if self.deleting.is_none() {
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

    /// Ends a turn: its changes go to the log (group commit with every other entity's),
    /// and its replies, dispositions and deliveries wait in [`Actor::turns`] until they are
    /// durable and every earlier turn has been released. The actor meanwhile takes the next
    /// commands. In memory everything goes out at once.
    fn seal(&mut self) {
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
    async fn commit_staged(&mut self) -> bool {
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
    async fn drain(&mut self) {
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
    fn release(&mut self, mut turn: Turn) -> bool {
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
        match command {
            Command::Send {
                reply: Some(reply), ..
            }
            | Command::Settle {
                reply: Some(reply), ..
            }
            | Command::SendForwarded { reply, .. }
            | Command::Commit { reply, .. }
            | Command::RenewLocks { reply, .. }
            | Command::Peek { reply, .. }
            | Command::ReceiveDeferred { reply, .. }
            | Command::CancelScheduled { reply, .. }
            | Command::Take { reply, .. }
            | Command::Purge { reply, .. }
            | Command::Session { reply, .. }
            | Command::ListSessions { reply, .. }
            | Command::UpdateSettings { reply, .. }
            | Command::Describe { reply }
            | Command::Delete { reply } => reply.send(Err(gone)),
            Command::Stage {
                sends,
                sink,
                staged,
                ..
            } => {
                // The topic waits for a word from every entity it staged copies with.
                let (durable, _) = tokio::sync::oneshot::channel();
                let _ = staged.send(super::Staged {
                    entity: self.state.settings().path.to_ascii_lowercase(),
                    changes: Vec::new(),
                    durable,
                });
                let replies: Vec<_> = sends
                    .into_iter()
                    .filter_map(|send| send.request)
                    .map(|request| (request, Err(gone.clone())))
                    .collect();
                if !replies.is_empty() {
                    let _ = sink.send(Notification::Replies { replies });
                }
            }
            Command::SendBatch { sends, sink } => {
                let replies: Vec<_> = sends
                    .into_iter()
                    .filter_map(|send| send.request)
                    .map(|request| (request, Err(gone.clone())))
                    .collect();
                if !replies.is_empty() {
                    let _ = sink.send(Notification::Replies { replies });
                }
            }
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
