//! The AMQP WebSocket binding (`GET /$servicebus/websocket/`): the upgrade, and the pump that
//! carries AMQP bytes between the WebSocket's binary messages and the connection engine.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use super::{Admin, failure};

/// The AMQP WebSocket binding's subprotocol, and the generic one.
const WEBSOCKET_PROTOCOLS: [&str; 2] = ["AMQPWSB10", "amqp"];

/// Largest WebSocket message (and frame) accepted: AMQP frames may be split over messages
/// in any way, so this only bounds one message's buffering.
const MAX_WEBSOCKET_MESSAGE: usize = 4 * 1024 * 1024;

/// Answers the AMQP WebSocket upgrade (`GET /$servicebus/websocket/`): AMQP frames travel
/// in binary messages, to the same connection engine as plain AMQP.
pub(super) async fn websocket(admin: &Admin, mut parts: axum::http::request::Parts) -> Response {
    use axum::extract::FromRequestParts;
    let Some(Some(entry)) = admin.amqp.get().cloned() else {
        return failure(
            StatusCode::NOT_FOUND,
            "AMQP over WebSockets is switched off on this broker ([websocket] enabled = false).",
        );
    };
    let upgrade =
        match axum::extract::ws::WebSocketUpgrade::from_request_parts(&mut parts, &()).await {
            Ok(upgrade) => upgrade,
            Err(rejection) => return rejection.into_response(),
        };
    upgrade
        .protocols(WEBSOCKET_PROTOCOLS)
        .max_message_size(MAX_WEBSOCKET_MESSAGE)
        .max_frame_size(MAX_WEBSOCKET_MESSAGE)
        .on_upgrade(move |socket| async move {
            match tokio::net::UnixStream::pair() {
                Ok((engine, pump)) => {
                    tokio::join!(entry(engine), pump_websocket(socket, pump));
                }
                Err(error) => tracing::warn!(%error, "cannot bridge a WebSocket connection"),
            }
        })
}

/// Copies AMQP bytes both ways between a WebSocket and the engine's socket, each direction
/// on its own so neither can stall the other; ends when either side does.
async fn pump_websocket(socket: axum::extract::ws::WebSocket, pump: tokio::net::UnixStream) {
    use axum::extract::ws::Message;
    use futures_util::{SinkExt, StreamExt};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (mut to_peer, mut from_peer) = socket.split();
    let (mut from_engine, mut to_engine) = pump.into_split();
    let inbound = async {
        use futures_util::FutureExt;
        // Clients often send each AMQP frame as a message of its own: what has already
        // arrived is gathered into one write, so the engine wakes once per batch rather
        // than once per frame.
        let mut gathered = bytes::BytesMut::new();
        let mut ended = false;
        while !ended {
            let Some(Ok(first)) = from_peer.next().await else {
                break;
            };
            let mut next = Some(first);
            while let Some(message) = next.take() {
                match message {
                    Message::Binary(bytes) => gathered.extend_from_slice(&bytes),
                    Message::Close(_) => {
                        ended = true;
                        break;
                    }
                    // Pings are answered by the WebSocket layer; text has no meaning here.
                    _ => {}
                }
                if gathered.len() >= 256 * 1024 {
                    break;
                }
                match from_peer.next().now_or_never() {
                    Some(Some(Ok(message))) => next = Some(message),
                    Some(_) => ended = true,
                    None => {}
                }
            }
            if !gathered.is_empty() && to_engine.write_all(&gathered.split()).await.is_err() {
                break;
            }
        }
        let _ = to_engine.shutdown().await;
    };
    let outbound = async {
        let mut buffer = bytes::BytesMut::with_capacity(64 * 1024);
        loop {
            buffer.reserve(64 * 1024);
            match from_engine.read_buf(&mut buffer).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    let chunk = buffer.split().freeze();
                    if to_peer.send(Message::Binary(chunk)).await.is_err() {
                        break;
                    }
                }
            }
        }
        let _ = to_peer.send(Message::Close(None)).await;
    };
    // What the engine wrote last (a `close` with its reason) must reach the peer even when
    // the peer's side ended first; a peer that never ends its side after the engine closed
    // gets a few seconds.
    tokio::pin!(inbound);
    tokio::pin!(outbound);
    tokio::select! {
        () = &mut inbound => outbound.await,
        () = &mut outbound => {
            let _ = tokio::time::timeout(std::time::Duration::from_secs(5), inbound).await;
        }
    }
}
