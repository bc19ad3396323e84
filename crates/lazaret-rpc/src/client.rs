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
    /// A call got no answer within its bound (`lazaret_core::bounds`).
    #[error("the coordinator did not answer {call} within {} s", bound.as_secs())]
    TimedOut { call: &'static str, bound: Duration },
}

impl Error {
    /// Whether the connection went away: the socket gone or refusing, or
    /// the connection closed.
    pub fn connection_gone(&self) -> bool {
        match self {
            Error::Connect { source, .. } => matches!(source.kind(), io::ErrorKind::NotFound | io::ErrorKind::ConnectionRefused),
            Error::Closed => true,
            Error::Remote { .. } | Error::Transport(_) | Error::TimedOut { .. } => false,
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

/// Waits for a typed call (a `LazaretApiClient` method's future) for at
/// most `bound`; past it the call fails with [`Error::TimedOut`], which
/// names `call` (the client method) and the bound.
pub async fn within<T>(
    call: &'static str,
    bound: Duration,
    answer: impl std::future::Future<Output = Result<T, CallError>>,
) -> Result<T, Error> {
    match tokio::time::timeout(bound, answer).await {
        // jsonrpsee's own time-out (the connection's `longest_call`, at
        // least `bound`) can fire at the same moment.
        Ok(Err(CallError::RequestTimeout)) | Err(_) => Err(Error::TimedOut { call, bound }),
        Ok(answer) => answer.answered(),
    }
}

/// Connects to a coordinator's control socket. No call on the connection
/// waits longer than `longest_call` (jsonrpsee's own time-out, a backstop:
/// callers bound each call with [`within`], whose error names the call; no
/// call's bound may exceed `longest_call`).
pub async fn connect(path: &Path, longest_call: Duration) -> Result<Client, Error> {
    let stream = UnixStream::connect(path).await.map_err(|source| Error::Connect { path: path.display().to_string(), source })?;
    let (read_half, write_half) = stream.into_split();
    Ok(ClientBuilder::default()
        .request_timeout(longest_call)
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

#[cfg(test)]
mod bound_tests {
    use super::*;

    #[tokio::test]
    async fn a_call_past_its_bound_names_the_call_and_the_bound() {
        let never = std::future::pending::<Result<(), CallError>>();
        let started = std::time::Instant::now();
        let error = within("escalation_list", Duration::from_secs(1), never).await.expect_err("times out");
        assert!(started.elapsed() < Duration::from_secs(3));
        assert_eq!(error.to_string(), "the coordinator did not answer escalation_list within 1 s");
        assert!(!error.connection_gone());
    }

    #[tokio::test]
    async fn a_call_answered_in_time_is_its_answer() {
        let answer = within("domain_status", Duration::from_secs(1), async { Ok::<u8, CallError>(7) }).await.expect("answered");
        assert_eq!(answer, 7);
    }
}
