//! AMQP 1.0 transactions as Service Bus implements them (AMQP 1.0 part 4; rules TXN-1..4):
//! a client attaches a link to the `amqp:coordinator`, declares a transaction, sends
//! messages and settles deliveries under its id (`transactional-state`), and discharges it
//! (commit or roll back).
//!
//! The connection holds each transaction's work until the discharge; then it goes to one
//! entity in one command ([`Command::Commit`]), which applies all of it in one turn — one
//! durable log record — or none of it. As in the cloud a transaction works on one entity:
//! the first operation names it, and an operation on another entity is refused, except
//! sends through it (send-via: a sender link whose target is the transaction's entity and
//! whose `com.microsoft:transfer-destination-address` names the destination), which wait in
//! that entity's outbox and move on once committed (to the transfer dead-letter queue if
//! the destination refuses them). A roll-back, a closed coordinator link or a closed
//! connection leaves no trace: nothing reached an entity, and locks settled in the
//! transaction stay held until they expire or are settled again.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use fe2o3_amqp_types::definitions::Role;
use fe2o3_amqp_types::messaging::{Accepted, DeliveryState, Outcome};
use fe2o3_amqp_types::primitives::Binary;
use fe2o3_amqp_types::transaction::{Declare, Declared, Discharge, TransactionalState};

use super::connection::{Connection, ConnectionError, Pending};
use super::dispositions::{disposition, rejected};
use super::links::SendTarget;
use super::log_text::LogText;
use crate::amqp::errors::{self, Failure};
use crate::amqp::request;
use crate::broker::entity::{Command, EntityHandle, ReplyTo, TransactionWork};
use crate::broker::message::Message;
use crate::broker::topic::TopicCommand;
use crate::broker::types::{EntityError, LockToken, Settlement};

/// Operations one transaction may hold (the cloud's quota: 100 messages per transaction).
pub const MAX_OPERATIONS: usize = 100;
/// Transactions one connection may have open at once.
pub const MAX_OPEN: usize = 64;
/// Message bytes one connection may hold in open transactions.
pub const MAX_HELD_BYTES: usize = 64 * 1024 * 1024;

const TRANSACTION_ROLLBACK: &str = "amqp:transaction:rollback";
const UNKNOWN_ID: &str = "amqp:transaction:unknown-id";

/// Transaction ids are unique across the broker's connections.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);
/// Coordinator links are told apart by a number of their own.
static NEXT_COORDINATOR: AtomicU64 = AtomicU64::new(1);

/// A number for a new coordinator link.
pub fn next_coordinator() -> u64 {
    NEXT_COORDINATOR.fetch_add(1, Ordering::Relaxed)
}

/// The entity a transaction works on.
#[derive(Debug, Clone)]
enum Scope {
    /// A queue or subscription: everything goes in one [`Command::Commit`].
    Entity(EntityHandle),
    /// A topic: only sends, published in one batch at commit.
    Topic(crate::broker::topic::TopicHandle),
}

impl Scope {
    fn path(&self) -> &str {
        match self {
            Scope::Entity(handle) => &handle.path,
            Scope::Topic(handle) => &handle.path,
        }
    }
}

/// One open transaction.
#[derive(Debug)]
struct Transaction {
    /// The coordinator link that declared it (closing that link rolls it back).
    coordinator: u64,
    /// The entity its work is on, fixed by the first operation.
    scope: Option<Scope>,
    /// The work so far.
    work: TransactionWork,
    /// Message bytes it holds.
    bytes: usize,
    /// Set when an operation in it was refused: it can only roll back.
    failure: Option<String>,
    /// Our deliveries it settles (channel, delivery id): they stay unsettled on the
    /// session until the commit, so that after a roll-back the client can settle them
    /// again.
    deliveries: Vec<(u16, u32)>,
}

/// A connection's open transactions.
#[derive(Debug, Default)]
pub struct Transactions {
    open: HashMap<Bytes, Transaction>,
    held_bytes: usize,
}

/// One operation offered to a transaction.
enum Operation {
    Send(Vec<Message>),
    Via(Arc<str>, Vec<Message>),
    Settle(LockToken, Settlement),
}

impl Operation {
    fn count(&self) -> usize {
        match self {
            Operation::Send(messages) | Operation::Via(_, messages) => messages.len(),
            Operation::Settle(..) => 1,
        }
    }

    fn bytes(&self) -> usize {
        match self {
            Operation::Send(messages) | Operation::Via(_, messages) => {
                messages.iter().map(|message| message.size()).sum()
            }
            Operation::Settle(..) => 0,
        }
    }
}

fn failure(condition: &'static str, description: impl Into<String>) -> Failure {
    Failure::new(condition, description.into(), 400)
}

/// A coordinator's control message: `declare` or `discharge` in an amqp-value body.
enum Control {
    Declare,
    Discharge { txn_id: Bytes, fail: bool },
}

fn parse_control(payload: &Bytes) -> Result<Control, String> {
    let request = request::parse(payload).map_err(|error| error.to_string())?;
    let body = serde_amqp::to_vec(&request.body).map_err(|error| error.to_string())?;
    if let Ok(discharge) = serde_amqp::from_slice::<Discharge>(&body) {
        return Ok(Control::Discharge {
            txn_id: Bytes::from(discharge.txn_id.into_vec()),
            fail: discharge.fail.unwrap_or(false),
        });
    }
    if serde_amqp::from_slice::<Declare>(&body).is_ok() {
        return Ok(Control::Declare);
    }
    Err("a coordinator accepts only declare and discharge messages".to_string())
}

/// The state that answers an operation taken into a transaction.
fn transactional(txn_id: &Bytes, outcome: Option<Outcome>) -> DeliveryState {
    DeliveryState::TransactionalState(TransactionalState {
        txn_id: Binary::from(txn_id.to_vec()),
        outcome,
    })
}

/// A refused transactional operation: `rejected` inside the transactional state (AMQP 1.0
/// §4.4.1: the resource answers with the transaction's id and a terminal outcome).
fn transactional_refusal(txn_id: &Bytes, refusal: &Failure) -> DeliveryState {
    transactional(
        txn_id,
        Some(Outcome::Rejected(fe2o3_amqp_types::messaging::Rejected {
            error: Some(refusal.to_error()),
        })),
    )
}

impl Connection {
    /// A transfer on a coordinator link: declare or discharge.
    pub(super) async fn coordinator_transfer(
        &mut self,
        channel: u16,
        coordinator: u64,
        delivery_id: u32,
        settled: bool,
        payload: &Bytes,
    ) -> Result<(), ConnectionError> {
        let answer = |connection: &mut Connection, state: DeliveryState| {
            if settled {
                return Ok(());
            }
            connection.write(channel, disposition(Role::Receiver, delivery_id, state))
        };
        let control = match parse_control(payload) {
            Ok(control) => control,
            Err(text) => {
                return answer(self, rejected(&failure(errors::DECODE_ERROR, text)));
            }
        };
        match control {
            Control::Declare => {
                if self.transactions.open.len() >= MAX_OPEN {
                    let refusal = failure(
                        errors::RESOURCE_LIMIT_EXCEEDED,
                        format!(
                            "A connection may have at most {MAX_OPEN} transactions open; discharge one first."
                        ),
                    );
                    return answer(self, rejected(&refusal));
                }
                let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
                let txn_id = Bytes::copy_from_slice(format!("txn:{id}").as_bytes());
                self.transactions.open.insert(
                    txn_id.clone(),
                    Transaction {
                        coordinator,
                        scope: None,
                        work: TransactionWork::default(),
                        bytes: 0,
                        failure: None,
                        deliveries: Vec::new(),
                    },
                );
                tracing::debug!(txn = %LogText(&String::from_utf8_lossy(&txn_id)), "transaction declared");
                answer(
                    self,
                    DeliveryState::Declared(Declared {
                        txn_id: Binary::from(txn_id.to_vec()),
                    }),
                )
            }
            Control::Discharge { txn_id, fail } => {
                let Some(transaction) = self.transactions.open.remove(&txn_id) else {
                    let refusal = failure(
                        UNKNOWN_ID,
                        "The transaction id is not known on this connection (transactions cannot span connections).",
                    );
                    return answer(self, rejected(&refusal));
                };
                self.transactions.held_bytes -= transaction.bytes;
                if fail {
                    tracing::debug!("transaction rolled back");
                    return answer(self, DeliveryState::Accepted(Accepted {}));
                }
                if let Some(reason) = transaction.failure {
                    let refusal = failure(
                        TRANSACTION_ROLLBACK,
                        format!("The transaction was rolled back: {reason}"),
                    );
                    return answer(self, rejected(&refusal));
                }
                let Some(scope) = transaction.scope else {
                    return answer(self, DeliveryState::Accepted(Accepted {}));
                };
                let reply = ReplyTo {
                    sink: self.notifications.clone(),
                    request: self.register(Pending::Discharge {
                        channel,
                        delivery_id,
                        settled,
                        deliveries: transaction.deliveries,
                    }),
                };
                let request = reply.request;
                let work = transaction.work;
                let sent = match scope {
                    Scope::Entity(entity) => {
                        entity
                            .send(Command::Commit {
                                work: Box::new(work),
                                reply,
                            })
                            .await
                    }
                    Scope::Topic(topic) => {
                        topic
                            .send(TopicCommand::Publish {
                                messages: work.sends,
                                reply: Some(reply),
                            })
                            .await
                    }
                };
                if let Err(error) = sent {
                    self.pending.remove(&request);
                    return answer(self, rejected(&rollback(&error)));
                }
                Ok(())
            }
        }
    }

    /// The outcome of a discharge the entity answered.
    pub(super) fn discharged(
        &mut self,
        channel: u16,
        delivery_id: u32,
        settled: bool,
        deliveries: Vec<(u16, u32)>,
        result: Result<(), EntityError>,
    ) -> Result<(), ConnectionError> {
        if result.is_ok() {
            // Settled for good.
            for (session, delivery) in deliveries {
                if let Some(session) = self.sessions.get_mut(&session) {
                    session.unsettled.remove(&delivery);
                }
            }
        }
        if settled || !self.sessions.contains_key(&channel) {
            return Ok(());
        }
        let state = match result {
            Ok(()) => DeliveryState::Accepted(Accepted {}),
            Err(error) => {
                tracing::info!(%error, "transaction rolled back at commit");
                rejected(&rollback(&error))
            }
        };
        self.write(channel, disposition(Role::Receiver, delivery_id, state))
    }

    /// A closed coordinator link rolls back the transactions it declared.
    pub(super) fn coordinator_closed(&mut self, coordinator: u64) {
        let mut released = 0;
        self.transactions.open.retain(|_, transaction| {
            let keep = transaction.coordinator != coordinator;
            if !keep {
                released += transaction.bytes;
            }
            keep
        });
        self.transactions.held_bytes -= released;
    }

    /// A client transfer under a transaction (or on a send-via link): taken into the
    /// transaction and answered with a transactional `accepted`, or refused.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn transactional_send(
        &mut self,
        channel: u16,
        delivery_id: u32,
        settled: bool,
        txn_id: Option<Bytes>,
        messages: Vec<Message>,
        target: SendTarget,
        via: Option<Arc<str>>,
    ) -> Result<(), ConnectionError> {
        let scope = match target {
            SendTarget::Queue(handle) => Scope::Entity(handle),
            SendTarget::Topic(handle) => Scope::Topic(handle),
        };
        let operation = match via {
            Some(destination) if *destination != *scope.path() => {
                Operation::Via(destination, messages)
            }
            _ => Operation::Send(messages),
        };
        let Some(txn_id) = txn_id else {
            // A send-via outside a transaction: a transaction of its own, committed now.
            return self
                .commit_alone(channel, delivery_id, settled, scope, operation)
                .await;
        };
        let state = match self.take_into(&txn_id, scope, operation) {
            Ok(()) => transactional(&txn_id, Some(Outcome::Accepted(Accepted {}))),
            Err(refusal) => transactional_refusal(&txn_id, &refusal),
        };
        if settled {
            return Ok(());
        }
        self.write(channel, disposition(Role::Receiver, delivery_id, state))
    }

    /// A client settlement under a transaction: held until the discharge. Returns the
    /// state to echo, or the refusal.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn transactional_settle(
        &mut self,
        txn_id: &Bytes,
        channel: u16,
        delivery_id: u32,
        unsettled: super::session::Unsettled,
        entity: EntityHandle,
        settlement: Settlement,
        echo: DeliveryState,
    ) -> DeliveryState {
        let token = unsettled.token;
        let outcome = match echo {
            DeliveryState::Accepted(accepted) => Outcome::Accepted(accepted),
            DeliveryState::Rejected(rejected) => Outcome::Rejected(rejected),
            DeliveryState::Released(released) => Outcome::Released(released),
            DeliveryState::Modified(modified) => Outcome::Modified(modified),
            _ => Outcome::Accepted(Accepted {}),
        };
        match self.take_into(
            txn_id,
            Scope::Entity(entity),
            Operation::Settle(token, settlement),
        ) {
            Ok(()) => {
                if let Some(transaction) = self.transactions.open.get_mut(txn_id) {
                    transaction.deliveries.push((channel, delivery_id));
                }
                if let Some(session) = self.sessions.get_mut(&channel) {
                    session.unsettled.insert(delivery_id, unsettled);
                }
                transactional(txn_id, Some(outcome))
            }
            Err(refusal) => transactional_refusal(txn_id, &refusal),
        }
    }

    /// `$management` settlements (`update-disposition`) under a transaction.
    pub(super) fn transactional_management_settle(
        &mut self,
        txn_id: &Bytes,
        entity: EntityHandle,
        tokens: Vec<LockToken>,
        settlement: Settlement,
    ) -> Result<(), Failure> {
        for token in tokens {
            self.take_into(
                txn_id,
                Scope::Entity(entity.clone()),
                Operation::Settle(token, settlement.clone()),
            )?;
        }
        Ok(())
    }

    /// Adds an operation to an open transaction, or says why not (a refused operation
    /// also dooms the transaction to roll back, as its work is no longer what the client
    /// did).
    fn take_into(
        &mut self,
        txn_id: &Bytes,
        scope: Scope,
        operation: Operation,
    ) -> Result<(), Failure> {
        let held_bytes = self.transactions.held_bytes;
        let Some(transaction) = self.transactions.open.get_mut(txn_id) else {
            return Err(failure(
                UNKNOWN_ID,
                "The transaction id is not known on this connection (transactions cannot span connections).",
            ));
        };
        let refusal = check(transaction, &scope, &operation, held_bytes);
        if let Err(refusal) = refusal {
            transaction
                .failure
                .get_or_insert_with(|| refusal.description.clone());
            return Err(refusal);
        }
        let bytes = operation.bytes();
        transaction.bytes += bytes;
        self.transactions.held_bytes += bytes;
        if transaction.scope.is_none() {
            transaction.scope = Some(scope);
        }
        let work = &mut transaction.work;
        match operation {
            Operation::Send(messages) => work.sends.extend(messages),
            Operation::Via(destination, messages) => work.via.extend(
                messages
                    .into_iter()
                    .map(|message| (destination.clone(), message)),
            ),
            Operation::Settle(token, settlement) => work.settlements.push((token, settlement)),
        }
        Ok(())
    }

    /// A send-via outside a transaction: committed through the via entity at once.
    async fn commit_alone(
        &mut self,
        channel: u16,
        delivery_id: u32,
        settled: bool,
        scope: Scope,
        operation: Operation,
    ) -> Result<(), ConnectionError> {
        let Operation::Via(destination, messages) = operation else {
            return Ok(());
        };
        let Scope::Entity(entity) = scope else {
            return Ok(());
        };
        let reply = (!settled).then(|| ReplyTo {
            sink: self.notifications.clone(),
            request: self.register(Pending::Enqueue {
                channel,
                delivery_id,
            }),
        });
        let work = TransactionWork {
            via: messages
                .into_iter()
                .map(|message| (destination.clone(), message))
                .collect(),
            ..TransactionWork::default()
        };
        let (sink, request) = match reply {
            Some(reply) => (reply.clone(), Some(reply.request)),
            None => (ReplyTo::oneshot().0, None),
        };
        let sent = entity
            .send(Command::Commit {
                work: Box::new(work),
                reply: sink,
            })
            .await;
        if let (Err(error), Some(request)) = (sent, request) {
            self.pending.remove(&request);
            let refusal = errors::entity_failure(&error);
            self.write(
                channel,
                disposition(Role::Receiver, delivery_id, rejected(&refusal)),
            )?;
        }
        Ok(())
    }
}

/// Whether `operation` may join `transaction`.
fn check(
    transaction: &Transaction,
    scope: &Scope,
    operation: &Operation,
    held_bytes: usize,
) -> Result<(), Failure> {
    if let Some(current) = &transaction.scope
        && current.path() != scope.path()
    {
        return Err(failure(
            errors::NOT_ALLOWED,
            format!(
                "Local transactions spanning multiple top-level entities such as Queue or Topic are not allowed unless the sends go through the transaction's first entity ('{}') with a via sender; this operation is on '{}'.",
                current.path(),
                scope.path()
            ),
        ));
    }
    if matches!(scope, Scope::Topic(_)) && !matches!(operation, Operation::Send(_)) {
        return Err(failure(
            errors::NOT_ALLOWED,
            "A topic cannot be the entity a send-via goes through; use a queue or subscription.",
        ));
    }
    if transaction.work.operations() + operation.count() > MAX_OPERATIONS {
        return Err(failure(
            errors::RESOURCE_LIMIT_EXCEEDED,
            format!(
                "Cannot have more than {MAX_OPERATIONS} messages or settlements in one transaction."
            ),
        ));
    }
    if held_bytes + operation.bytes() > MAX_HELD_BYTES {
        return Err(failure(
            errors::RESOURCE_LIMIT_EXCEEDED,
            format!(
                "Open transactions on this connection would hold more than {MAX_HELD_BYTES} bytes of messages; discharge them first."
            ),
        ));
    }
    Ok(())
}

/// A commit the entity refused: the transaction rolled back, and why.
fn rollback(error: &EntityError) -> Failure {
    let cause = errors::entity_failure(error);
    Failure::new(
        TRANSACTION_ROLLBACK,
        format!(
            "The transaction was rolled back: {} ({})",
            cause.description, cause.condition
        ),
        400,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use fe2o3_amqp_types::messaging::Message;
    use serde_amqp::ser::to_vec;

    fn encoded<T: serde::Serialize>(body: T) -> Bytes {
        let message = Message::builder().value(body).build();
        Bytes::from(
            to_vec(&fe2o3_amqp_types::messaging::message::__private::Serializable(message))
                .expect("encodes"),
        )
    }

    #[test]
    fn control_messages_are_declare_or_discharge_and_nothing_else() {
        // hostile peers: anything else on a coordinator link is a decode error
        assert!(matches!(
            parse_control(&encoded(Declare { global_id: None })),
            Ok(Control::Declare)
        ));
        let discharge = Discharge {
            txn_id: Binary::from(b"txn:7".to_vec()),
            fail: Some(true),
        };
        match parse_control(&encoded(discharge)) {
            Ok(Control::Discharge { txn_id, fail }) => {
                assert_eq!(&txn_id[..], b"txn:7");
                assert!(fail);
            }
            _ => panic!("a discharge"),
        }
        assert!(parse_control(&encoded("declare me, please".to_string())).is_err());
        assert!(parse_control(&Bytes::from_static(&[0x00, 0x53, 0x77, 0xff])).is_err());
        assert!(parse_control(&Bytes::new()).is_err());
    }
}
