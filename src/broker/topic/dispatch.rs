//! How a topic hands a publish to its subscriptions: rules evaluated on the topic's task or,
//! past [`INLINE_EVALUATION_STEPS`], on the blocking pool; each subscription's part sent as a
//! [`Command::SendBatch`] in memory or a [`Command::Stage`] when durable, where the topic
//! writes its own changes and every staged turn as one record.

use tokio::sync::mpsc;

use super::{
    BatchedSend, Change, Command, Copies, EntityError, HeavyMessage, Message, Notification,
    NotificationSender, Reply, RequestId, Topic, TopicState,
};

/// Steps of rule evaluation one message may take on the topic's task (all subscriptions
/// together, about a tenth of a millisecond): a message whose rules need more is evaluated
/// where it stalls no other entity (see [`publish_into_off_the_workers`]).
const INLINE_EVALUATION_STEPS: u64 = 100_000;

/// [`TopicState::publish`] through [`publish_into_off_the_workers`].
pub(super) async fn publish_off_the_workers(
    state: &mut TopicState,
    now: crate::broker::types::Timestamp,
    messages: impl IntoIterator<Item = Message>,
) -> Vec<Copies> {
    let mut copies: Vec<Copies> = (0..state.subscription_count())
        .map(|_| Copies::default())
        .collect();
    publish_into_off_the_workers(state, now, messages, &mut copies).await;
    copies
}

/// Publishes `messages` into `copies` (see [`TopicState::publish_into`]). Rules run on the
/// topic's task up to [`INLINE_EVALUATION_STEPS`] a message; a message whose rules need more
/// is evaluated on tokio's blocking pool, on a shared snapshot of the rules, while the
/// worker threads go on serving other entities and connections: however long a
/// subscription's rules take on one message (up to the configured budget), nobody else
/// waits for it. The topic itself waits, which keeps its publishes in order.
pub(super) async fn publish_into_off_the_workers(
    state: &mut TopicState,
    now: crate::broker::types::Timestamp,
    messages: impl IntoIterator<Item = Message>,
    copies: &mut [Copies],
) {
    let mut messages = messages.into_iter();
    while let Err(HeavyMessage(message)) =
        state.publish_into(now, &mut messages, copies, Some(INLINE_EVALUATION_STEPS))
    {
        let evaluation = state.evaluation();
        let kept = message.clone();
        let evaluated = tokio::task::spawn_blocking(move || evaluation.run(now, &message))
            .await
            // The pool is shutting down: the evaluation runs here instead.
            .unwrap_or_else(|_| state.evaluation().run(now, &kept));
        state.publish_evaluated(now, &kept, evaluated, copies);
    }
}

/// One subscription's part of one or more publishes.
#[derive(Default)]
pub(super) struct Part {
    /// Its copies, one batched send per publish.
    pub(super) sends: Vec<BatchedSend>,
    /// Copies for its dead-letter queue: message, reason, description.
    pub(super) dead_letters: Vec<(Message, String, String)>,
}

/// What [`Topic::dispatch`] did.
pub(super) struct Dispatched {
    /// Subscriptions that will answer on the sink.
    pub(super) answering: usize,
    /// Sends a subscription did not take (its actor is gone), with the error.
    pub(super) refused: Vec<(Vec<BatchedSend>, EntityError)>,
    /// Whether the publish's record is durable (always, in memory).
    pub(super) written: Result<(), EntityError>,
}

impl Topic {
    /// Sends each subscription its copies of one publish (dead letters to its dead-letter
    /// queue), every reply under `request`, with the topic's `changes` (see
    /// [`Self::dispatch`]). Returns how many subscriptions will answer, and Done or the
    /// first refusal.
    pub(super) async fn send_copies(
        &self,
        copies: Vec<Copies>,
        changes: Vec<Change>,
        sink: &mpsc::UnboundedSender<Notification>,
        request: RequestId,
    ) -> (usize, Result<Reply, EntityError>) {
        let parts = copies
            .into_iter()
            .map(|copies| Part {
                sends: if copies.accepted.is_empty() {
                    Vec::new()
                } else {
                    vec![BatchedSend {
                        messages: copies.accepted.into(),
                        numbers: copies.numbers.into(),
                        request: Some(request),
                    }]
                },
                dead_letters: copies.dead_lettered,
            })
            .collect();
        let dispatched = self.dispatch(parts, changes, sink).await;
        let outcome = match (dispatched.written, dispatched.refused.into_iter().next()) {
            (Err(error), _) | (Ok(()), Some((_, error))) => Err(error),
            (Ok(()), None) => Ok(Reply::Done),
        };
        (dispatched.answering, outcome)
    }

    /// Hands each subscription its part of one or more publishes, `parts` in subscription
    /// order. In memory each gets its dead letters and a [`Command::SendBatch`]. Durable,
    /// each gets a [`Command::Stage`] and hands back its staged turn, and the topic writes
    /// its own `changes` and every staged turn as one record; each subscription is then
    /// told the outcome and answers `sink` as for any batch. Nothing here waits for a
    /// subscription's answer on `sink`, only for its staged turn.
    pub(super) async fn dispatch(
        &self,
        parts: Vec<Part>,
        changes: Vec<Change>,
        sink: &NotificationSender,
    ) -> Dispatched {
        let mut dispatched = Dispatched {
            answering: 0,
            refused: Vec::new(),
            written: Ok(()),
        };
        let Some((storage, key)) = &self.storage else {
            for (handle, part) in self.handles.iter().zip(parts) {
                if !part.dead_letters.is_empty() {
                    let messages = part.dead_letters;
                    let _ = handle.send(Command::DeadLetterOnArrival { messages }).await;
                }
                if part.sends.is_empty() {
                    continue;
                }
                let command = Command::SendBatch {
                    sends: part.sends,
                    sink: sink.clone(),
                };
                match handle.send_or_give_back(command).await {
                    Ok(()) => dispatched.answering += 1,
                    Err((error, Command::SendBatch { sends, .. })) => {
                        dispatched.refused.push((sends, error));
                    }
                    Err(_) => {}
                }
            }
            return dispatched;
        };
        let (staged_sender, mut staged) = mpsc::unbounded_channel();
        for (handle, part) in self.handles.iter().zip(parts) {
            if part.sends.is_empty() && part.dead_letters.is_empty() {
                continue;
            }
            let answers = !part.sends.is_empty();
            let command = Command::Stage {
                sends: part.sends,
                dead_letters: part.dead_letters,
                sink: sink.clone(),
                staged: staged_sender.clone(),
            };
            match handle.send_or_give_back(command).await {
                Ok(()) => dispatched.answering += usize::from(answers),
                Err((error, Command::Stage { sends, .. })) if !sends.is_empty() => {
                    dispatched.refused.push((sends, error));
                }
                Err(_) => {}
            }
        }
        // Every subscription hands its staged turn over, or lets go of its sender unused.
        drop(staged_sender);
        let mut batch = vec![(key.clone(), changes)];
        let mut waiting = Vec::new();
        while let Some(turn) = staged.recv().await {
            batch.push((turn.entity, turn.changes));
            waiting.push(turn.durable);
        }
        batch.retain(|(_, changes)| !changes.is_empty());
        let written = if batch.is_empty() {
            Ok(())
        } else {
            storage.append_batch(batch).await
        };
        if let Err(error) = &written {
            tracing::error!(topic = %key, %error, "cannot store a publish durably; it is refused");
        }
        for durable in waiting {
            let _ = durable.send(written.clone());
        }
        dispatched.written = written.map_err(|error| {
            EntityError::StorageFailed(format!(
                "The broker could not store the operation durably: {error}"
            ))
        });
        dispatched
    }

    /// Hands each subscription its copies at once (with durable storage their syncs are
    /// shared) and waits until all have stored them.
    pub(super) async fn deliver(
        &self,
        copies: Vec<Copies>,
        changes: Vec<Change>,
        sink: &mpsc::UnboundedSender<Notification>,
        replies: &mut mpsc::UnboundedReceiver<Notification>,
    ) -> Result<Reply, EntityError> {
        let (waiting, mut outcome) = self
            .send_copies(copies, changes, sink, RequestId(u64::MAX))
            .await;
        for _ in 0..waiting {
            match replies.recv().await {
                Some(Notification::Replies { replies }) => {
                    if let Some((_, Err(error))) = replies.into_iter().find(|(_, r)| r.is_err()) {
                        outcome = Err(error);
                    }
                }
                Some(_) => {}
                None => break,
            }
        }
        outcome
    }
}
