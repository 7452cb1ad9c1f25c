//! The byte streams an AMQP connection runs on: a TCP socket for plain AMQP, or one end of a
//! local socket pair whose other end is pumped to a TLS session or a WebSocket
//! ([`bridge`]). The connection's event loop needs readiness and non-blocking reads and
//! writes (it writes what the socket takes without waiting), which both socket types have.

use std::future::Future;
use std::io;

use bytes::BufMut;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpStream, UnixStream};

/// A socket the connection engine can run on.
pub trait RawStream: AsyncRead + AsyncWrite + Unpin + Send + 'static {
    /// Waits until a read may make progress.
    fn ready_to_read(&self) -> impl Future<Output = io::Result<()>> + Send;
    /// Waits until a write may make progress.
    fn ready_to_write(&self) -> impl Future<Output = io::Result<()>> + Send;
    /// Reads what is there without waiting.
    fn read_now<B: BufMut>(&self, buffer: &mut B) -> io::Result<usize>;
    /// Writes what the socket takes without waiting.
    fn write_now(&self, bytes: &[u8]) -> io::Result<usize>;
}

macro_rules! raw_stream {
    ($type:ty) => {
        impl RawStream for $type {
            fn ready_to_read(&self) -> impl Future<Output = io::Result<()>> + Send {
                self.readable()
            }
            fn ready_to_write(&self) -> impl Future<Output = io::Result<()>> + Send {
                self.writable()
            }
            fn read_now<B: BufMut>(&self, buffer: &mut B) -> io::Result<usize> {
                self.try_read_buf(buffer)
            }
            fn write_now(&self, bytes: &[u8]) -> io::Result<usize> {
                self.try_write(bytes)
            }
        }
    };
}

raw_stream!(TcpStream);
raw_stream!(UnixStream);

/// Bytes moved between the two sides of a bridge per read.
const PUMP_BUFFER: usize = 64 * 1024;

/// Runs a byte stream (a TLS session) through a local socket pair: returns the end the
/// connection engine runs on; a task copies both ways until either side ends.
pub fn bridge<S>(outer: S) -> io::Result<UnixStream>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (engine_side, pump_side) = UnixStream::pair()?;
    tokio::spawn(async move {
        let mut outer = outer;
        let mut pump_side = pump_side;
        let _ = tokio::io::copy_bidirectional_with_sizes(
            &mut outer,
            &mut pump_side,
            PUMP_BUFFER,
            PUMP_BUFFER,
        )
        .await;
    });
    Ok(engine_side)
}
