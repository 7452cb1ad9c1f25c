//! Node-to-node Raft traffic: a listener that serves the node's groups to its peers, and a
//! client with one connection per peer that every group shares.
//!
//! # The wire
//!
//! A connection starts with a handshake in which each side proves it holds the cluster's
//! secret without sending it (HMAC-SHA256 over both sides' fresh nonces):
//!
//! 1. client → server: [`MAGIC`], the client's node id (8 bytes, big-endian), its nonce
//!    (32 bytes), its [`Definitions`] (32 bytes);
//! 2. server → client: the server's nonce, its node id (8 bytes), then `HMAC(secret,
//!    "server" ‖ client id ‖ server id ‖ client nonce ‖ server nonce)`;
//! 3. client → server: `HMAC(secret, "client" ‖ client id ‖ server id ‖ client nonce ‖
//!    server nonce ‖ client definitions)`;
//! 4. server → client: one byte, [`ACCEPTED`], or [`DIFFERENT_DEFINITIONS`] when the
//!    client's definitions are not the server's.
//!
//! Besides the secret, each side checks who the other is: the server refuses a client whose
//! id is not one of the cluster's members or is its own, and the client refuses a server
//! that is not the member it dialed (two members configured with each other's address, or
//! with the same id). Both must also be configured with the same entities and keys: a
//! node's [`Definitions`] is an HMAC under the secret of its configuration's `[[queues]]`,
//! `[[topics]]` and `[[auth.keys]]` (see [`crate::config::render::definitions`]), so a
//! member started with a different file is refused, by name, instead of serving other
//! entities when it leads. A side whose check fails closes the connection and logs a warning
//! naming the other side's address. Then both ways carry frames: a length (4 bytes, big-endian, at most
//! the frame limit; a bigger one closes the connection) and a CBOR body, a [`Request`]
//! from the client (an id, the group's name, openraft's AppendEntries, Vote or
//! InstallSnapshot request) or a [`Response`] from the server (the id, openraft's answer).
//! The server answers requests concurrently (many groups share the connection), so
//! responses may come in any order.
//!
//! # Bounds
//!
//! Every frame is at most the frame limit; the listener serves at most
//! [`MAX_INBOUND`] connections and each at most [`MAX_IN_FLIGHT`] requests at once (the
//! next waits); a handshake has [`HANDSHAKE_TIMEOUT`]; a frame whose length has arrived has
//! [`FRAME_TIMEOUT`] for its body, and a served connection that sends no frame for
//! [`IDLE_TIMEOUT`] is closed (a leader's heartbeats come every 100 ms), so a stalled or
//! paused peer does not hold a connection slot; a request has the time openraft gives it
//! ([`RPCOption::hard_ttl`]), connecting included.

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hmac::{Hmac, Mac};
use openraft::error::{InstallSnapshotError, NetworkError, RPCError, RaftError, Unreachable};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::{AnyError, BasicNode};
use serde::{Deserialize, Serialize};
use sha2::Sha256;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, mpsc, oneshot};
use tokio::task::{AbortHandle, JoinSet};

use super::types::{GroupRaft, TypeConfig};

/// The first bytes of a connection: the protocol and its version.
pub(super) const MAGIC: &[u8; 8] = b"FBRAFT3\0";

/// The first bytes of a connection that carries entity commands instead of Raft
/// requests ([`crate::cluster::remote`]): the same handshake, then that module's frames.
pub(super) const COMMANDS_MAGIC: &[u8; 8] = b"FBCMDS3\0";

/// The server's last handshake byte: the client is accepted.
const ACCEPTED: u8 = 1;

/// The server's last handshake byte: the client proved the secret, but its entities and
/// keys differ from the server's.
const DIFFERENT_DEFINITIONS: u8 = 2;

/// A digest of a node's configured entities and keys (see [`definitions`]).
pub(crate) type Definitions = [u8; 32];

/// The [`Definitions`] of a configuration whose entities and keys render as `text`
/// ([`crate::config::render::definitions`]): an HMAC under the cluster secret, so that the
/// digest (sent before the peer proved the secret) tells no one without it anything about
/// the keys.
pub(crate) fn definitions(secret: &[u8], text: &str) -> Definitions {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes keys of any length");
    mac.update(b"definitions");
    mac.update(text.as_bytes());
    mac.finalize().into_bytes().into()
}

/// The largest frame either side reads or writes by default (openraft sends at most 300
/// entries in one AppendEntries; an entry holds up to 256 writes).
pub(super) const MAX_FRAME: usize = 64 << 20;

/// At most this many peer connections are served at once; more are closed at accept.
pub(super) const MAX_INBOUND: usize = 64;

/// At most this many requests of one connection are answered at once.
pub(super) const MAX_IN_FLIGHT: usize = 256;

/// How long an entity-command connection waits for this node to run its entities (it was
/// just elected and replays its log) before it is closed.
pub(super) const COMMANDS_HOOK_WAIT: Duration = Duration::from_secs(3);

/// A handshake that takes longer fails.
pub(super) const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// A frame's body must arrive within this long of its length (64 MiB at ~2 MB/s).
pub(super) const FRAME_TIMEOUT: Duration = Duration::from_secs(30);

/// A served connection without a frame for this long is closed.
pub(super) const IDLE_TIMEOUT: Duration = Duration::from_secs(60);

const NONCE: usize = 32;
const MAC: usize = 32;

/// What a [`DIFFERENT_DEFINITIONS`] refusal compares, for its message.
const DIFFERENT: &str = "the [[queues]], [[topics]], [[auth.keys]] or [cluster] placement of the configuration files differ";

/// A request to a peer's group.
#[derive(Serialize, Deserialize)]
pub(super) struct Request {
    /// Matches the response to its request on the connection.
    id: u64,
    /// The placement group whose Raft answers it.
    group: String,
    rpc: Rpc,
}

/// openraft's requests, and a node's own.
#[derive(Serialize, Deserialize)]
enum Rpc {
    Append(AppendEntriesRequest<TypeConfig>),
    Vote(VoteRequest<u64>),
    Snapshot(InstallSnapshotRequest<TypeConfig>),
    /// The asking node is stopping: drain the client connections it forwards to this node
    /// (the group is not used).
    Drain,
    /// The group's leader hands its leadership over: start an election now.
    Elect,
}

/// A peer's answer to a [`Request`].
#[derive(Serialize, Deserialize)]
pub(super) struct Response {
    id: u64,
    reply: Reply,
}

/// openraft's answers, or why the group could not answer.
#[derive(Serialize, Deserialize)]
enum Reply {
    Append(Result<AppendEntriesResponse<u64>, RaftError<u64>>),
    Vote(Result<VoteResponse<u64>, RaftError<u64>>),
    Snapshot(Result<InstallSnapshotResponse<u64>, RaftError<u64, InstallSnapshotError>>),
    /// The group does not run on the peer and cannot start there.
    Unavailable(String),
    /// How many forwarded connections started to drain.
    Drained(usize),
    /// Whether the election started (why not).
    Elect(Result<(), String>),
}

/// What a node does when a peer asks it to drain the connections that peer forwards
/// ([`Rpc::Drain`]): given the peer's id and the address its peer connection comes from,
/// how many connections started to drain. Unset: none (the node does not serve clients).
pub(crate) type DrainHook = Arc<std::sync::RwLock<Option<DrainForwarded>>>;

/// See [`DrainHook`].
pub(crate) type DrainForwarded = Arc<dyn Fn(u64, std::net::IpAddr) -> usize + Send + Sync>;

/// What a node does with a peer's entity-command connection ([`COMMANDS_MAGIC`]) once its
/// handshake succeeded: given the stream and the peer's id, serves it (the hook spawns what
/// it needs). Unset: the node runs no entities, and such a connection is closed (logged).
pub(crate) type CommandsHook = Arc<std::sync::RwLock<Option<ServeCommands>>>;

/// See [`CommandsHook`].
pub(crate) type ServeCommands = Arc<dyn Fn(TcpStream, u64) + Send + Sync>;

/// What a peer connection carries after its handshake.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Purpose {
    /// Raft requests and this node's own ([`MAGIC`]).
    Raft,
    /// Entity commands ([`COMMANDS_MAGIC`]).
    Commands,
}

/// Finds (or starts) a group's Raft on this node for a peer's request.
pub(super) type Local = Arc<
    dyn Fn(String) -> Pin<Box<dyn Future<Output = Result<GroupRaft, String>> + Send>> + Send + Sync,
>;

/// The handshake's proof of `role`: over both ids and both nonces (the client's first).
fn mac(
    secret: &[u8],
    role: &[u8],
    (client, server): (u64, u64),
    client_nonce: &[u8],
    server_nonce: &[u8],
) -> Hmac<Sha256> {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes keys of any length");
    mac.update(role);
    mac.update(&client.to_be_bytes());
    mac.update(&server.to_be_bytes());
    mac.update(client_nonce);
    mac.update(server_nonce);
    mac
}

fn nonce() -> Result<[u8; NONCE], String> {
    let mut nonce = [0u8; NONCE];
    rustls::crypto::ring::default_provider()
        .secure_random
        .fill(&mut nonce)
        .map_err(|_| "the system's random source failed".to_string())?;
    Ok(nonce)
}

/// Writes one frame: its length, then `body`.
async fn write_frame<W: AsyncWrite + Unpin>(writer: &mut W, body: &[u8]) -> std::io::Result<()> {
    let length = u32::try_from(body.len()).map_err(std::io::Error::other)?;
    writer.write_all(&length.to_be_bytes()).await?;
    writer.write_all(body).await?;
    writer.flush().await
}

/// Why a frame could not be read.
#[derive(Debug)]
enum FrameError {
    /// The connection ended or failed.
    Io(std::io::Error),
    /// The frame's length is over the limit.
    TooLarge(usize),
    /// The frame's body did not arrive within the frame timeout.
    Stalled(usize),
}

/// Reads one frame's body (`None` at a clean end of the connection); the body must follow
/// its length within `body_timeout`.
async fn read_frame<R: AsyncRead + Unpin>(
    reader: &mut R,
    limit: usize,
    body_timeout: Duration,
) -> Result<Option<Vec<u8>>, FrameError> {
    let mut length = [0u8; 4];
    match reader.read_exact(&mut length).await {
        Ok(_) => {}
        Err(error) if error.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(error) => return Err(FrameError::Io(error)),
    }
    let length = u32::from_be_bytes(length) as usize;
    if length > limit {
        return Err(FrameError::TooLarge(length));
    }
    let mut body = vec![0u8; length];
    match tokio::time::timeout(body_timeout, reader.read_exact(&mut body)).await {
        Ok(read) => read.map_err(FrameError::Io)?,
        Err(_) => return Err(FrameError::Stalled(length)),
    };
    Ok(Some(body))
}

fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, String> {
    let mut body = Vec::with_capacity(256);
    ciborium::into_writer(value, &mut body).map_err(|error| error.to_string())?;
    Ok(body)
}

fn decode<T: for<'de> Deserialize<'de>>(body: &[u8]) -> Result<T, String> {
    ciborium::from_reader(body).map_err(|error| error.to_string())
}

/// The listener's settings.
#[derive(Clone)]
pub(super) struct Serving {
    /// This node's id.
    pub(super) node: u64,
    /// The cluster's members (the configured ones and every node of a group's current
    /// membership): only they are served.
    pub(super) members: Arc<std::sync::RwLock<std::collections::BTreeSet<u64>>>,
    pub(super) secret: Arc<[u8]>,
    /// This node's entities and keys: a client with others is refused.
    pub(super) definitions: Definitions,
    pub(super) max_frame: usize,
    /// How long a frame's body may take ([`FRAME_TIMEOUT`]) and a connection may stay
    /// without a frame ([`IDLE_TIMEOUT`]).
    pub(super) timeouts: (Duration, Duration),
    pub(super) local: Local,
    /// Answers [`Rpc::Drain`].
    pub(super) drain: DrainHook,
    /// Serves entity-command connections.
    pub(super) commands: CommandsHook,
    /// Set while this node is stopping: [`Rpc::Elect`] is refused.
    pub(super) leaving: Arc<std::sync::atomic::AtomicBool>,
}

/// Serves peers on `listener` until the returned task is aborted (which closes every
/// connection it serves).
pub(super) fn serve(listener: TcpListener, serving: Serving) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let slots = Arc::new(Semaphore::new(MAX_INBOUND));
        let mut connections = JoinSet::new();
        loop {
            let accepted = tokio::select! {
                accepted = listener.accept() => accepted,
                Some(_) = connections.join_next(), if !connections.is_empty() => continue,
            };
            let (stream, address) = match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    tracing::warn!(%error, "cannot accept a peer connection");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let Ok(slot) = slots.clone().try_acquire_owned() else {
                tracing::warn!(peer = %address, limit = MAX_INBOUND, "refused a peer connection: too many peer connections");
                continue;
            };
            let serving = serving.clone();
            connections.spawn(async move {
                let _slot = slot;
                serve_connection(stream, address, serving).await;
            });
        }
    })
}

/// The server's half of the handshake: the client's node id once it proved the secret and
/// is one of the other members, and what the connection carries.
async fn accept_handshake(
    stream: &mut TcpStream,
    serving: &Serving,
) -> Result<(u64, Purpose), String> {
    let (secret, server) = (&serving.secret[..], serving.node);
    let mut hello = [0u8; 8 + 8 + NONCE + MAC];
    stream
        .read_exact(&mut hello)
        .await
        .map_err(|error| format!("no greeting: {error}"))?;
    let purpose = match &hello[..8] {
        greeting if greeting == MAGIC => Purpose::Raft,
        greeting if greeting == COMMANDS_MAGIC => Purpose::Commands,
        _ => return Err("not a ferrobus peer of this version (wrong greeting)".to_string()),
    };
    let client = u64::from_be_bytes(hello[8..16].try_into().expect("8 bytes"));
    let theirs = &hello[16..16 + NONCE];
    let their_definitions = &hello[16 + NONCE..];
    let ours = nonce()?;
    let proof = mac(secret, b"server", (client, server), theirs, &ours).finalize();
    let mut challenge = [0u8; NONCE + 8 + MAC];
    challenge[..NONCE].copy_from_slice(&ours);
    challenge[NONCE..NONCE + 8].copy_from_slice(&server.to_be_bytes());
    challenge[NONCE + 8..].copy_from_slice(&proof.into_bytes());
    stream
        .write_all(&challenge)
        .await
        .map_err(|error| format!("cannot send the challenge: {error}"))?;
    let mut answer = [0u8; MAC];
    stream
        .read_exact(&mut answer)
        .await
        .map_err(|error| format!("no answer to the challenge: {error}"))?;
    let mut proof = mac(secret, b"client", (client, server), theirs, &ours);
    proof.update(their_definitions);
    proof
        .verify_slice(&answer)
        .map_err(|_| format!("node {client} does not hold the cluster secret"))?;
    if client == server {
        return Err(format!(
            "the peer claims this node's own id {client} (two nodes configured with one id?)"
        ));
    }
    let member = serving
        .members
        .read()
        .unwrap_or_else(|poison| poison.into_inner())
        .contains(&client);
    if !member {
        return Err(format!("node {client} is not a member of this cluster"));
    }
    if their_definitions != serving.definitions {
        let _ = stream.write_all(&[DIFFERENT_DEFINITIONS]).await;
        return Err(format!(
            "node {client} is configured with other entities or keys than this node ({DIFFERENT}); every member must have the same"
        ));
    }
    stream
        .write_all(&[ACCEPTED])
        .await
        .map_err(|error| format!("cannot accept: {error}"))?;
    Ok((client, purpose))
}

/// The client's half of the handshake: `node` dials the member `target` for Raft traffic.
pub(super) async fn connect_handshake(
    stream: &mut TcpStream,
    node: u64,
    target: u64,
    credentials: (&[u8], &Definitions),
) -> Result<(), String> {
    connect_handshake_for(stream, Purpose::Raft, node, target, credentials).await
}

/// The client's half of the handshake for a connection that will carry `purpose`.
pub(super) async fn connect_handshake_for(
    stream: &mut TcpStream,
    purpose: Purpose,
    node: u64,
    target: u64,
    (secret, definitions): (&[u8], &Definitions),
) -> Result<(), String> {
    let ours = nonce()?;
    let mut hello = [0u8; 8 + 8 + NONCE + MAC];
    hello[..8].copy_from_slice(match purpose {
        Purpose::Raft => MAGIC,
        Purpose::Commands => COMMANDS_MAGIC,
    });
    hello[8..16].copy_from_slice(&node.to_be_bytes());
    hello[16..16 + NONCE].copy_from_slice(&ours);
    hello[16 + NONCE..].copy_from_slice(definitions);
    stream
        .write_all(&hello)
        .await
        .map_err(|error| format!("cannot greet: {error}"))?;
    let mut challenge = [0u8; NONCE + 8 + MAC];
    stream
        .read_exact(&mut challenge)
        .await
        .map_err(|error| format!("no challenge: {error}"))?;
    let theirs = &challenge[..NONCE];
    let server = u64::from_be_bytes(challenge[NONCE..NONCE + 8].try_into().expect("8 bytes"));
    let proof = &challenge[NONCE + 8..];
    mac(secret, b"server", (node, server), &ours, theirs)
        .verify_slice(proof)
        .map_err(|_| "the peer does not hold the cluster secret".to_string())?;
    if server != target {
        return Err(format!(
            "the peer is node {server}, not node {target} (check the members' addresses)"
        ));
    }
    let mut answer = mac(secret, b"client", (node, server), &ours, theirs);
    answer.update(definitions);
    let answer = answer.finalize();
    stream
        .write_all(&answer.into_bytes())
        .await
        .map_err(|error| format!("cannot answer the challenge: {error}"))?;
    let mut accepted = [0u8; 1];
    stream.read_exact(&mut accepted).await.map_err(|_| {
        "the peer refused this node (is the cluster secret the same, and this node one of its members?)"
            .to_string()
    })?;
    if accepted[0] == DIFFERENT_DEFINITIONS {
        return Err(format!(
            "node {server} refused this node: it is configured with other entities or keys ({DIFFERENT}); every member must have the same"
        ));
    }
    if accepted[0] != ACCEPTED {
        return Err("the peer refused this node".to_string());
    }
    Ok(())
}

async fn serve_connection(mut stream: TcpStream, address: SocketAddr, serving: Serving) {
    let _ = stream.set_nodelay(true);
    let client = match tokio::time::timeout(
        HANDSHAKE_TIMEOUT,
        accept_handshake(&mut stream, &serving),
    )
    .await
    {
        Ok(Ok((client, Purpose::Raft))) => client,
        Ok(Ok((client, Purpose::Commands))) => {
            // A node that has just been elected replays its log before it serves: the
            // stream waits for that rather than fail the commands on it.
            let waited = tokio::time::Instant::now() + COMMANDS_HOOK_WAIT;
            let hook = loop {
                let hook = serving
                    .commands
                    .read()
                    .unwrap_or_else(|poison| poison.into_inner())
                    .clone();
                if hook.is_some() || tokio::time::Instant::now() >= waited {
                    break hook;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            };
            match hook {
                Some(serve_commands) => {
                    tracing::debug!(peer = %address, node = client, "a peer connected for entity commands");
                    serve_commands(stream, client);
                }
                None => tracing::warn!(
                    peer = %address,
                    node = client,
                    "closed a peer's entity-command connection: this node runs no entities"
                ),
            }
            return;
        }
        Ok(Err(why)) => {
            tracing::warn!(peer = %address, "refused a peer connection: {why}");
            return;
        }
        Err(_) => {
            tracing::warn!(peer = %address, "refused a peer connection: the handshake timed out");
            return;
        }
    };
    tracing::debug!(peer = %address, node = client, "a peer connected");
    let (mut reader, mut writer) = stream.into_split();
    let (responses, mut outgoing) = mpsc::channel::<Vec<u8>>(MAX_IN_FLIGHT);
    let mut tasks = JoinSet::new();
    tasks.spawn(async move {
        while let Some(body) = outgoing.recv().await {
            if write_frame(&mut writer, &body).await.is_err() {
                break;
            }
        }
    });
    let in_flight = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
    loop {
        while tasks.try_join_next().is_some() {}
        let (frame_timeout, idle_timeout) = serving.timeouts;
        let read = tokio::time::timeout(
            idle_timeout,
            read_frame(&mut reader, serving.max_frame, frame_timeout),
        );
        let body = match read.await {
            Err(_) => {
                tracing::warn!(peer = %address, node = client, "closed a peer connection: no frame for {idle_timeout:?}");
                break;
            }
            Ok(read) => read,
        };
        let body = match body {
            Ok(Some(body)) => body,
            Ok(None) => break,
            Err(FrameError::Stalled(length)) => {
                tracing::warn!(peer = %address, node = client, length, "closed a peer connection: a frame's body did not arrive within {frame_timeout:?}");
                break;
            }
            Err(FrameError::TooLarge(length)) => {
                tracing::warn!(peer = %address, node = client, length, limit = serving.max_frame, "closed a peer connection: a frame over the limit");
                break;
            }
            Err(FrameError::Io(error)) => {
                tracing::debug!(peer = %address, %error, "a peer connection failed");
                break;
            }
        };
        let request: Request = match decode(&body) {
            Ok(request) => request,
            Err(error) => {
                tracing::warn!(peer = %address, node = client, %error, "closed a peer connection: a malformed request");
                break;
            }
        };
        let Ok(permit) = in_flight.clone().acquire_owned().await else {
            break;
        };
        let responses = responses.clone();
        let local = serving.local.clone();
        let drain = serving.drain.clone();
        let leaving = serving.leaving.load(std::sync::atomic::Ordering::Acquire);
        tasks.spawn(async move {
            let _permit = permit;
            let id = request.id;
            let reply = match request.rpc {
                Rpc::Elect if leaving => Reply::Elect(Err(
                    "this node is stopping: it takes no leadership".to_string(),
                )),
                Rpc::Drain => {
                    let hook = drain
                        .read()
                        .unwrap_or_else(|poison| poison.into_inner())
                        .clone();
                    let drained = hook.map_or(0, |hook| hook(client, address.ip()));
                    tracing::info!(
                        node = client,
                        connections = drained,
                        "node {client} is stopping: draining the connections it forwards"
                    );
                    Reply::Drained(drained)
                }
                _ => answer(&local, request).await,
            };
            match encode(&Response { id, reply }) {
                Ok(body) => {
                    let _ = responses.send(body).await;
                }
                Err(error) => tracing::error!(%error, "cannot encode a Raft response"),
            }
        });
    }
    // Dropping the tasks closes the connection and abandons what it was answering.
}

async fn answer(local: &Local, request: Request) -> Reply {
    let raft = match local(request.group).await {
        Ok(raft) => raft,
        Err(why) => return Reply::Unavailable(why),
    };
    match request.rpc {
        Rpc::Append(rpc) => Reply::Append(raft.append_entries(rpc).await),
        Rpc::Vote(rpc) => Reply::Vote(raft.vote(rpc).await),
        Rpc::Snapshot(rpc) => Reply::Snapshot(raft.install_snapshot(rpc).await),
        Rpc::Drain => Reply::Drained(0),
        Rpc::Elect => Reply::Elect(
            raft.trigger()
                .elect()
                .await
                .map_err(|error| error.to_string()),
        ),
    }
}

/// This node's connections to its peers, shared by every group.
pub(super) struct Peers {
    /// This node's id, told to each peer at the handshake.
    node: u64,
    secret: Arc<[u8]>,
    /// This node's entities and keys, proved to each peer.
    definitions: Definitions,
    max_frame: usize,
    /// One connection slot per peer (by node id); its lock orders connecting.
    slots: Mutex<HashMap<u64, Slot>>,
}

/// A peer's connection, if one is open; locked while connecting.
type Slot = Arc<tokio::sync::Mutex<Option<Arc<Connection>>>>;

/// One established connection to a peer.
struct Connection {
    next: AtomicU64,
    /// Requests sent and not answered yet, by id.
    waiting: Arc<Mutex<HashMap<u64, oneshot::Sender<Reply>>>>,
    frames: mpsc::Sender<Vec<u8>>,
    /// Set once either half ended: the next request connects again.
    closed: Arc<AtomicBool>,
    tasks: [AbortHandle; 2],
}

impl Drop for Connection {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// Forgets a request that ended (answered, timed out, abandoned).
struct Waiting<'a> {
    connection: &'a Connection,
    id: u64,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.connection
            .waiting
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
            .remove(&self.id);
    }
}

impl Peers {
    pub(super) fn new(
        node: u64,
        (secret, definitions): (Arc<[u8]>, Definitions),
        max_frame: usize,
    ) -> Peers {
        Peers {
            node,
            secret,
            definitions,
            max_frame,
            slots: Mutex::default(),
        }
    }

    /// Closes every connection (requests in flight fail).
    pub(super) fn close(&self) {
        self.slots
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
            .clear();
    }

    fn slot(&self, target: u64) -> Slot {
        self.slots
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
            .entry(target)
            .or_default()
            .clone()
    }

    /// The open connection to `target`, connecting first when there is none.
    async fn connection(&self, target: u64, address: &str) -> Result<Arc<Connection>, String> {
        let slot = self.slot(target);
        let mut slot = slot.lock().await;
        if let Some(connection) = slot.as_ref()
            && !connection.closed.load(Ordering::Acquire)
        {
            return Ok(connection.clone());
        }
        *slot = None;
        let mut stream = TcpStream::connect(address)
            .await
            .map_err(|error| format!("cannot connect to {address}: {error}"))?;
        let _ = stream.set_nodelay(true);
        if let Err(why) = connect_handshake(
            &mut stream,
            self.node,
            target,
            (&self.secret, &self.definitions),
        )
        .await
        {
            tracing::warn!(peer = %address, node = target, "cannot join a peer: {why}");
            return Err(format!("the handshake with {address} failed: {why}"));
        }
        let connection = Arc::new(self.run(stream, address.to_string()));
        *slot = Some(connection.clone());
        Ok(connection)
    }

    /// A new connection to `target` at `address` for entity commands, its handshake done:
    /// the stream [`crate::cluster::remote::Proxy`] runs on.
    pub(super) async fn commands_stream(
        &self,
        target: u64,
        address: &str,
    ) -> Result<TcpStream, String> {
        let connect = async {
            let mut stream = TcpStream::connect(address)
                .await
                .map_err(|error| format!("cannot connect to {address}: {error}"))?;
            let _ = stream.set_nodelay(true);
            connect_handshake_for(
                &mut stream,
                Purpose::Commands,
                self.node,
                target,
                (&self.secret, &self.definitions),
            )
            .await
            .map_err(|why| format!("the handshake with {address} failed: {why}"))?;
            Ok(stream)
        };
        match tokio::time::timeout(HANDSHAKE_TIMEOUT, connect).await {
            Ok(connected) => connected,
            Err(_) => Err(format!(
                "no entity-command connection to node {target} at {address} within {HANDSHAKE_TIMEOUT:?}"
            )),
        }
    }

    /// Runs an established connection's writer and reader.
    fn run(&self, stream: TcpStream, address: String) -> Connection {
        let (mut reader, mut writer) = stream.into_split();
        let (frames, mut outgoing) = mpsc::channel::<Vec<u8>>(MAX_IN_FLIGHT);
        let waiting: Arc<Mutex<HashMap<u64, oneshot::Sender<Reply>>>> = Arc::default();
        let closed = Arc::new(AtomicBool::new(false));
        let writing = {
            let closed = closed.clone();
            tokio::spawn(async move {
                while let Some(body) = outgoing.recv().await {
                    if write_frame(&mut writer, &body).await.is_err() {
                        break;
                    }
                }
                closed.store(true, Ordering::Release);
            })
        };
        let reading = {
            let closed = closed.clone();
            let waiting = waiting.clone();
            let limit = self.max_frame;
            tokio::spawn(async move {
                loop {
                    let body = match read_frame(&mut reader, limit, FRAME_TIMEOUT).await {
                        Ok(Some(body)) => body,
                        Ok(None) => break,
                        Err(FrameError::TooLarge(length)) => {
                            tracing::warn!(peer = %address, length, limit, "closed a peer connection: a frame over the limit");
                            break;
                        }
                        Err(FrameError::Stalled(length)) => {
                            tracing::warn!(peer = %address, length, "closed a peer connection: a frame's body did not arrive within {FRAME_TIMEOUT:?}");
                            break;
                        }
                        Err(FrameError::Io(_)) => break,
                    };
                    let response: Response = match decode(&body) {
                        Ok(response) => response,
                        Err(error) => {
                            tracing::warn!(peer = %address, %error, "closed a peer connection: a malformed response");
                            break;
                        }
                    };
                    let waiter = waiting
                        .lock()
                        .unwrap_or_else(|poison| poison.into_inner())
                        .remove(&response.id);
                    if let Some(waiter) = waiter {
                        let _ = waiter.send(response.reply);
                    }
                }
                closed.store(true, Ordering::Release);
                // Requests still waiting fail now rather than at their timeout.
                waiting
                    .lock()
                    .unwrap_or_else(|poison| poison.into_inner())
                    .clear();
            })
        };
        Connection {
            next: AtomicU64::new(0),
            waiting,
            frames,
            closed,
            tasks: [writing.abort_handle(), reading.abort_handle()],
        }
    }

    /// Sends `rpc` to `group` on `target` (at `address`) and waits for its answer, at
    /// most `ttl` in all.
    /// Asks node `target` (peer address `address`) to drain the client connections this
    /// node forwards to it; how many it drains.
    pub(super) async fn drain(
        &self,
        target: u64,
        address: &str,
        ttl: Duration,
    ) -> Result<usize, String> {
        match self.call(target, address, "", Rpc::Drain, ttl).await {
            Ok(Reply::Drained(count)) => Ok(count),
            Ok(_) => Err("the peer answered another kind of request".to_string()),
            Err(Failed::Unreachable(why) | Failed::Network(why)) => Err(why),
        }
    }

    /// Asks node `target` (peer address `address`) to start an election in `group` now
    /// (this node leads it and hands the leadership over).
    pub(super) async fn elect(
        &self,
        target: u64,
        address: &str,
        group: &str,
        ttl: Duration,
    ) -> Result<(), String> {
        match self.call(target, address, group, Rpc::Elect, ttl).await {
            Ok(Reply::Elect(result)) => result,
            Ok(Reply::Unavailable(why)) => Err(why),
            Ok(_) => Err("the peer answered another kind of request".to_string()),
            Err(Failed::Unreachable(why) | Failed::Network(why)) => Err(why),
        }
    }

    async fn call(
        &self,
        target: u64,
        address: &str,
        group: &str,
        rpc: Rpc,
        ttl: Duration,
    ) -> Result<Reply, Failed> {
        let attempt =
            async {
                let connection = self
                    .connection(target, address)
                    .await
                    .map_err(Failed::Unreachable)?;
                let id = connection.next.fetch_add(1, Ordering::Relaxed);
                let request = Request {
                    id,
                    group: group.to_string(),
                    rpc,
                };
                let body = encode(&request).map_err(Failed::Network)?;
                if body.len() > self.max_frame {
                    return Err(Failed::Network(format!(
                        "a Raft request of {} bytes is over the frame limit ({} bytes)",
                        body.len(),
                        self.max_frame
                    )));
                }
                let (done, answer) = oneshot::channel();
                connection
                    .waiting
                    .lock()
                    .unwrap_or_else(|poison| poison.into_inner())
                    .insert(id, done);
                let _waiting = Waiting {
                    connection: &connection,
                    id,
                };
                connection.frames.send(body).await.map_err(|_| {
                    Failed::Unreachable(format!("the connection to {address} closed"))
                })?;
                answer
                    .await
                    .map_err(|_| Failed::Unreachable(format!("the connection to {address} closed")))
            };
        match tokio::time::timeout(ttl, attempt).await {
            Ok(result) => result,
            Err(_) => Err(Failed::Network(format!(
                "no answer from {address} within {ttl:?}"
            ))),
        }
    }
}

/// Why a request got no answer.
enum Failed {
    /// The peer cannot be reached (down, refused, or the connection closed).
    Unreachable(String),
    /// The request failed on the way (timed out, too big).
    Network(String),
}

impl Failed {
    fn into_rpc<E: std::error::Error>(self) -> RPCError<u64, BasicNode, E> {
        match self {
            Failed::Unreachable(why) => {
                RPCError::Unreachable(Unreachable::new(&AnyError::error(why)))
            }
            Failed::Network(why) => RPCError::Network(NetworkError::new(&AnyError::error(why))),
        }
    }
}

fn unavailable<E: std::error::Error>(why: String) -> RPCError<u64, BasicNode, E> {
    Failed::Unreachable(format!("the peer cannot run the group: {why}")).into_rpc()
}

fn unexpected<E: std::error::Error>() -> RPCError<u64, BasicNode, E> {
    Failed::Network("the peer answered another kind of request".to_string()).into_rpc()
}

/// One group's connections to its peers (over the node's shared [`Peers`]).
pub(super) struct GroupPeers {
    pub(super) group: Arc<str>,
    pub(super) peers: Arc<Peers>,
}

/// One group's connection to one peer.
pub(super) struct GroupPeer {
    group: Arc<str>,
    peers: Arc<Peers>,
    target: u64,
    address: String,
}

impl RaftNetworkFactory<TypeConfig> for GroupPeers {
    type Network = GroupPeer;

    async fn new_client(&mut self, target: u64, node: &BasicNode) -> Self::Network {
        GroupPeer {
            group: self.group.clone(),
            peers: self.peers.clone(),
            target,
            address: node.addr.clone(),
        }
    }
}

impl GroupPeer {
    async fn call(&self, rpc: Rpc, option: &RPCOption) -> Result<Reply, Failed> {
        self.peers
            .call(
                self.target,
                &self.address,
                &self.group,
                rpc,
                option.hard_ttl(),
            )
            .await
    }
}

impl RaftNetwork<TypeConfig> for GroupPeer {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<u64>, RPCError<u64, BasicNode, RaftError<u64>>> {
        match self.call(Rpc::Append(rpc), &option).await {
            Ok(Reply::Append(Ok(response))) => Ok(response),
            Ok(Reply::Append(Err(error))) => Err(RPCError::RemoteError(
                openraft::error::RemoteError::new(self.target, error),
            )),
            Ok(Reply::Unavailable(why)) => Err(unavailable(why)),
            Ok(_) => Err(unexpected()),
            Err(failed) => Err(failed.into_rpc()),
        }
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<u64>,
        RPCError<u64, BasicNode, RaftError<u64, InstallSnapshotError>>,
    > {
        match self.call(Rpc::Snapshot(rpc), &option).await {
            Ok(Reply::Snapshot(Ok(response))) => Ok(response),
            Ok(Reply::Snapshot(Err(error))) => Err(RPCError::RemoteError(
                openraft::error::RemoteError::new(self.target, error),
            )),
            Ok(Reply::Unavailable(why)) => Err(unavailable(why)),
            Ok(_) => Err(unexpected()),
            Err(failed) => Err(failed.into_rpc()),
        }
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<u64>,
        option: RPCOption,
    ) -> Result<VoteResponse<u64>, RPCError<u64, BasicNode, RaftError<u64>>> {
        match self.call(Rpc::Vote(rpc), &option).await {
            Ok(Reply::Vote(Ok(response))) => Ok(response),
            Ok(Reply::Vote(Err(error))) => Err(RPCError::RemoteError(
                openraft::error::RemoteError::new(self.target, error),
            )),
            Ok(Reply::Unavailable(why)) => Err(unavailable(why)),
            Ok(_) => Err(unexpected()),
            Err(failed) => Err(failed.into_rpc()),
        }
    }
}
