//! A connection's opening: the protocol headers, the SASL exchange and the peer's `open`,
//! all before the connection's state exists; the `open` the broker sends; and the answers
//! of a connection that is not served (over the connection limit, out of file descriptors,
//! an idle-time-out the broker does not support).

use std::time::Duration;

use bytes::BytesMut;
use fe2o3_amqp_types::performatives::{ChannelMax, Close, MaxFrameSize, Open, Performative};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::Context;
use super::connection::{CHANNEL_MAX, ConnectionError};
use super::frame::{self, FRAME_TYPE_AMQP, FRAME_TYPE_SASL, RawFrame};
use super::log_text::LogText;
use super::sasl::{self, SaslResult};
use super::transport::RawStream;
use crate::amqp::errors;
use crate::amqp::sas::Rights;

/// The shortest idle-time-out a peer may ask of us (AMQP 1.0 §2.4.5): we send a heartbeat
/// at half of it, so 100 ms means one every 50 ms at most. A shorter one is refused with a
/// `close` naming both values, as §2.4.5 says a peer that cannot support a proposed idle
/// timeout should, rather than silently heartbeating slower than the peer asked.
pub const MIN_PEER_IDLE_TIMEOUT: Duration = Duration::from_millis(100);

async fn read_more<S: RawStream>(
    stream: &mut S,
    input: &mut BytesMut,
) -> Result<(), ConnectionError> {
    if input.capacity() - input.len() < 4096 {
        input.reserve(64 * 1024);
    }
    let read = stream.read_buf(input).await?;
    if read == 0 {
        return Err(ConnectionError::Closed);
    }
    Ok(())
}

async fn read_exact_header<S: RawStream>(
    stream: &mut S,
    input: &mut BytesMut,
) -> Result<[u8; 8], ConnectionError> {
    while input.len() < 8 {
        read_more(stream, input).await?;
    }
    let mut header = [0u8; 8];
    header.copy_from_slice(&input.split_to(8));
    Ok(header)
}

async fn read_frame<S: RawStream>(
    stream: &mut S,
    input: &mut BytesMut,
    max_size: u32,
) -> Result<RawFrame, ConnectionError> {
    loop {
        if let Some(frame) = frame::take_frame(input, max_size)? {
            return Ok(frame);
        }
        read_more(stream, input).await?;
    }
}

/// Runs the handshake: headers, optional SASL, `open`. Returns the peer's `open`.
pub(super) async fn handshake<S: RawStream>(
    stream: &mut S,
    input: &mut BytesMut,
    output: &mut BytesMut,
    context: &Context,
    amqp_started: &mut bool,
) -> Result<(Open, Option<Rights>), ConnectionError> {
    let mut header = read_exact_header(stream, input).await?;
    let mut sasl_rights = None;
    if header == frame::SASL_HEADER {
        sasl::write_mechanisms(output)?;
        stream.write_all(output).await?;
        output.clear();
        let init_frame = read_frame(stream, input, 64 * 1024).await?;
        if init_frame.frame_type != FRAME_TYPE_SASL {
            return Err(ConnectionError::protocol(
                errors::DECODE_ERROR,
                "expected sasl-init",
            ));
        }
        let init = match sasl::decode_init(&init_frame.body) {
            Ok(init) => init,
            Err(error) => {
                // No AMQP close exists yet: the SASL outcome refuses, then the socket closes.
                sasl::write_outcome(output, false)?;
                return Err(error.into());
            }
        };
        let result = sasl::authenticate(&init, &context.settings.keys);
        let ok = !matches!(result, SaslResult::Refused);
        sasl::write_outcome(output, ok)?;
        stream.write_all(output).await?;
        output.clear();
        match result {
            SaslResult::Refused => {
                tracing::info!(mechanism = %LogText(&init.mechanism.0), "SASL authentication refused");
                return Err(ConnectionError::Closed);
            }
            SaslResult::Key(rights) => sasl_rights = Some(rights),
            SaslResult::Anonymous => {}
        }
        header = read_exact_header(stream, input).await?;
    }
    if header != frame::AMQP_HEADER {
        output.extend_from_slice(&frame::SASL_HEADER);
        stream.write_all(output).await?;
        return Err(ConnectionError::protocol(
            errors::DECODE_ERROR,
            "unsupported protocol header",
        ));
    }
    output.extend_from_slice(&frame::AMQP_HEADER);
    // Some clients (fe2o3-amqp) wait for our header before sending `open`.
    stream.write_all(output).await?;
    output.clear();
    *amqp_started = true;
    let open_frame = read_frame(stream, input, context.settings.max_frame_size).await?;
    if open_frame.frame_type != FRAME_TYPE_AMQP {
        return Err(ConnectionError::protocol(
            errors::DECODE_ERROR,
            "expected an AMQP frame",
        ));
    }
    let (performative, _) = frame::decode_performative(&open_frame.body)?;
    let Performative::Open(open) = performative else {
        return Err(ConnectionError::protocol(
            errors::DECODE_ERROR,
            "expected open",
        ));
    };
    Ok((open, sasl_rights))
}

/// The `open` the broker sends.
pub(super) fn our_open(context: &Context) -> Open {
    Open {
        container_id: "ferrobus".to_string(),
        hostname: None,
        max_frame_size: MaxFrameSize(context.settings.max_frame_size),
        channel_max: ChannelMax(CHANNEL_MAX),
        // "0s" in the configuration: no idle timeout at all (none advertised or enforced).
        idle_time_out: Some(
            context
                .settings
                .idle_timeout
                .as_millis()
                .min(u32::MAX as u128) as u32,
        )
        .filter(|millis| *millis > 0),
        outgoing_locales: None,
        incoming_locales: None,
        offered_capabilities: None,
        desired_capabilities: None,
        properties: None,
    }
}

/// Whether a connection may be served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Served.
    Admitted,
    /// `max_connections` is reached: opened and closed at once with an error.
    TooManyConnections,
}

/// Our protocol header, `open` and `close` with `amqp:resource-limit-exceeded`: the whole
/// answer to a connection taken while the process is out of file descriptors. It is
/// written at once, without waiting for the peer's header, so the connection's descriptor
/// (the spare's) is free again at once.
pub fn out_of_descriptors_refusal(context: &Context) -> Vec<u8> {
    let mut output = BytesMut::new();
    output.extend_from_slice(&frame::AMQP_HEADER);
    let close = Close {
        error: Some(errors::amqp_error(
            errors::RESOURCE_LIMIT_EXCEEDED,
            "The broker has no file descriptors left for another connection.",
        )),
    };
    // Encoding our own open and close cannot fail; an empty answer would still close.
    let _ = frame::write_performative(&mut output, 0, &Performative::Open(our_open(context)));
    let _ = frame::write_performative(&mut output, 0, &Performative::Close(close));
    output.to_vec()
}

/// Why the peer's proposed idle-time-out cannot be honoured, if it cannot: below
/// [`MIN_PEER_IDLE_TIMEOUT`] (zero or absent asks for no heartbeats at all).
pub(super) fn unsupported_idle_time_out(open: &Open) -> Option<String> {
    let millis = open.idle_time_out.filter(|millis| *millis > 0)?;
    let minimum = MIN_PEER_IDLE_TIMEOUT.as_millis();
    (u128::from(millis) < minimum).then(|| {
        format!(
            "The idle-time-out of {millis} ms in open is below the minimum of {minimum} ms this broker supports (it would have to send a heartbeat every {} ms); propose {minimum} ms or more, or 0 for none.",
            millis / 2
        )
    })
}
