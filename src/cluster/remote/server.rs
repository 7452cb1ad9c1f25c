//! The server end: commands from the stream handed to local entity actors and topic
//! tasks, their notifications written back.

use std::collections::HashMap;
use std::future::Future;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::codec::{self, ClientFrame, Kind};
use super::{
    ACK_BATCH, Carried, FRAME_QUEUE, RemoteError, Target, WINDOW, read_frame, write_frames,
};
use crate::broker::entity::{Command, EntityHandle, Notification, NotificationSender, RequestId};
use crate::broker::topic::{TopicCommand, TopicHandle};
use crate::broker::types::EntityError;

/// Serves the client end ([`super::Proxy`]) on `io`: each command goes to what `lookup`
/// finds for its path (a [`Target`], or an [`EntityHandle`] where only entities are
/// served) — an entity command to an entity's actor, a topic command to a topic's task;
/// anything else is answered `NotFound` — and each notification back to the client's
/// sink. Returns when the stream ends (`Ok` when it ended cleanly between frames), having
/// dropped every sink of the stream: the actors see them closed.
pub async fn serve<IO, T>(io: IO, lookup: impl Fn(&str) -> Option<T>) -> Result<(), RemoteError>
where
    IO: AsyncRead + AsyncWrite,
    T: Into<Target>,
{
    let lookup = |path: &str| lookup(path).map(Into::into);
    let (control, control_queue) = mpsc::unbounded_channel();
    let (data, data_queue) = mpsc::channel(FRAME_QUEUE);
    let mut server = Server {
        sinks: HashMap::new(),
        entities: HashMap::new(),
        topics: HashMap::new(),
        control,
        data,
    };
    let (mut input, output) = tokio::io::split(io);
    let reader = async {
        loop {
            let Some(body) = read_frame(&mut input).await? else {
                return Ok(());
            };
            let frame = codec::decode_client_frame(&body, &mut |id| server.sink(id))
                .map_err(|error| RemoteError::Malformed(error.0))?;
            server.take(frame, &lookup).await?;
        }
    };
    let writer = write_frames(output, control_queue, data_queue, Vec::new);
    let result = tokio::select! {
        result = reader => result,
        result = writer => result,
    };
    if let Err(error) = &result {
        tracing::warn!(%error, "remote entity stream: closing");
    }
    result
}

struct Server {
    /// The client's sinks: the local sender commands carry, and the task writing what it
    /// gets onto the stream.
    sinks: HashMap<u64, (NotificationSender, JoinHandle<()>)>,
    /// Each entity path's queue to its forwarding task.
    entities: HashMap<String, mpsc::Sender<Command>>,
    /// Each topic path's queue to its forwarding task.
    topics: HashMap<String, mpsc::Sender<TopicCommand>>,
    control: mpsc::UnboundedSender<Vec<u8>>,
    data: mpsc::Sender<Vec<u8>>,
}

impl Drop for Server {
    /// The stream is gone: its sinks close (entities forget their receivers as they would
    /// a closed connection's).
    fn drop(&mut self) {
        for (_, (_, pump)) in self.sinks.drain() {
            pump.abort();
        }
    }
}

impl Server {
    /// The local sender for the client's sink `id`.
    fn sink(&mut self, id: u64) -> NotificationSender {
        let data = self.data.clone();
        self.sinks
            .entry(id)
            .or_insert_with(|| {
                let (sender, notifications) = mpsc::unbounded_channel();
                (sender, tokio::spawn(pump(id, notifications, data)))
            })
            .0
            .clone()
    }

    async fn take(
        &mut self,
        frame: ClientFrame,
        lookup: &impl Fn(&str) -> Option<Target>,
    ) -> Result<(), RemoteError> {
        match frame {
            ClientFrame::SinkClosed(id) => {
                if let Some((_, pump)) = self.sinks.remove(&id) {
                    // Once it has stopped, its receiver is gone: every later command of
                    // this stream finds the sink closed.
                    pump.abort();
                    let _ = pump.await;
                }
            }
            ClientFrame::Command { path, command } => route(
                &mut self.entities,
                &self.control,
                path,
                command,
                |path| match lookup(path) {
                    Some(Target::Entity(handle)) => Some(handle),
                    _ => None,
                },
            )?,
            ClientFrame::TopicCommand { path, command } => route(
                &mut self.topics,
                &self.control,
                path,
                command,
                |path| match lookup(path) {
                    Some(Target::Topic(handle)) => Some(handle),
                    _ => None,
                },
            )?,
        }
        Ok(())
    }
}

/// What takes a path's commands on this node: an entity's actor or a topic's task.
trait Actor: Send + Sync + 'static {
    /// What it takes.
    type Command: Carried;
    /// Hands it `command`; when it is gone, the error and the command back.
    fn hand(
        &self,
        command: Self::Command,
    ) -> impl Future<Output = Result<(), (EntityError, Self::Command)>> + Send;
}

impl Actor for EntityHandle {
    type Command = Command;

    fn hand(
        &self,
        command: Command,
    ) -> impl Future<Output = Result<(), (EntityError, Command)>> + Send {
        self.send_or_give_back(command)
    }
}

impl Actor for TopicHandle {
    type Command = TopicCommand;

    fn hand(
        &self,
        command: TopicCommand,
    ) -> impl Future<Output = Result<(), (EntityError, TopicCommand)>> + Send {
        self.send_or_give_back(command)
    }
}

/// Queues a command for its path's forwarding task, starting one with what `find` gives
/// for the path (none: the command is answered `NotFound`).
fn route<A: Actor>(
    forwarders: &mut HashMap<String, mpsc::Sender<A::Command>>,
    control: &mpsc::UnboundedSender<Vec<u8>>,
    path: String,
    mut command: A::Command,
    find: impl Fn(&str) -> Option<A>,
) -> Result<(), RemoteError> {
    let kind = <A::Command as Carried>::KIND;
    super::COMMANDS_SERVED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    loop {
        if let Some(forwarder) = forwarders.get(&path) {
            match forwarder.try_send(command) {
                Ok(()) => return Ok(()),
                Err(mpsc::error::TrySendError::Full(_)) => {
                    return Err(RemoteError::Protocol(format!(
                        "more than {WINDOW} commands for '{path}' on their way"
                    )));
                }
                Err(mpsc::error::TrySendError::Closed(given_back)) => {
                    // Its actor stopped: look the path up again.
                    forwarders.remove(&path);
                    command = given_back;
                }
            }
        }
        let Some(actor) = find(&path) else {
            command.refuse(EntityError::NotFound(path.clone()));
            let _ = control.send(codec::encode_ack(kind, &path, 1));
            return Ok(());
        };
        let (queue, commands) = mpsc::channel(WINDOW);
        tokio::spawn(forward(path.clone(), actor, commands, control.clone()));
        forwarders.insert(path.clone(), queue);
    }
}

/// Writes what a sink gets onto the stream.
async fn pump(
    id: u64,
    mut notifications: mpsc::UnboundedReceiver<Notification>,
    data: mpsc::Sender<Vec<u8>>,
) {
    while let Some(notification) = notifications.recv().await {
        let frame = match codec::encode_notification(id, &notification) {
            Ok(frame) => frame,
            Err(size) => {
                tracing::warn!(
                    size,
                    "remote entity stream: a notification too large for a frame"
                );
                let Some(instead) = too_large(&notification, size) else {
                    continue;
                };
                match codec::encode_notification(id, &instead) {
                    Ok(frame) => frame,
                    Err(_) => continue,
                }
            }
        };
        if data.send(frame).await.is_err() {
            return;
        }
    }
}

/// What answers the requests of a notification too large for a frame (a peek of many
/// large messages): an error each. A delivery that large is not sent (its lock lapses).
fn too_large(notification: &Notification, size: usize) -> Option<Notification> {
    let error = || {
        EntityError::LimitExceeded(format!(
            "The reply takes {size} bytes, more than the {} bytes a frame between nodes may hold: ask for fewer messages.",
            codec::MAX_FRAME
        ))
    };
    match notification {
        Notification::Reply { request, .. } => Some(Notification::Reply {
            request: *request,
            result: Err(error()),
        }),
        Notification::Replies { replies } => Some(Notification::Replies {
            replies: replies
                .iter()
                .map(|(request, _): &(RequestId, _)| (*request, Err(error())))
                .collect(),
        }),
        _ => None,
    }
}

/// Hands one path's commands to its actor in order, acknowledging them to the client as
/// it does. When the actor is gone it answers what is queued `NotFound` and stops (the
/// next command looks the path up again).
async fn forward<A: Actor>(
    path: String,
    actor: A,
    mut commands: mpsc::Receiver<A::Command>,
    control: mpsc::UnboundedSender<Vec<u8>>,
) {
    let kind: Kind = <A::Command as Carried>::KIND;
    let mut handed = 0u64;
    while let Some(command) = commands.recv().await {
        handed += 1;
        if let Err((error, command)) = actor.hand(command).await {
            command.refuse(error);
            commands.close();
            while let Some(command) = commands.recv().await {
                handed += 1;
                command.refuse(EntityError::NotFound(path.clone()));
            }
            break;
        }
        if handed >= ACK_BATCH || commands.is_empty() {
            let _ = control.send(codec::encode_ack(kind, &path, handed));
            handed = 0;
        }
    }
    if handed > 0 {
        let _ = control.send(codec::encode_ack(kind, &path, handed));
    }
}
