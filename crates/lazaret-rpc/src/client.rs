//! The typed client of the control socket: jsonrpsee's async client over a
//! Unix socket with LSP framing. Callers use the `LazaretApiClient` trait
//! that `lazaret-protocol` generates from the same `#[rpc]` definition the
//! coordinator serves, so no method or field name is written by hand.

use std::io;
use std::path::Path;
use std::time::Duration;

use jsonrpsee::core::client::{ClientBuilder, ReceivedMessage, TransportReceiverT, TransportSenderT};
use tokio::io::BufReader;
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::UnixStream;

use crate::framing::{read_message, write_message};

pub use jsonrpsee::core::client::{Client, Error as CallError, Subscription};

/// Largest message accepted from the coordinator.
const MAX_MESSAGE: usize = 16 << 20;
/// Calls wait at most this long. `session/register` resolves only once the
/// sandbox runs (an image build or pull can take minutes); every other call
/// answers at once, and callers bound their own waits where it matters.
const CALL_TIMEOUT: Duration = Duration::from_secs(3600);
/// Events buffered per subscription before jsonrpsee gives up on a reader
/// that does not keep up (the coordinator also reports its own drops, as
/// `eventsLagged`).
const SUBSCRIPTION_BUFFER: usize = 4096;

/// A failed connection or call.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot connect to the control socket {path}: {source}")]
    Connect {
        path: String,
        #[source]
        source: io::Error,
    },
    /// The coordinator answered with an error (`error_code::*` of
    /// `lazaret-protocol`, or a JSON-RPC one).
    #[error("{message} (code {code})")]
    Remote { code: i32, message: String },
    #[error("the coordinator closed the connection")]
    Closed,
    #[error("control connection: {0}")]
    Transport(String),
}

impl Error {
    /// Whether the connection went away: the socket gone or refusing, or
    /// the connection closed.
    pub fn connection_gone(&self) -> bool {
        match self {
            Error::Connect { source, .. } => matches!(source.kind(), io::ErrorKind::NotFound | io::ErrorKind::ConnectionRefused),
            Error::Closed => true,
            Error::Remote { .. } | Error::Transport(_) => false,
        }
    }

    /// The coordinator's error code, when it answered with one.
    pub fn code(&self) -> Option<i32> {
        match self {
            Error::Remote { code, .. } => Some(*code),
            _ => None,
        }
    }
}

impl From<CallError> for Error {
    fn from(error: CallError) -> Error {
        match error {
            CallError::Call(object) => Error::Remote { code: object.code(), message: object.message().to_owned() },
            CallError::RestartNeeded(_) => Error::Closed,
            other => Error::Transport(other.to_string()),
        }
    }
}

/// `.answered()` turns a typed call's jsonrpsee error into [`Error`].
pub trait Answered<T> {
    fn answered(self) -> Result<T, Error>;
}

impl<T> Answered<T> for Result<T, CallError> {
    fn answered(self) -> Result<T, Error> {
        self.map_err(Error::from)
    }
}

/// Connects to a coordinator's control socket.
pub async fn connect(path: &Path) -> Result<Client, Error> {
    let stream = UnixStream::connect(path).await.map_err(|source| Error::Connect { path: path.display().to_string(), source })?;
    let (read_half, write_half) = stream.into_split();
    Ok(ClientBuilder::default()
        .request_timeout(CALL_TIMEOUT)
        .max_buffer_capacity_per_subscription(SUBSCRIPTION_BUFFER)
        .build_with_tokio(Sender(write_half), Receiver(BufReader::new(read_half))))
}

struct Sender(OwnedWriteHalf);

impl TransportSenderT for Sender {
    type Error = io::Error;

    async fn send(&mut self, message: String) -> Result<(), io::Error> {
        write_message(&mut self.0, message.as_bytes()).await
    }
}

struct Receiver(BufReader<OwnedReadHalf>);

impl TransportReceiverT for Receiver {
    type Error = io::Error;

    async fn receive(&mut self) -> Result<ReceivedMessage, io::Error> {
        match read_message(&mut self.0, MAX_MESSAGE).await? {
            Some(body) => Ok(ReceivedMessage::Bytes(body)),
            None => Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the coordinator closed the connection")),
        }
    }
}
