//! A topic: it holds no messages (rule DLQ-5); each message sent to it is copied to every
//! subscription. The message bytes are shared (`Arc`), not copied per subscription.
//! The topic task awaits its subscriptions' replies (await order: topic → subscription,
//! never the reverse) and answers the sender once every copy is stored.

use std::sync::Arc;

use tokio::sync::mpsc;

use super::entity::{Command, EntityHandle, Notification, Reply, ReplyTo, RequestId};
use super::message::Message;
use super::types::EntityError;

/// A request to a topic.
#[derive(Debug)]
pub struct Publish {
    /// The messages of one transfer.
    pub messages: Vec<Arc<Message>>,
    /// Who waits for the outcome.
    pub reply: Option<ReplyTo>,
}

/// A cheap handle to a topic task.
#[derive(Debug, Clone)]
pub struct TopicHandle {
    /// The topic path as configured.
    pub path: Arc<str>,
    /// The task's bounded inbox.
    publishes: mpsc::Sender<Publish>,
}

impl TopicHandle {
    /// Publishes; fails with `NotFound` when the topic is gone.
    pub async fn publish(&self, publish: Publish) -> Result<(), EntityError> {
        self.publishes
            .send(publish)
            .await
            .map_err(|_| EntityError::NotFound(self.path.to_string()))
    }
}

/// Starts a topic's fan-out task.
pub fn spawn(path: String, subscriptions: Vec<EntityHandle>) -> TopicHandle {
    let (publishes, mut inbox) = mpsc::channel::<Publish>(1024);
    let handle = TopicHandle {
        path: path.into(),
        publishes,
    };
    tokio::spawn(async move {
        let (sink, mut replies) = mpsc::unbounded_channel();
        while let Some(publish) = inbox.recv().await {
            let mut outcome: Result<Reply, EntityError> = Ok(Reply::Done);
            for (index, subscription) in subscriptions.iter().enumerate() {
                let reply = ReplyTo {
                    sink: sink.clone(),
                    request: RequestId(index as u64),
                };
                let command = Command::Send {
                    messages: publish.messages.clone(),
                    reply: Some(reply),
                };
                if let Err(error) = subscription.send(command).await {
                    outcome = Err(error);
                    continue;
                }
                if let Some(Notification::Reply {
                    result: Err(error), ..
                }) = replies.recv().await
                {
                    outcome = Err(error);
                }
            }
            if let Some(reply) = publish.reply {
                reply.send(outcome);
            }
        }
    });
    handle
}
