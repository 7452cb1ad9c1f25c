//! The explorer's changes: taking and settling messages by sequence number, the
//! single-message actions, dead-letter resubmit, moves, purge and the send form — each a
//! command to the entity actors, as over AMQP.

use super::*;

impl Api<'_> {
    /// Locks (peek-lock) or removes (receive-and-delete) messages by sequence number.
    async fn take(
        &self,
        handle: &EntityHandle,
        path: &str,
        queue: SubQueue,
        numbers: Vec<SequenceNumber>,
        mode: ReceiveMode,
    ) -> Result<Vec<Delivery>, Failure> {
        let (reply, answer) = ReplyTo::oneshot();
        handle
            .send(Command::Take {
                sub_queue: queue,
                sequence_numbers: numbers,
                mode,
                reply,
            })
            .await?;
        match answer_of(answer, path).await? {
            Reply::Messages(messages) => Ok(messages),
            _ => Ok(Vec::new()),
        }
    }

    async fn settle(
        &self,
        handle: &EntityHandle,
        path: &str,
        delivery: &Delivery,
        settlement: Settlement,
    ) -> Result<(), Failure> {
        let Some(lock) = delivery.lock else {
            return Ok(());
        };
        let (reply, answer) = ReplyTo::oneshot();
        handle
            .send(Command::Settle {
                token: lock.token,
                settlement,
                reply: Some(reply),
            })
            .await?;
        answer_of(answer, path).await?;
        Ok(())
    }

    pub(super) async fn action(&self, request: &Json) -> Answer {
        let path = text_field(request, "path")?;
        let queue = sub_queue(request.get("queue").and_then(Json::as_str))?;
        let numbers = sequence_numbers(request)?;
        let action = text_field(request, "action")?;
        let reason = request.get("reason").and_then(Json::as_str);
        let description = request.get("description").and_then(Json::as_str);
        if action == "cancel-scheduled" {
            let (reply, answer) = ReplyTo::oneshot();
            match self.store(&path)? {
                Store::Entity(handle) => {
                    handle
                        .send(Command::CancelScheduled {
                            sequence_numbers: numbers.clone(),
                            reply,
                        })
                        .await?
                }
                Store::Topic(handle) => {
                    handle
                        .send(TopicCommand::CancelScheduled {
                            sequence_numbers: numbers.clone(),
                            reply,
                        })
                        .await?
                }
            }
            answer_of(answer, &path).await?;
            return Ok((StatusCode::OK, json!({ "done": numbers.len() })));
        }
        let settlement = match action.as_str() {
            "receive" => None,
            "complete" => Some(Settlement::Complete),
            "abandon" => Some(Settlement::Abandon {
                properties: Vec::new(),
            }),
            "defer" => Some(Settlement::Defer {
                properties: Vec::new(),
            }),
            "dead-letter" => Some(Settlement::DeadLetter {
                reason: Some(reason.unwrap_or("ExplorerDeadLettered").to_string()),
                description: Some(
                    description
                        .unwrap_or("Dead-lettered from the ferrobus explorer.")
                        .to_string(),
                ),
                properties: Vec::new(),
            }),
            other => {
                return Err(Failure::bad(format!(
                    "Unknown action '{other}': use complete, receive, abandon, dead-letter, defer or cancel-scheduled."
                )));
            }
        };
        let handle = self.entity_handle(&path)?;
        let Some(settlement) = settlement else {
            let taken = self
                .take(
                    &handle,
                    &path,
                    queue,
                    numbers,
                    ReceiveMode::ReceiveAndDelete,
                )
                .await?;
            return Ok((StatusCode::OK, json!({ "done": taken.len() })));
        };
        let taken = self
            .take(&handle, &path, queue, numbers, ReceiveMode::PeekLock)
            .await?;
        let mut done = 0;
        for delivery in &taken {
            self.settle(&handle, &path, delivery, settlement.clone())
                .await?;
            done += 1;
        }
        Ok((StatusCode::OK, json!({ "done": done })))
    }

    pub(super) async fn resubmit(&self, request: &Json) -> Answer {
        let path = text_field(request, "path")?;
        let queue = sub_queue(request.get("queue").and_then(Json::as_str).or(Some("dlq")))?;
        let handle = self.entity_handle(&path)?;
        let target = match request.get("target").and_then(Json::as_str) {
            Some(target) if !target.trim().is_empty() => target.trim().trim_matches('/'),
            _ => path.as_str(),
        }
        .to_string();
        if target.eq_ignore_ascii_case(&path) && queue == SubQueue::Main {
            return Err(Failure::bad(
                "Resubmitting a main queue's messages to itself would only duplicate them; choose the dlq or another target.",
            ));
        }
        let target_entity = self.slot(&target)?.entity;
        let all = request.get("all").and_then(Json::as_bool).unwrap_or(false);
        let mut resubmitted = 0usize;
        if all {
            let store = Store::Entity(handle.clone());
            let mut from = 0;
            while resubmitted < MAX_RESUBMIT {
                let batch = self.peek(&store, &path, queue, from, PEEK_BATCH).await?;
                let Some(last) = batch.last() else { break };
                from = last.sequence_number.0 + 1;
                let exhausted = batch.len() < PEEK_BATCH;
                let numbers: Vec<SequenceNumber> = batch
                    .iter()
                    .filter(|delivery| {
                        delivery.lock.is_none() && delivery.state() != MessageState::Scheduled
                    })
                    .map(|delivery| delivery.sequence_number)
                    .take(MAX_RESUBMIT - resubmitted)
                    .collect();
                resubmitted += self
                    .move_messages(&handle, &path, queue, numbers, &target_entity, &target)
                    .await?;
                if exhausted {
                    break;
                }
            }
        } else {
            let numbers = sequence_numbers(request)?;
            resubmitted = self
                .move_messages(&handle, &path, queue, numbers, &target_entity, &target)
                .await?;
        }
        Ok((
            StatusCode::OK,
            json!({ "resubmitted": resubmitted, "target": target }),
        ))
    }

    /// Locks the messages, sends copies to the target, then completes them (or unlocks
    /// them when the target refused): a message is never lost nor left locked.
    async fn move_messages(
        &self,
        handle: &EntityHandle,
        path: &str,
        queue: SubQueue,
        numbers: Vec<SequenceNumber>,
        target: &Entity,
        target_path: &str,
    ) -> Result<usize, Failure> {
        if numbers.is_empty() {
            return Ok(0);
        }
        let taken = match self
            .take(handle, path, queue, numbers.clone(), ReceiveMode::PeekLock)
            .await
        {
            Ok(taken) => taken,
            // One was locked or removed meanwhile: the others one by one.
            Err(failure) if failure.status == StatusCode::NOT_FOUND && numbers.len() > 1 => {
                let mut taken = Vec::new();
                for number in numbers {
                    if let Ok(mut one) = self
                        .take(handle, path, queue, vec![number], ReceiveMode::PeekLock)
                        .await
                    {
                        taken.append(&mut one);
                    }
                }
                taken
            }
            Err(failure) => return Err(failure),
        };
        if taken.is_empty() {
            return Ok(0);
        }
        let copies: Vec<Message> = taken
            .iter()
            .map(|delivery| resubmitted_copy(&delivery.message))
            .collect();
        let sent = send_to(target, target_path, copies).await;
        let settlement = if sent.is_ok() {
            Settlement::Complete
        } else {
            Settlement::Release
        };
        for delivery in &taken {
            self.settle(handle, path, delivery, settlement.clone())
                .await?;
        }
        sent?;
        Ok(taken.len())
    }

    pub(super) async fn purge(&self, request: &Json) -> Answer {
        let path = text_field(request, "path")?;
        let queue = sub_queue(request.get("queue").and_then(Json::as_str))?;
        let confirm = request.get("confirm").and_then(Json::as_str).unwrap_or("");
        if !confirm.trim().trim_matches('/').eq_ignore_ascii_case(&path) {
            return Err(Failure::bad(format!(
                "Purging deletes messages for good: repeat the entity path '{path}' in 'confirm'."
            )));
        }
        let handle = self.entity_handle(&path)?;
        let (reply, answer) = ReplyTo::oneshot();
        handle
            .send(Command::Purge {
                sub_queue: queue,
                before: None,
                session_id: None,
                max: usize::MAX,
                reply,
            })
            .await?;
        let deleted = match answer_of(answer, &path).await? {
            Reply::Count(count) => count,
            _ => 0,
        };
        tracing::info!(entity = %path, deleted, "messages purged from the explorer");
        Ok((StatusCode::OK, json!({ "deleted": deleted })))
    }

    pub(super) async fn send(&self, request: &Json) -> Answer {
        let path = text_field(request, "path")?;
        let slot = self.slot(&path)?;
        if matches!(slot.entity, Entity::Subscription(_)) {
            return Err(Failure::bad(format!(
                "'{path}' is a subscription: send to its topic."
            )));
        }
        let count = match request.get("count") {
            None | Some(Json::Null) => 1,
            Some(value) => value
                .as_u64()
                .filter(|count| (1..=MAX_SEND_COUNT).contains(count))
                .ok_or_else(|| {
                    Failure::bad(format!("'count' must be from 1 to {MAX_SEND_COUNT}."))
                })?,
        };
        let encoded = build_message(request)?;
        let limit = self.admin.registry.max_message_size(&path);
        if encoded.len() as u64 > limit {
            return Err(Failure {
                status: StatusCode::PAYLOAD_TOO_LARGE,
                text: format!(
                    "The message ({} bytes) exceeds the entity's limit of {limit} bytes.",
                    encoded.len()
                ),
            });
        }
        let mut messages = Vec::new();
        for _ in 0..count {
            let message = amqp_message::parse_message(encoded.clone())
                .map_err(|error| Failure::bad(format!("The message is invalid: {error}")))?;
            messages.push(message);
        }
        let scheduled = messages
            .first()
            .is_some_and(|message| message.extras().scheduled_enqueue_time.is_some());
        let reply = match (&slot.entity, scheduled) {
            (Entity::Topic(handle), true) => {
                let (reply, answer) = ReplyTo::oneshot();
                handle
                    .send(TopicCommand::Schedule { messages, reply })
                    .await?;
                answer_of(answer, &path).await?
            }
            (entity, _) => send_to(entity, &path, messages).await?,
        };
        let numbers: Vec<i64> = match reply {
            Reply::SequenceNumbers(numbers) => numbers.iter().map(|number| number.0).collect(),
            _ => Vec::new(),
        };
        Ok((
            StatusCode::OK,
            json!({ "sent": count, "sequence_numbers": numbers }),
        ))
    }
}

/// Sends messages into a queue, subscription (straight into it: no filters) or topic, and
/// waits until they are stored.
async fn send_to(entity: &Entity, path: &str, messages: Vec<Message>) -> Result<Reply, Failure> {
    let (reply, answer) = ReplyTo::oneshot();
    match entity {
        Entity::Queue(handle) | Entity::Subscription(handle) => {
            handle
                .send(Command::Send {
                    messages: messages.into(),
                    reply: Some(reply),
                })
                .await?
        }
        Entity::Topic(handle) => {
            handle
                .send(TopicCommand::Publish {
                    messages,
                    reply: Some(reply),
                })
                .await?
        }
    }
    answer_of(answer, path).await
}

/// A dead-lettered message as a new message: the sender's sections, without what the
/// broker added (dead-letter reason, source, forwarding hops, scheduling).
fn resubmitted_copy(message: &Message) -> Message {
    let mut copy = message.clone();
    copy.edit_extras(|extras| {
        extras.dead_letter_source = None;
        extras.extra_properties = Vec::new();
        extras.original_sequence_number = None;
        extras.scheduled_enqueue_time = None;
        extras.topic_sequence = None;
    });
    copy.set_hop_count(0);
    copy.remove_application_properties(&["DeadLetterReason", "DeadLetterErrorDescription"]);
    copy
}

fn sequence_numbers(request: &Json) -> Result<Vec<SequenceNumber>, Failure> {
    let numbers: Option<Vec<SequenceNumber>> = request
        .get("sequence_numbers")
        .and_then(Json::as_array)
        .map(|items| {
            items
                .iter()
                .map(|item| item.as_i64().map(SequenceNumber))
                .collect()
        })
        .unwrap_or(None);
    match numbers {
        Some(numbers) if !numbers.is_empty() && numbers.len() <= MAX_RESUBMIT => Ok(numbers),
        _ => Err(Failure::bad(format!(
            "The body needs 'sequence_numbers': 1 to {MAX_RESUBMIT} whole numbers."
        ))),
    }
}
