//! The client end: handles whose commands go over the stream, and the table of the sinks
//! they named.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{Semaphore, mpsc, watch};

use super::codec::{self, ServerFrame, SinkIds, Unencodable};
use super::{
    COMMAND_CAPACITY, FRAME_QUEUE, RemoteError, WINDOW, read_frame, refuse, stopped, write_frames,
};
use crate::broker::entity::{Command, EntityHandle, Notification, NotificationSender, RequestId};
use crate::broker::types::{EntityError, ReceiverId};

/// The client end of a remote entity stream: gives [`EntityHandle`]s for entities on the
/// node at the other end.
///
/// Its tasks run until the stream ends (or fails); then every request still waiting is
/// answered with [`EntityError::Timeout`], and so is every later command through its
/// handles.
#[derive(Debug)]
pub struct Proxy {
    shared: Arc<Shared>,
    handles: Mutex<HashMap<String, EntityHandle>>,
}

#[derive(Debug)]
struct Shared {
    state: Mutex<State>,
    /// Window acknowledgements' and sink closings' frames (never waited on).
    control: mpsc::UnboundedSender<Vec<u8>>,
    /// Command frames.
    data: mpsc::Sender<Vec<u8>>,
    /// Set once the stream is gone.
    stop: watch::Sender<bool>,
}

#[derive(Debug, Default)]
struct State {
    next_sink: u64,
    sinks: HashMap<u64, Sink>,
    /// Each path's window (see [`super::WINDOW`]).
    windows: HashMap<String, Arc<Semaphore>>,
    /// Why the stream is gone, once it is.
    failure: Option<String>,
}

/// A sink named on the stream, and what it waits for.
#[derive(Debug)]
struct Sink {
    sender: NotificationSender,
    /// Requests waiting for a reply (a count: ids need not be unique), with their entity.
    waiting: HashMap<RequestId, (u32, Arc<str>)>,
    /// Receivers attached with this sink, with their entity.
    receivers: HashMap<ReceiverId, (Attached, Arc<str>)>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Attached {
    /// A plain receiver.
    Receiver,
    /// A session receiver waiting for its session.
    SessionWaiting,
    /// A session receiver holding its session.
    Session,
}

impl Proxy {
    /// Starts the client end on `io` (a connected stream to a node running [`super::serve`]).
    pub fn start<IO>(io: IO) -> Proxy
    where
        IO: AsyncRead + AsyncWrite + Send + 'static,
    {
        let (control, control_queue) = mpsc::unbounded_channel();
        let (data, data_queue) = mpsc::channel(FRAME_QUEUE);
        let (stop, mut stopping) = watch::channel(false);
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            control,
            data,
            stop,
        });
        let (mut input, output) = tokio::io::split(io);
        let reading = shared.clone();
        let sweeping = shared.clone();
        let failing = shared.clone();
        tokio::spawn(async move {
            let reader = async move {
                loop {
                    let Some(body) = read_frame(&mut input).await? else {
                        return Ok::<_, RemoteError>(());
                    };
                    let frame = codec::decode_server_frame(&body)
                        .map_err(|error| RemoteError::Malformed(error.0))?;
                    reading.take(frame)?;
                }
            };
            let writer = write_frames(output, control_queue, data_queue, move || {
                sweeping
                    .sweep()
                    .into_iter()
                    .map(codec::encode_sink_closed)
                    .collect()
            });
            let reason = tokio::select! {
                result = reader => match result {
                    Ok(()) => "the stream ended".to_string(),
                    Err(error) => {
                        tracing::warn!(%error, "remote entity stream: closing");
                        error.to_string()
                    }
                },
                result = writer => match result {
                    Ok(()) => "the stream's writer stopped".to_string(),
                    Err(error) => {
                        tracing::warn!(%error, "remote entity stream: closing");
                        error.to_string()
                    }
                },
                () = stopped(&mut stopping) => "the stream was closed".to_string(),
            };
            failing.fail(reason);
        });
        Proxy {
            shared,
            handles: Mutex::new(HashMap::new()),
        }
    }

    /// A handle for the entity at `path` on the other node (the same channel for the same
    /// path). A path the other node does not know is answered as locally: `NotFound`.
    pub fn handle(&self, path: &str) -> EntityHandle {
        let mut handles = lock(&self.handles);
        if let Some(handle) = handles.get(path) {
            return handle.clone();
        }
        let window = Arc::new(Semaphore::new(WINDOW));
        {
            let mut state = self.shared.lock();
            if state.failure.is_some() {
                window.close();
            }
            state.windows.insert(path.to_string(), window.clone());
        }
        let (commands, inbox) = mpsc::channel(COMMAND_CAPACITY);
        tokio::spawn(carry(self.shared.clone(), path.into(), inbox, window));
        let handle = EntityHandle::from_channel(path, commands);
        handles.insert(path.to_string(), handle.clone());
        handle
    }

    /// Whether the stream is gone (every command is now answered with an error).
    pub fn is_closed(&self) -> bool {
        self.shared.lock().failure.is_some()
    }

    /// Ends the stream: as if it had failed.
    pub fn close(&self) {
        self.shared.stop.send_replace(true);
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The error a command gets when the stream to its entity's node is gone: a timeout, which
/// the SDKs retry.
fn unreachable(path: &str, reason: &str) -> EntityError {
    EntityError::Timeout(format!(
        "The node that holds the messaging entity '{path}' could not be reached ({reason}). Try again."
    ))
}

/// Carries one path's commands onto the stream, each once the window has room.
async fn carry(
    shared: Arc<Shared>,
    path: Arc<str>,
    mut inbox: mpsc::Receiver<Command>,
    window: Arc<Semaphore>,
) {
    while let Some(command) = inbox.recv().await {
        let Ok(permit) = window.acquire().await else {
            let reason = shared.lock().failure.clone().unwrap_or_default();
            refuse(command, unreachable(&path, &reason));
            continue;
        };
        permit.forget();
        let (frame, closed) = {
            let mut state = shared.lock();
            if let Some(reason) = &state.failure {
                let error = unreachable(&path, reason);
                drop(state);
                refuse(command, error);
                continue;
            }
            let mut naming = Naming {
                state: &mut state,
                path: &path,
                waits: Vec::new(),
                attaches: Vec::new(),
                closed: None,
            };
            let frame = codec::encode_command(&path, &command, &mut naming);
            let closed = naming.closed.take().unwrap_or_default();
            if frame.is_ok() {
                naming.commit();
            }
            (frame, closed)
        };
        for sink in closed {
            let _ = shared.control.send(codec::encode_sink_closed(sink));
        }
        match frame {
            Ok(frame) => {
                // A writer gone means a failed stream: its failure answers what waits.
                let _ = shared.data.send(frame).await;
            }
            Err(unencodable) => {
                window.add_permits(1);
                let error = match &unencodable {
                    Unencodable::LocalOnly(_) => EntityError::NotAllowed(unencodable.to_string()),
                    Unencodable::TooLarge { .. } => {
                        EntityError::LimitExceeded(unencodable.to_string())
                    }
                };
                refuse(command, error);
            }
        }
    }
}

/// Names a command's sinks while it is encoded; what it waits for is kept once the frame
/// is made ([`Naming::commit`]).
struct Naming<'a> {
    state: &'a mut State,
    path: &'a Arc<str>,
    waits: Vec<(u64, RequestId)>,
    attaches: Vec<(u64, ReceiverId, bool)>,
    /// Sinks found closed when a new one was named (looked for once per command).
    closed: Option<Vec<u64>>,
}

impl SinkIds for Naming<'_> {
    fn id(&mut self, sender: &NotificationSender) -> u64 {
        if let Some((&id, _)) = self
            .state
            .sinks
            .iter()
            .find(|(_, sink)| sink.sender.same_channel(sender))
        {
            return id;
        }
        if self.closed.is_none() {
            self.closed = Some(self.state.sweep());
        }
        let id = self.state.next_sink;
        self.state.next_sink += 1;
        self.state.sinks.insert(
            id,
            Sink {
                sender: sender.clone(),
                waiting: HashMap::new(),
                receivers: HashMap::new(),
            },
        );
        id
    }

    fn waits(&mut self, sink: u64, request: RequestId) {
        self.waits.push((sink, request));
    }

    fn attaches(&mut self, sink: u64, receiver: ReceiverId, session: bool) {
        self.attaches.push((sink, receiver, session));
    }
}

impl Naming<'_> {
    fn commit(&mut self) {
        for (id, request) in self.waits.drain(..) {
            if let Some(sink) = self.state.sinks.get_mut(&id) {
                sink.waiting
                    .entry(request)
                    .or_insert_with(|| (0, self.path.clone()))
                    .0 += 1;
            }
        }
        for (id, receiver, session) in self.attaches.drain(..) {
            if let Some(sink) = self.state.sinks.get_mut(&id) {
                let attached = match session {
                    true => Attached::SessionWaiting,
                    false => Attached::Receiver,
                };
                sink.receivers
                    .insert(receiver, (attached, self.path.clone()));
            }
        }
    }
}

impl State {
    /// Forgets the sinks whose receiver is gone; returns their ids.
    fn sweep(&mut self) -> Vec<u64> {
        let closed: Vec<u64> = self
            .sinks
            .iter()
            .filter(|(_, sink)| sink.sender.is_closed())
            .map(|(&id, _)| id)
            .collect();
        for id in &closed {
            self.sinks.remove(id);
        }
        closed
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    fn sweep(&self) -> Vec<u64> {
        self.lock().sweep()
    }

    /// Takes a frame from the server.
    fn take(&self, frame: ServerFrame) -> Result<(), RemoteError> {
        match frame {
            ServerFrame::Notification { sink, notification } => {
                let mut state = self.lock();
                let Some(entry) = state.sinks.get_mut(&sink) else {
                    // Forgotten: its connection went away.
                    return Ok(());
                };
                entry.track(&notification);
                if entry.sender.send(notification).is_err() {
                    state.sinks.remove(&sink);
                    let _ = self.control.send(codec::encode_sink_closed(sink));
                }
            }
            ServerFrame::Ack { path, count } => {
                let state = self.lock();
                let Some(window) = state.windows.get(&path) else {
                    return Err(RemoteError::Protocol(format!(
                        "commands for '{path}' acknowledged, but none were sent"
                    )));
                };
                let room = (WINDOW - window.available_permits().min(WINDOW)) as u64;
                if count > room {
                    return Err(RemoteError::Protocol(format!(
                        "{count} commands for '{path}' acknowledged, but only {room} are on their way"
                    )));
                }
                window.add_permits(count as usize);
            }
        }
        Ok(())
    }

    /// The stream is gone: answers everything that waits on it (once).
    fn fail(&self, reason: String) {
        let mut state = self.lock();
        if state.failure.is_some() {
            return;
        }
        tracing::debug!(%reason, "remote entity stream gone: failing what waits on it");
        for window in state.windows.values() {
            window.close();
        }
        for (_, sink) in state.sinks.drain() {
            for (request, (count, path)) in sink.waiting {
                for _ in 0..count {
                    let _ = sink.sender.send(Notification::Reply {
                        request,
                        result: Err(unreachable(&path, &reason)),
                    });
                }
            }
            for (receiver, (attached, path)) in sink.receivers {
                let notification = match attached {
                    Attached::Receiver => Notification::Moved { receiver },
                    Attached::SessionWaiting => Notification::SessionRefused {
                        receiver,
                        error: unreachable(&path, &reason),
                    },
                    Attached::Session => Notification::SessionLost { receiver },
                };
                let _ = sink.sender.send(notification);
            }
        }
        state.failure = Some(reason);
        drop(state);
        self.stop.send_replace(true);
    }
}

impl Sink {
    /// Notes what a notification answers.
    fn track(&mut self, notification: &Notification) {
        let mut answered = |request: &RequestId| {
            if let Some((count, _)) = self.waiting.get_mut(request) {
                *count -= 1;
                if *count == 0 {
                    self.waiting.remove(request);
                }
            }
        };
        match notification {
            Notification::Reply { request, .. } => answered(request),
            Notification::Replies { replies } => {
                for (request, _) in replies {
                    answered(request);
                }
            }
            Notification::SessionAccepted { receiver, .. } => {
                if let Some((attached, _)) = self.receivers.get_mut(receiver) {
                    *attached = Attached::Session;
                }
            }
            Notification::SessionRefused { receiver, .. }
            | Notification::ReceiverDetached { receiver }
            | Notification::EntityDeleted { receiver }
            | Notification::Moved { receiver }
            | Notification::SessionLost { receiver } => {
                self.receivers.remove(receiver);
            }
            Notification::Deliver(_)
            | Notification::Fenced { .. }
            | Notification::Drained { .. } => {}
        }
    }
}
