//! One port for everything: the first bytes a client sends tell AMQP (`AMQP`), TLS (a
//! handshake record, `0x16`) and HTTP (a method name) apart. The SDKs' administration
//! clients call `https://<host:port of the connection string>` — the AMQP port — so the
//! AMQP listener answers them too; inside TLS the same test picks HTTP or AMQP.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};

/// What a connection speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// The AMQP (or SASL) protocol header.
    Amqp,
    /// A TLS handshake record.
    Tls,
    /// Anything else: treated as HTTP/1.1 (a method name).
    Http,
}

/// Classifies a connection by its first byte.
pub fn classify(first: u8) -> Protocol {
    match first {
        b'A' => Protocol::Amqp,
        0x16 => Protocol::Tls,
        _ => Protocol::Http,
    }
}

/// A stream whose first bytes were already read: they are served again before the rest.
pub struct Prefixed<S> {
    prefix: Bytes,
    inner: S,
}

impl<S> Prefixed<S> {
    /// `prefix` is returned by the first reads, then `inner`'s bytes.
    pub fn new(prefix: Bytes, inner: S) -> Prefixed<S> {
        Prefixed { prefix, inner }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Prefixed<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        context: &mut Context<'_>,
        buffer: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if !self.prefix.is_empty() {
            let take = self.prefix.len().min(buffer.remaining());
            buffer.put_slice(&self.prefix[..take]);
            self.prefix.advance(take);
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_read(context, buffer)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Prefixed<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        context: &mut Context<'_>,
        bytes: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(context, bytes)
    }

    fn poll_flush(
        mut self: Pin<&mut Self>,
        context: &mut Context<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(context)
    }

    fn poll_shutdown(
        mut self: Pin<&mut Self>,
        context: &mut Context<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(context)
    }
}

/// Reads the first byte of a stream that cannot peek (a TLS stream) and classifies it;
/// the byte is kept in the returned stream. `None` when the peer closed first.
pub async fn classify_stream<S: AsyncRead + Unpin>(
    mut stream: S,
) -> std::io::Result<Option<(Protocol, Prefixed<S>)>> {
    let mut first = [0u8; 1];
    let read = stream.read(&mut first).await?;
    if read == 0 {
        return Ok(None);
    }
    Ok(Some((
        classify(first[0]),
        Prefixed::new(Bytes::copy_from_slice(&first), stream),
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    #[test]
    fn first_bytes_tell_the_protocols_apart() {
        assert_eq!(classify(b'A'), Protocol::Amqp);
        assert_eq!(classify(0x16), Protocol::Tls);
        for method in [b'G', b'P', b'D', b'H', b'O'] {
            assert_eq!(classify(method), Protocol::Http);
        }
    }

    #[tokio::test]
    async fn a_prefixed_stream_serves_the_prefix_then_the_rest() {
        let inner: &[u8] = b"ET / HTTP/1.1\r\n";
        let (protocol, mut stream) = classify_stream(&b"G"[..])
            .await
            .expect("reads")
            .expect("a byte");
        assert_eq!(protocol, Protocol::Http);
        let mut text = String::new();
        stream.read_to_string(&mut text).await.expect("reads");
        assert_eq!(text, "G");
        let mut chained = Prefixed::new(Bytes::from_static(b"G"), inner);
        let mut text = String::new();
        chained.read_to_string(&mut text).await.expect("reads");
        assert_eq!(text, "GET / HTTP/1.1\r\n");
    }
}
