//! The client end: handles whose commands go over a stream to the node that runs their
//! entities (a new stream opened when one is lost, for a proxy that connects), and each
//! stream's table of the sinks its commands named.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{Semaphore, mpsc, watch};

use super::codec::{self, Kind, ServerFrame, SinkIds, Unencodable};
use super::{
    COMMAND_CAPACITY, Carried, FRAME_QUEUE, RemoteError, TOPIC_CAPACITY, WINDOW, read_frame,
    stopped, write_frames,
};
use crate::broker::entity::{EntityHandle, Notification, NotificationSender, RequestId};
use crate::broker::topic::TopicHandle;
use crate::broker::types::{EntityError, ReceiverId};

/// How long a proxy that connects waits for a new stream before the command that asked
/// for it is answered with a timeout.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// After a failed attempt to open a stream, commands within this long are answered with
/// its failure instead of trying again (no busy loop while the other node is down).
pub const RECONNECT_BACKOFF: Duration = Duration::from_millis(250);

/// Opens a stream and starts its tasks.
type Connector = Box<dyn Fn() -> BoxFuture<'static, Result<Arc<Stream>, String>> + Send + Sync>;

/// The client end of remote entity streams: gives [`EntityHandle`]s and [`TopicHandle`]s
/// for entities and topics on the node at the other end.
///
/// When the stream ends (or fails), every request still waiting on it is answered with
/// [`EntityError::Timeout`], plain receivers attached through it are told
/// [`Notification::Moved`], session receivers lose their session (or are refused with the
/// timeout while they wait for one). A proxy made by [`Proxy::start`] has that one stream:
/// every later command is answered the same way. One made by [`Proxy::connecting`] opens
/// a new stream for the next command; its handles stay valid across streams.
#[derive(Debug)]
pub struct Proxy {
    inner: Arc<Inner>,
    handles: Mutex<HashMap<String, EntityHandle>>,
    topics: Mutex<HashMap<String, TopicHandle>>,
}

/// What the handles' tasks share: the stream now, and how to open the next one.
struct Inner {
    /// The stream commands go on (`None` before a proxy that connects opened one).
    current: Mutex<Option<Arc<Stream>>>,
    /// Opens a new stream; `None` for a proxy with one stream only.
    connect: Option<Connector>,
    /// Held while a stream is opened (one attempt at a time); the last failed attempt:
    /// when, and why.
    connecting: tokio::sync::Mutex<Option<(Instant, String)>>,
    /// Set by [`Proxy::close`]: no stream is opened any more.
    closed: AtomicBool,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("Inner")
            .field("current", &self.current)
            .field("connects", &self.connect.is_some())
            .finish()
    }
}

/// One stream: its writer's queues and its table of sinks.
#[derive(Debug)]
struct Stream {
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
    /// Each path's window (see [`super::WINDOW`]), by what the path names.
    windows: HashMap<(Kind, String), Arc<Semaphore>>,
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
    /// Starts the client end on `io` (a connected stream to a node running
    /// [`super::serve`]): its one stream.
    pub fn start<IO>(io: IO) -> Proxy
    where
        IO: AsyncRead + AsyncWrite + Send + 'static,
    {
        Proxy::with(Some(Stream::start(io)), None)
    }

    /// A client end that opens its streams with `connect` (to whichever node runs the
    /// entities now): the first when a command needs one, a new one for the first
    /// command after a stream is lost or [`Proxy::close`]d. A failed `connect` (or one
    /// taking more than [`CONNECT_TIMEOUT`]) answers the command that asked with
    /// [`EntityError::Timeout`] naming why; commands within [`RECONNECT_BACKOFF`] after
    /// it get the same answer, later ones try again.
    pub fn connecting<IO, F>(connect: F) -> Proxy
    where
        IO: AsyncRead + AsyncWrite + Send + 'static,
        F: Fn() -> BoxFuture<'static, Result<IO, String>> + Send + Sync + 'static,
    {
        let connector: Connector = Box::new(move || {
            let opening = connect();
            Box::pin(async move { opening.await.map(Stream::start) })
        });
        Proxy::with(None, Some(connector))
    }

    fn with(current: Option<Arc<Stream>>, connect: Option<Connector>) -> Proxy {
        Proxy {
            inner: Arc::new(Inner {
                current: Mutex::new(current),
                connect,
                connecting: tokio::sync::Mutex::new(None),
                closed: AtomicBool::new(false),
            }),
            handles: Mutex::new(HashMap::new()),
            topics: Mutex::new(HashMap::new()),
        }
    }

    /// A handle for the entity (queue or subscription) at `path` on the other node (the
    /// same channel for the same path, whichever stream carries it). A path the other
    /// node does not know is answered as locally: `NotFound`.
    pub fn handle(&self, path: &str) -> EntityHandle {
        let mut handles = lock(&self.handles);
        if let Some(handle) = handles.get(path) {
            return handle.clone();
        }
        let (commands, inbox) = mpsc::channel(COMMAND_CAPACITY);
        tokio::spawn(carry(self.inner.clone(), path.into(), inbox));
        let handle = EntityHandle::from_channel(path, commands);
        handles.insert(path.to_string(), handle.clone());
        handle
    }

    /// A handle for the topic at `path` on the other node (the same channel for the same
    /// path, whichever stream carries it). A path the other node does not know as a
    /// topic is answered as locally: `NotFound`.
    pub fn topic_handle(&self, path: &str) -> TopicHandle {
        let mut topics = lock(&self.topics);
        if let Some(handle) = topics.get(path) {
            return handle.clone();
        }
        let (commands, inbox) = mpsc::channel(TOPIC_CAPACITY);
        tokio::spawn(carry(self.inner.clone(), path.into(), inbox));
        let handle = TopicHandle::from_channel(path, commands);
        topics.insert(path.to_string(), handle.clone());
        handle
    }

    /// Whether no stream is open now: commands are answered with an error (a proxy that
    /// connects opens a new stream for the next one).
    pub fn is_closed(&self) -> bool {
        self.inner.live().is_none()
    }

    /// Ends the stream now, as if it had failed: what waits on it is answered at once. A
    /// proxy made by [`Proxy::connecting`] opens a new stream for the next command (a
    /// member calls this when it learns of a new leader while the old stream still looks
    /// alive); for one made by [`Proxy::start`] this is [`Proxy::close`].
    pub fn reset(&self) {
        let current = lock(&self.inner.current).clone();
        if let Some(stream) = current {
            stream.fail("the stream was closed: the entities' node changed".to_string());
        }
    }

    /// Ends the stream now, as if it had failed, for good: what waits on it is answered
    /// at once, and every later command the same way (no new stream is opened).
    pub fn close(&self) {
        self.inner.closed.store(true, Ordering::SeqCst);
        let current = lock(&self.inner.current).clone();
        if let Some(stream) = current {
            stream.fail("the stream was closed".to_string());
        }
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

impl Inner {
    /// The stream now, unless it is gone.
    fn live(&self) -> Option<Arc<Stream>> {
        lock(&self.current)
            .as_ref()
            .filter(|stream| !stream.is_failed())
            .cloned()
    }

    /// The stream to carry a command on: the one now, or a new one for a proxy that
    /// connects; `Err` with why there is none.
    async fn stream(&self) -> Result<Arc<Stream>, String> {
        if let Some(stream) = self.live() {
            return Ok(stream);
        }
        if self.closed.load(Ordering::SeqCst) {
            return Err("the proxy was closed".to_string());
        }
        let Some(connect) = &self.connect else {
            let current = lock(&self.current).clone();
            return Err(current
                .and_then(|stream| stream.lock().failure.clone())
                .unwrap_or_else(|| "no stream".to_string()));
        };
        let mut last_failure = self.connecting.lock().await;
        // Another command may have opened one while this one waited, or closed the proxy.
        if let Some(stream) = self.live() {
            return Ok(stream);
        }
        if self.closed.load(Ordering::SeqCst) {
            return Err("the proxy was closed".to_string());
        }
        if let Some((at, reason)) = &*last_failure
            && at.elapsed() < RECONNECT_BACKOFF
        {
            return Err(reason.clone());
        }
        let reason = match tokio::time::timeout(CONNECT_TIMEOUT, connect()).await {
            Ok(Ok(stream)) => {
                *last_failure = None;
                *lock(&self.current) = Some(stream.clone());
                return Ok(stream);
            }
            Ok(Err(error)) => format!("opening a stream failed: {error}"),
            Err(_) => format!(
                "opening a stream took more than {} s",
                CONNECT_TIMEOUT.as_secs()
            ),
        };
        tracing::warn!(%reason, "remote entity stream: cannot open one");
        *last_failure = Some((Instant::now(), reason.clone()));
        Err(reason)
    }
}

impl Stream {
    /// Starts a stream's tasks on `io`.
    fn start<IO>(io: IO) -> Arc<Stream>
    where
        IO: AsyncRead + AsyncWrite + Send + 'static,
    {
        let (control, control_queue) = mpsc::unbounded_channel();
        let (data, data_queue) = mpsc::channel(FRAME_QUEUE);
        let (stop, mut stopping) = watch::channel(false);
        let stream = Arc::new(Stream {
            state: Mutex::new(State::default()),
            control,
            data,
            stop,
        });
        let (mut input, output) = tokio::io::split(io);
        let reading = stream.clone();
        let sweeping = stream.clone();
        let failing = stream.clone();
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
        stream
    }

    fn is_failed(&self) -> bool {
        self.lock().failure.is_some()
    }

    /// The window of `path` (of `kind`) on this stream; closed once the stream is gone.
    fn window(&self, kind: Kind, path: &str) -> Arc<Semaphore> {
        let mut state = self.lock();
        if let Some(window) = state.windows.get(&(kind, path.to_string())) {
            return window.clone();
        }
        let window = Arc::new(Semaphore::new(WINDOW));
        if state.failure.is_some() {
            window.close();
        }
        state
            .windows
            .insert((kind, path.to_string()), window.clone());
        window
    }
}

/// Carries one path's commands onto the stream, each once the window has room (opening
/// a stream first when a proxy that connects has none).
async fn carry<C: Carried>(inner: Arc<Inner>, path: Arc<str>, mut inbox: mpsc::Receiver<C>) {
    while let Some(command) = inbox.recv().await {
        let stream = match inner.stream().await {
            Ok(stream) => stream,
            Err(reason) => {
                command.refuse(unreachable(&path, &reason));
                continue;
            }
        };
        let window = stream.window(C::KIND, &path);
        let Ok(permit) = window.acquire().await else {
            let reason = stream.lock().failure.clone().unwrap_or_default();
            command.refuse(unreachable(&path, &reason));
            continue;
        };
        permit.forget();
        let (frame, closed) = {
            let mut state = stream.lock();
            if let Some(reason) = &state.failure {
                let error = unreachable(&path, reason);
                drop(state);
                command.refuse(error);
                continue;
            }
            let mut naming = Naming {
                state: &mut state,
                path: &path,
                waits: Vec::new(),
                attaches: Vec::new(),
                closed: None,
            };
            let frame = command.encode(&path, &mut naming);
            let closed = naming.closed.take().unwrap_or_default();
            if frame.is_ok() {
                naming.commit();
            }
            (frame, closed)
        };
        for sink in closed {
            let _ = stream.control.send(codec::encode_sink_closed(sink));
        }
        match frame {
            Ok(frame) => {
                super::COMMANDS_CARRIED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                // A writer gone means a failed stream: its failure answers what waits.
                let _ = stream.data.send(frame).await;
            }
            Err(unencodable) => {
                window.add_permits(1);
                let error = match &unencodable {
                    Unencodable::LocalOnly(_) => EntityError::NotAllowed(unencodable.to_string()),
                    Unencodable::TooLarge { .. } => {
                        EntityError::LimitExceeded(unencodable.to_string())
                    }
                };
                command.refuse(error);
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

impl Stream {
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
            ServerFrame::Ack { kind, path, count } => {
                let state = self.lock();
                let Some(window) = state.windows.get(&(kind, path.clone())) else {
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
