//! One queue or subscription: a pure state machine ([`state`]) driven by an actor task
//! ([`actor`]) that owns it, reached through a cheap, cloneable [`EntityHandle`].
//!
//! Await order (deadlock freedom): connection tasks await `EntityHandle::send` (a bounded
//! channel) — backpressure flows from entity to connection. The entity never awaits a
//! connection: everything it tells a connection (deliveries, replies) goes through that
//! connection's unbounded [`NotificationSender`], whose volume is bounded by link credit
//! and by the requests the connection made.

pub mod actor;
#[cfg(test)]
mod actor_tests;
pub mod duplicates;
pub mod settings;
pub mod state;
#[cfg(test)]
mod state_forwarding_tests;
#[cfg(test)]
mod state_proptests;
#[cfg(test)]
mod state_settlement_tests;
#[cfg(test)]
mod state_tests;
#[cfg(test)]
mod state_transaction_tests;

use std::sync::Arc;

use tokio::sync::mpsc;

use super::message::Message;
use super::types::{
    EntityError, LockToken, ReceiveMode, ReceiverId, SequenceNumber, Settlement, SubQueue,
    Timestamp,
};
use settings::EntitySettings;
pub use state::{Delivery, EntityCounts, EntityTotals, Record, TransactionWork};

/// Identifies a request a connection is waiting on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RequestId(pub u64);

/// The messages of one send: inline when there is one, as there usually is (issue 16: a
/// vector allocated for every message sent).
pub type Messages = smallvec::SmallVec<[Message; 1]>;

/// The sequence numbers a send was given: inline when there is one.
pub type SequenceNumbers = smallvec::SmallVec<[SequenceNumber; 1]>;

/// What an entity tells a connection.
#[derive(Debug)]
pub enum Notification {
    /// A message for one of the connection's receivers.
    Deliver(Delivery),
    /// Every delivery to `receiver` made before its [`Command::Fence`] came before this.
    Fenced {
        /// The receiver.
        receiver: ReceiverId,
    },
    /// A receiver's drain completed; its delivery count is now `delivery_count`.
    Drained {
        /// The drained receiver.
        receiver: ReceiverId,
        /// Link delivery-count after the drain.
        delivery_count: u32,
    },
    /// A session receiver's attach succeeded: it holds this session.
    SessionAccepted {
        /// The receiver.
        receiver: ReceiverId,
        /// The session.
        session_id: String,
        /// Lock expiry.
        locked_until: Timestamp,
    },
    /// A session receiver's attach failed.
    SessionRefused {
        /// The receiver.
        receiver: ReceiverId,
        /// Why.
        error: EntityError,
    },
    /// The entity has forgotten a detached receiver: nothing more will be delivered to it,
    /// so the connection can drop what it kept to return late deliveries.
    ReceiverDetached {
        /// The receiver.
        receiver: ReceiverId,
    },
    /// The receiver's entity was deleted: detach it with not-found.
    EntityDeleted {
        /// The receiver.
        receiver: ReceiverId,
    },
    /// The entity now runs elsewhere (the stream to the node that ran it was lost): the
    /// link must attach again. Detached with `amqp:link:detach-forced`, which the SDKs
    /// retry, where `EntityDeleted`'s not-found is final.
    Moved {
        /// The receiver.
        receiver: ReceiverId,
    },
    /// A session receiver lost its session lock.
    SessionLost {
        /// The receiver.
        receiver: ReceiverId,
    },
    /// The answer to a request.
    Reply {
        /// Which request.
        request: RequestId,
        /// Its outcome.
        result: Result<Reply, EntityError>,
    },
    /// The answers to the sends of one [`Command::SendBatch`] that wait for one, in order.
    Replies {
        /// Which request, and its outcome.
        replies: Vec<(RequestId, Result<Reply, EntityError>)>,
    },
}

/// Successful answers.
#[derive(Debug)]
pub enum Reply {
    /// The operation succeeded with nothing to report.
    Done,
    /// Sequence numbers assigned (send, schedule).
    SequenceNumbers(SequenceNumbers),
    /// New lock expirations (renew-lock).
    Expirations(Vec<Timestamp>),
    /// Messages (peek, receive-by-sequence-number).
    Messages(Vec<Delivery>),
    /// A session's state (get-session-state).
    SessionState(Option<Vec<u8>>),
    /// Session ids (get-message-sessions).
    Sessions(Vec<String>),
    /// A subscription's rules (enumerate-rules).
    Rules(Vec<crate::broker::rules::Rule>),
    /// An entity's message counts (admin API runtime properties).
    Counts(Box<state::EntityCounts>),
    /// How many messages an operation touched (purge).
    Count(usize),
}

/// Where an entity sends notifications for one connection.
pub type NotificationSender = mpsc::UnboundedSender<Notification>;

/// Who is waiting for a reply.
#[derive(Debug, Clone)]
pub struct ReplyTo {
    /// The waiting connection.
    pub sink: NotificationSender,
    /// Its request id.
    pub request: RequestId,
}

impl ReplyTo {
    /// A reply channel for a caller without a connection (the admin API, the namespace):
    /// the receiver gets exactly one [`Notification::Reply`].
    pub fn oneshot() -> (ReplyTo, mpsc::UnboundedReceiver<Notification>) {
        let (sink, receiver) = mpsc::unbounded_channel();
        (
            ReplyTo {
                sink,
                request: RequestId(0),
            },
            receiver,
        )
    }

    /// Waits for the one reply of a [`ReplyTo::oneshot`] channel; `gone` when the entity
    /// stopped without answering.
    pub async fn wait(
        mut receiver: mpsc::UnboundedReceiver<Notification>,
        gone: impl FnOnce() -> EntityError,
    ) -> Result<Reply, EntityError> {
        while let Some(notification) = receiver.recv().await {
            if let Notification::Reply { result, .. } = notification {
                return result;
            }
        }
        Err(gone())
    }

    /// Sends the outcome; a gone connection is ignored.
    pub fn send(&self, result: Result<Reply, EntityError>) {
        let _ = self.sink.send(Notification::Reply {
            request: self.request,
            result,
        });
    }
}

/// One entity's changes of a [`Command::Stage`] turn, handed to the topic that writes them.
#[derive(Debug)]
pub struct Staged {
    /// The entity's key in the log.
    pub entity: String,
    /// The turn's changes (possibly none: every copy refused).
    pub changes: Vec<state::Change>,
    /// Told whether the record holding them is durable.
    pub durable: tokio::sync::oneshot::Sender<Result<(), super::storage::StorageError>>,
}

/// Where entities hand the changes of their staged turns.
pub type StagedSender = mpsc::UnboundedSender<Staged>;

/// One send (a transfer's messages) of a [`Command::SendBatch`].
#[derive(Debug)]
pub struct BatchedSend {
    /// The messages, in order.
    pub messages: Messages,
    /// The sequence number and enqueued time a topic gave each message, in order (rule
    /// SEQ-1: a subscription's copy carries the topic's); empty when the entity numbers
    /// them. Carried beside the messages rather than in them (issue 16: setting it in a
    /// message's rare fields copied the whole message into a new allocation, and every
    /// copy stored kept those fields).
    pub numbers: Numbers,
    /// The request waiting for the outcome (`None` for pre-settled transfers).
    pub request: Option<RequestId>,
}

/// Room a connection's staged list of sends starts with: a read's worth of 1 KiB sends.
const SEND_LIST_ROOM: usize = 64;
/// The largest list kept for reuse, and how many a thread keeps.
const SEND_LIST_KEPT_ROOM: usize = 256;
const SEND_LISTS_KEPT: usize = 8;

thread_local! {
    /// Emptied lists of sends, kept for the next batch (see [`BatchedSend::list`]).
    static SEND_LISTS: std::cell::RefCell<Vec<Vec<BatchedSend>>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

impl BatchedSend {
    /// An empty list for a batch of sends, with room for `SEND_LIST_ROOM`: one this
    /// thread's actors gave back ([`Self::recycle`]) when there is one. A list made anew
    /// for every batch (3–4 KiB, past glibc's per-thread cache) and freed by the actor
    /// left a hole among the stored messages that the next messages split and could not
    /// fill: 58 bytes more per stored 1 KiB message (issue 16: 1M × 1 KiB at 1.15 × the
    /// payload instead of 1.09 ×).
    pub fn list() -> Vec<BatchedSend> {
        SEND_LISTS
            .try_with(|lists| lists.borrow_mut().pop())
            .ok()
            .flatten()
            .unwrap_or_else(|| Vec::with_capacity(SEND_LIST_ROOM))
    }

    /// Gives an emptied list back for [`Self::list`] (kept when its room is between
    /// `SEND_LIST_ROOM` and `SEND_LIST_KEPT_ROOM` and the thread keeps fewer than
    /// `SEND_LISTS_KEPT`; otherwise freed).
    pub fn recycle(mut list: Vec<BatchedSend>) {
        list.clear();
        if !(SEND_LIST_ROOM..=SEND_LIST_KEPT_ROOM).contains(&list.capacity()) {
            return;
        }
        let _ = SEND_LISTS.try_with(|lists| {
            let mut lists = lists.borrow_mut();
            if lists.len() < SEND_LISTS_KEPT {
                lists.push(list);
            }
        });
    }
}

/// The topic's numbers of a send's messages (see [`BatchedSend::numbers`]).
pub type Numbers = smallvec::SmallVec<[(SequenceNumber, super::types::Timestamp); 1]>;

/// Requests to an entity actor.
#[derive(Debug)]
pub enum Command {
    /// Commit a transaction's work on this entity, all or nothing (rule TXN-1).
    Commit {
        /// The work.
        work: Box<state::TransactionWork>,
        /// Who waits: the sequence numbers of the messages sent, or why nothing changed.
        reply: ReplyTo,
    },
    /// Enqueue messages (one transfer, possibly a batch).
    Send {
        /// The messages, in order.
        messages: Messages,
        /// Who waits for the outcome (`None` for pre-settled transfers).
        reply: Option<ReplyTo>,
    },
    /// Consecutive sends from one connection, taken in one command (issue 16: a channel
    /// operation and a wake-up per message): each is handled as if it came alone, with its
    /// own outcome, so a refusal (quota, status) refuses only the sends it applies to.
    SendBatch {
        /// The sends, in the order they arrived.
        sends: Vec<BatchedSend>,
        /// The connection waiting for the outcomes: one [`Notification::Replies`] answers
        /// every send that has a request.
        sink: NotificationSender,
    },
    /// A durable topic's copies of one or more publishes, stored in one log record with the
    /// topic's own changes and every other subscription's copies, so that a crash keeps all
    /// of them or none ("id remembered ⇔ copies stored", "scheduled message gone ⇔ copies
    /// stored"). The entity handles it in a turn of its own and, instead of appending the
    /// turn's changes, hands them to `staged` and waits for the topic's word on whether
    /// the record is durable; then it answers `sink` as for [`Command::SendBatch`].
    Stage {
        /// The copies, in the order they were published.
        sends: Vec<BatchedSend>,
        /// Copies for the dead-letter sub-queue: message, reason, description.
        dead_letters: Vec<(Message, String, String)>,
        /// The topic waiting for the outcomes of `sends`.
        sink: NotificationSender,
        /// Where the turn's changes go instead of the log.
        staged: StagedSender,
    },
    /// Store messages straight into the dead-letter sub-queue (a topic's copies that fail
    /// their filter or need a session id they lack).
    DeadLetterOnArrival {
        /// Message, reason, description.
        messages: Vec<(Message, String, String)>,
    },
    /// A message from another entity's forwarding outbox (rule FWD-1): stored at most once
    /// per outbox entry, however often the source sends it.
    SendForwarded {
        /// The message, stamped by the source.
        message: Message,
        /// Which outbox entry it is.
        key: state::ForwardKey,
        /// The source committed every entry below this number as forwarded.
        floor: SequenceNumber,
        /// Who waits for the outcome.
        reply: ReplyTo,
    },
    /// The forwarding target stored the outbox message: it leaves the source.
    Forwarded {
        /// Its number in the source's outbox.
        sequence_number: SequenceNumber,
    },
    /// The forwarding target refused the outbox message: it moves to the transfer
    /// dead-letter queue.
    ForwardFailed {
        /// Its number in the source's outbox.
        sequence_number: SequenceNumber,
        /// Why.
        reason: String,
        /// Details.
        description: String,
    },
    /// Take back a delivery that was never written to its receiver (the link went away,
    /// or the connection could not send it): no delivery attempt is counted.
    Return {
        /// The receiver it was delivered to: its delivery count is taken back.
        receiver: Option<ReceiverId>,
        /// The sub-queue it was delivered from.
        sub_queue: SubQueue,
        /// The record as it was delivered.
        record: Box<Record>,
        /// The lock it was delivered with (peek-lock).
        lock: Option<state::Lock>,
    },
    /// Attach a receiving link.
    AttachReceiver {
        /// The link's id.
        receiver: ReceiverId,
        /// Which sub-queue it reads.
        sub_queue: SubQueue,
        /// Peek-lock or receive-and-delete.
        mode: ReceiveMode,
        /// Where deliveries go.
        sink: NotificationSender,
    },
    /// Attach a session receiver (named session, or next available within `wait`).
    AttachSessionReceiver {
        /// The link's id.
        receiver: ReceiverId,
        /// Peek-lock or receive-and-delete.
        mode: ReceiveMode,
        /// The session wanted; `None` for next available.
        session_id: Option<String>,
        /// How long to wait for a next-available session.
        wait: std::time::Duration,
        /// Where deliveries and the outcome go.
        sink: NotificationSender,
    },
    /// Session management (`$management`).
    Session {
        /// The session.
        session_id: String,
        /// What to do.
        operation: SessionOperation,
        /// Who waits.
        reply: ReplyTo,
    },
    /// List sessions with messages or state.
    ListSessions {
        /// Updated since (unix ms), or the "any" sentinel.
        last_updated: i64,
        /// Sessions to skip.
        skip: usize,
        /// Most sessions.
        top: usize,
        /// Who waits.
        reply: ReplyTo,
    },
    /// Detach a receiving link.
    DetachReceiver {
        /// The link's id.
        receiver: ReceiverId,
    },
    /// Answer with [`Notification::Fenced`] behind every delivery to `receiver` made before
    /// this command: a connection that held the receiver back waits for it before giving
    /// credit again, so that deliveries still on their way do not overtake the ones it
    /// returned (sequence order, rule SEQ-4).
    Fence {
        /// The receiver held back.
        receiver: ReceiverId,
    },
    /// Update a receiver's credit.
    Credit {
        /// The link's id.
        receiver: ReceiverId,
        /// The client's link delivery-count, if it sent one.
        delivery_count: Option<u32>,
        /// Credit counted from that delivery-count (a full `uint`).
        link_credit: u32,
        /// Consume remaining credit after dispatch and report `Drained`.
        drain: bool,
    },
    /// Settle a locked message.
    Settle {
        /// The lock.
        token: LockToken,
        /// What to do with the message.
        settlement: Settlement,
        /// Who waits for the outcome (`None` when the client settled first).
        reply: Option<ReplyTo>,
    },
    /// Settle locked messages alike, in order: the deliveries one client disposition
    /// settled first (no one waits for the outcome), taken in one command (issue 16: a
    /// channel operation, a wake-up and a dispatch per settled message).
    SettleAll {
        /// The locks.
        tokens: Vec<LockToken>,
        /// What to do with each message.
        settlement: Settlement,
    },
    /// Browse messages.
    Peek {
        /// Which sub-queue.
        sub_queue: SubQueue,
        /// First sequence number to return.
        from: SequenceNumber,
        /// Most messages to return.
        count: usize,
        /// Only this session's messages.
        session_id: Option<String>,
        /// Who waits.
        reply: ReplyTo,
    },
    /// Take deferred messages by sequence number.
    ReceiveDeferred {
        /// Which sub-queue.
        sub_queue: SubQueue,
        /// The messages wanted.
        sequence_numbers: Vec<SequenceNumber>,
        /// Lock them, or remove them.
        mode: ReceiveMode,
        /// Who waits.
        reply: ReplyTo,
    },
    /// Take messages by sequence number, active or deferred (the explorer).
    Take {
        /// Which sub-queue.
        sub_queue: SubQueue,
        /// The messages wanted.
        sequence_numbers: Vec<SequenceNumber>,
        /// Lock them, or remove them.
        mode: ReceiveMode,
        /// Who waits.
        reply: ReplyTo,
    },
    /// Delete unlocked messages (the explorer's purge; `batch-delete-messages`).
    Purge {
        /// Which sub-queue.
        sub_queue: SubQueue,
        /// Only those enqueued before this time.
        before: Option<Timestamp>,
        /// Only this session's messages (a session receiver's request).
        session_id: Option<String>,
        /// At most this many.
        max: usize,
        /// Who waits for [`Reply::Count`].
        reply: ReplyTo,
    },
    /// Cancel scheduled messages.
    CancelScheduled {
        /// The scheduled messages' sequence numbers.
        sequence_numbers: Vec<SequenceNumber>,
        /// Who waits.
        reply: ReplyTo,
    },
    /// Renew locks.
    RenewLocks {
        /// The locks.
        tokens: Vec<LockToken>,
        /// Who waits.
        reply: ReplyTo,
    },
    /// Apply settings changed at run time (admin API update).
    UpdateSettings {
        /// The new settings (path and `requires_session` are kept).
        settings: Box<EntitySettings>,
        /// Who waits.
        reply: ReplyTo,
    },
    /// Report message counts.
    Describe {
        /// Who waits for [`Reply::Counts`].
        reply: ReplyTo,
    },
    /// Delete the entity (admin API, `$management` or its topic's deletion): receivers
    /// are detached with not-found, queued commands refused, stored messages forgotten.
    Delete {
        /// Who waits.
        reply: ReplyTo,
    },
}

impl Command {
    /// Answers a command that will not be carried out (its entity is gone, or runs on a
    /// node that cannot be reached) with `error`: every reply it waits for, a session
    /// receiver's refusal, a receiver's loss of its entity (`NotFound`: deleted; anything
    /// else: [`Notification::Moved`], the link attaches again). Commands no one waits on
    /// are dropped.
    pub fn refuse_with(self, error: EntityError) {
        match self {
            Command::Commit { reply, .. }
            | Command::SendForwarded { reply, .. }
            | Command::Session { reply, .. }
            | Command::ListSessions { reply, .. }
            | Command::Peek { reply, .. }
            | Command::ReceiveDeferred { reply, .. }
            | Command::Take { reply, .. }
            | Command::Purge { reply, .. }
            | Command::CancelScheduled { reply, .. }
            | Command::RenewLocks { reply, .. }
            | Command::UpdateSettings { reply, .. }
            | Command::Describe { reply }
            | Command::Delete { reply } => reply.send(Err(error)),
            Command::Send {
                reply: Some(reply), ..
            }
            | Command::Settle {
                reply: Some(reply), ..
            } => reply.send(Err(error)),
            Command::SendBatch { sends, sink } | Command::Stage { sends, sink, .. } => {
                answer_all(&sink, sends, &error);
            }
            Command::AttachReceiver { receiver, sink, .. } => {
                // An entity that is not there is gone for good; one that cannot be reached now
                // runs elsewhere: the link attaches again.
                let notification = match error {
                    EntityError::NotFound(_) => Notification::EntityDeleted { receiver },
                    _ => Notification::Moved { receiver },
                };
                let _ = sink.send(notification);
            }
            Command::AttachSessionReceiver { receiver, sink, .. } => {
                let _ = sink.send(Notification::SessionRefused { receiver, error });
            }
            Command::Send { reply: None, .. }
            | Command::Settle { reply: None, .. }
            | Command::DeadLetterOnArrival { .. }
            | Command::Forwarded { .. }
            | Command::ForwardFailed { .. }
            | Command::Return { .. }
            | Command::DetachReceiver { .. }
            | Command::Fence { .. }
            | Command::Credit { .. }
            | Command::SettleAll { .. } => {}
        }
    }
}

/// Answers every send of a batch that waits for an outcome with `error`, at once.
pub fn answer_all(sink: &NotificationSender, sends: Vec<BatchedSend>, error: &EntityError) {
    let replies: Vec<_> = sends
        .into_iter()
        .filter_map(|send| send.request.map(|request| (request, Err(error.clone()))))
        .collect();
    if !replies.is_empty() {
        let _ = sink.send(Notification::Replies { replies });
    }
}

/// Session operations of `$management`.
#[derive(Debug)]
pub enum SessionOperation {
    /// Extend the session lock.
    RenewLock,
    /// Replace the session state.
    SetState(Option<Vec<u8>>),
    /// Read the session state.
    GetState,
}

/// A cheap handle to an entity actor.
#[derive(Debug, Clone)]
pub struct EntityHandle {
    /// The entity path as configured.
    pub path: Arc<str>,
    /// The actor's bounded command channel.
    commands: mpsc::Sender<Command>,
}

impl EntityHandle {
    /// A handle whose commands go into `commands` instead of a local actor's inbox (a
    /// remote entity reached through `cluster::remote`): whoever drains the channel
    /// carries the commands on and answers them.
    pub fn from_channel(path: &str, commands: mpsc::Sender<Command>) -> EntityHandle {
        EntityHandle {
            path: path.into(),
            commands,
        }
    }

    /// Sends a command; fails with `NotFound` when the entity is gone.
    pub async fn send(&self, command: Command) -> Result<(), EntityError> {
        self.commands
            .send(command)
            .await
            .map_err(|_| EntityError::NotFound(self.path.to_string()))
    }

    /// Sends a command; when the entity is gone, gives it back with the error (its replies
    /// are the caller's to answer).
    pub async fn send_or_give_back(&self, command: Command) -> Result<(), (EntityError, Command)> {
        self.commands
            .send(command)
            .await
            .map_err(|mpsc::error::SendError(command)| {
                (EntityError::NotFound(self.path.to_string()), command)
            })
    }

    /// Whether both handles reach the same actor.
    pub fn same_entity(&self, other: &EntityHandle) -> bool {
        self.commands.same_channel(&other.commands)
    }
}

#[cfg(test)]
mod send_list_tests {
    use super::{BatchedSend, SEND_LIST_KEPT_ROOM, SEND_LIST_ROOM, SEND_LISTS_KEPT};

    fn send() -> BatchedSend {
        BatchedSend {
            messages: Default::default(),
            numbers: Default::default(),
            request: None,
        }
    }

    #[test]
    fn a_list_given_back_is_handed_out_again_empty_with_its_room() {
        std::thread::spawn(|| {
            let mut list = BatchedSend::list();
            assert!(list.capacity() >= SEND_LIST_ROOM);
            list.push(send());
            let allocation = list.as_ptr();
            BatchedSend::recycle(list);
            let again = BatchedSend::list();
            assert_eq!(again.as_ptr(), allocation, "the same allocation");
            assert!(again.is_empty(), "none of its sends come back");
            let fresh = BatchedSend::list();
            assert_ne!(fresh.as_ptr(), allocation, "handed out once");
        })
        .join()
        .unwrap();
    }

    #[test]
    fn lists_too_small_or_too_large_are_not_kept_and_a_thread_keeps_a_few() {
        std::thread::spawn(|| {
            // A list's room tells which one came back (a new one has exactly the default).
            BatchedSend::recycle(Vec::with_capacity(SEND_LIST_ROOM / 2));
            BatchedSend::recycle(Vec::with_capacity(SEND_LIST_KEPT_ROOM * 2));
            assert_eq!(BatchedSend::list().capacity(), SEND_LIST_ROOM, "a new one");

            for extra in 1..=SEND_LISTS_KEPT + 3 {
                BatchedSend::recycle(Vec::with_capacity(SEND_LIST_ROOM + extra));
            }
            let rooms: Vec<usize> = (0..SEND_LISTS_KEPT + 3)
                .map(|_| BatchedSend::list().capacity())
                .collect();
            let kept = rooms.iter().filter(|&&room| room > SEND_LIST_ROOM).count();
            assert_eq!(kept, SEND_LISTS_KEPT, "only so many kept: {rooms:?}");
            assert!(
                rooms[..SEND_LISTS_KEPT]
                    .iter()
                    .all(|&room| room > SEND_LIST_ROOM)
            );
        })
        .join()
        .unwrap();
    }
}
