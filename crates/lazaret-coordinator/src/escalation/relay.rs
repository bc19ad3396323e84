//! The coordinator's end of the escalation relay (the Kubernetes backend,
//! issue 32). In a pod, `lazaret-escalate --relay` serves the Escalation
//! Socket and carries each connection as [`RelayFrame`]s over one
//! long-lived exec stream; here each stream becomes a connection to the
//! domain's own Escalation Socket, served by [`super::server`] exactly as a
//! local sandbox's connections are.
//!
//! Invariants: the relay is untrusted and only moves bytes: the mTLS
//! handshake, the identity check and the signed request all happen between
//! the client in the pod and [`super::server`], so a relay that forges,
//! drops or reorders bytes can only make a connection fail. Streams are
//! numbered by the relay in increasing order, never reused; at most
//! [`MAX_STREAMS`] are open (more are closed at once, and the server's own
//! connection limit still applies); a frame longer than the protocol allows,
//! of an unknown kind, or an `Open` out of order ends the relay.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use lazaret_protocol::relay::{RelayFrame, RelayReader, MAX_DATA_BYTES, MAX_STREAMS};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::UnixStream;
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use crate::error::Result;

/// Frames waiting to go to the relay. Full means the relay stopped reading
/// its stdin: the relay is ended.
const QUEUE: usize = 256;
/// Chunks waiting to go to one stream's connection. Full means the server
/// stopped reading that connection: the stream is closed.
const STREAM_QUEUE: usize = 16;
/// How long the last frames may take to reach the relay once it ended.
const LAST_FRAMES: Duration = Duration::from_secs(2);

/// Carries the relay's streams read from `from_relay` to connections to
/// `socket`, and their answers back to `to_relay`, until the relay's
/// stream ends (`Ok`), breaks the protocol or stops reading (`Err`).
/// Dropping the future ends every task it started.
pub async fn serve<R, W>(mut from_relay: R, to_relay: W, socket: PathBuf) -> Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let mut tasks = JoinSet::new();
    let (frames, queued) = mpsc::channel::<RelayFrame>(QUEUE);
    let writer = tasks.spawn(write_frames(queued, to_relay));
    let (closed_sender, mut closed) = mpsc::unbounded_channel::<u32>();
    let mut streams: HashMap<u32, mpsc::Sender<Vec<u8>>> = HashMap::new();
    let mut last_opened: u32 = 0;
    let mut reader = RelayReader::default();
    let mut chunk = vec![0u8; MAX_DATA_BYTES];
    let outcome = loop {
        let read = tokio::select! {
            read = from_relay.read(&mut chunk) => read,
            Some(stream) = closed.recv() => {
                // The connection ended on the server's side (its `Close` is queued).
                streams.remove(&stream);
                continue;
            }
        };
        let read = match read {
            Ok(0) => break Ok(()),
            Ok(read) => read,
            Err(error) => break Err(crate::Error::from(error)),
        };
        reader.push(&chunk[..read]);
        let handled: Result<()> = loop {
            let frame = match reader.next_frame() {
                Ok(Some(frame)) => frame,
                Ok(None) => break Ok(()),
                Err(error) => break Err(crate::format_err!("the escalation relay broke its protocol: {error}")),
            };
            let close = match frame {
                RelayFrame::Open { stream } => {
                    if stream <= last_opened {
                        break Err(crate::format_err!("the escalation relay opened stream {stream} after {last_opened}"));
                    }
                    last_opened = stream;
                    if streams.len() >= MAX_STREAMS {
                        Some(stream)
                    } else {
                        match UnixStream::connect(&socket).await {
                            Ok(connection) => {
                                let (reader, writer) = connection.into_split();
                                let (chunks, pending) = mpsc::channel(STREAM_QUEUE);
                                tasks.spawn(read_connection(stream, reader, frames.clone(), closed_sender.clone()));
                                tasks.spawn(write_connection(pending, writer));
                                streams.insert(stream, chunks);
                                None
                            }
                            Err(error) => {
                                tracing::warn!(%error, "cannot connect a relayed stream to the Escalation Socket");
                                Some(stream)
                            }
                        }
                    }
                }
                RelayFrame::Data { stream, bytes } => match streams.get(&stream).map(|chunks| chunks.try_send(bytes)) {
                    Some(Err(_)) => {
                        // The server is not reading this connection: it goes.
                        streams.remove(&stream);
                        Some(stream)
                    }
                    Some(Ok(())) | None => None,
                },
                RelayFrame::Close { stream } => {
                    // Dropping the sender ends the writer, which closes the connection.
                    streams.remove(&stream);
                    None
                }
            };
            if let Some(stream) = close {
                if frames.try_send(RelayFrame::Close { stream }).is_err() {
                    break Err(crate::format_err!("the escalation relay stopped reading its stdin"));
                }
            }
        };
        if let Err(error) = handled {
            break Err(error);
        }
    };
    // What is queued for the relay gets a moment to leave; the rest ends with `tasks`.
    drop((frames, streams, closed_sender));
    let _ = tokio::time::timeout(LAST_FRAMES, async {
        while let Some(finished) = tasks.join_next_with_id().await {
            if finished.map_or_else(|error| error.id(), |(id, ())| id) == writer.id() {
                return;
            }
        }
    })
    .await;
    outcome
}

/// The server's bytes of one stream, as frames, then its `Close`.
async fn read_connection(
    stream: u32,
    mut reader: tokio::net::unix::OwnedReadHalf,
    frames: mpsc::Sender<RelayFrame>,
    closed: mpsc::UnboundedSender<u32>,
) {
    let mut buffer = vec![0u8; MAX_DATA_BYTES];
    loop {
        match reader.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(read) => {
                if frames.send(RelayFrame::Data { stream, bytes: buffer[..read].to_vec() }).await.is_err() {
                    return;
                }
            }
        }
    }
    let _ = frames.send(RelayFrame::Close { stream }).await;
    let _ = closed.send(stream);
}

/// The relay's bytes of one stream, to its connection; when the stream is
/// closed (the sender dropped), the connection is shut down.
async fn write_connection(mut pending: mpsc::Receiver<Vec<u8>>, mut writer: tokio::net::unix::OwnedWriteHalf) {
    while let Some(bytes) = pending.recv().await {
        if writer.write_all(&bytes).await.is_err() {
            return;
        }
    }
    let _ = writer.shutdown().await;
}

async fn write_frames<W: AsyncWrite + Unpin>(mut queued: mpsc::Receiver<RelayFrame>, mut to_relay: W) {
    let mut bytes = Vec::new();
    while let Some(frame) = queued.recv().await {
        bytes.clear();
        frame.encode(&mut bytes);
        if to_relay.write_all(&bytes).await.is_err() || to_relay.flush().await.is_err() {
            return;
        }
    }
    let _ = to_relay.shutdown().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(list: &[RelayFrame]) -> Vec<u8> {
        let mut bytes = Vec::new();
        for frame in list {
            frame.encode(&mut bytes);
        }
        bytes
    }

    /// An echo server on a Unix socket in `dir`.
    fn echo_server(dir: &std::path::Path) -> PathBuf {
        let path = dir.join("escalate.sock");
        let listener = tokio::net::UnixListener::bind(&path).expect("bind");
        tokio::spawn(async move {
            while let Ok((mut connection, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let (mut reader, mut writer) = connection.split();
                    let _ = tokio::io::copy(&mut reader, &mut writer).await;
                });
            }
        });
        path
    }

    async fn relay(input: Vec<u8>, socket: PathBuf) -> (Result<()>, Vec<RelayFrame>) {
        let (to_relay, mut from_coordinator) = tokio::io::duplex(1 << 20);
        let outcome = serve(std::io::Cursor::new(input), to_relay, socket).await;
        let mut bytes = Vec::new();
        from_coordinator.read_to_end(&mut bytes).await.expect("read");
        let mut reader = RelayReader::default();
        reader.push(&bytes);
        let mut decoded = Vec::new();
        while let Some(frame) = reader.next_frame().expect("the coordinator's frames") {
            decoded.push(frame);
        }
        (outcome, decoded)
    }

    #[tokio::test]
    async fn a_hostile_relay_ends_itself_and_reaches_nothing_but_the_socket() {
        let dir = tempfile::tempdir().expect("tempdir");
        let socket = echo_server(dir.path());
        // Out of order, reused, unknown kind, oversized: each ends the relay with an error naming it.
        for (input, needle) in [
            (frames(&[RelayFrame::Open { stream: 2 }, RelayFrame::Open { stream: 1 }]), "opened stream 1 after 2"),
            (frames(&[RelayFrame::Open { stream: 1 }, RelayFrame::Open { stream: 1 }]), "opened stream 1 after 1"),
            (vec![9, 0, 0, 0, 1], "unknown kind 9"),
            ([vec![2, 0, 0, 0, 1], ((MAX_DATA_BYTES + 1) as u32).to_be_bytes().to_vec()].concat(), "more than"),
        ] {
            let (outcome, _) = relay(input, socket.clone()).await;
            let error = outcome.expect_err(needle);
            assert!(error.to_string().contains(needle), "{error}");
        }
        // Data for a stream never opened, and a close of one, reach nothing.
        let (outcome, answered) =
            relay(frames(&[RelayFrame::Data { stream: 5, bytes: b"x".to_vec() }, RelayFrame::Close { stream: 5 }]), socket.clone()).await;
        outcome.expect("ignored");
        assert_eq!(answered, Vec::new());
        // Past MAX_STREAMS, a stream is closed at once.
        let opens: Vec<RelayFrame> = (1..=MAX_STREAMS as u32 + 1).map(|stream| RelayFrame::Open { stream }).collect();
        let (to_relay, mut from_coordinator) = tokio::io::duplex(1 << 20);
        let (mut relay_end, coordinator_end) = tokio::io::duplex(1 << 20);
        let task = tokio::spawn(serve(coordinator_end, to_relay, socket.clone()));
        relay_end.write_all(&frames(&opens)).await.expect("write");
        let mut header = [0u8; 5];
        from_coordinator.read_exact(&mut header).await.expect("a close");
        assert_eq!(RelayFrame::decode(&header).expect("frame"), Some((RelayFrame::Close { stream: MAX_STREAMS as u32 + 1 }, 5)));
        drop(relay_end);
        task.await.expect("task").expect("ends when the relay's stream ends");
    }

    #[tokio::test]
    async fn a_relay_that_stops_reading_is_ended_not_waited_for() {
        let dir = tempfile::tempdir().expect("tempdir");
        let socket = echo_server(dir.path());
        // Its stdin is never read: the coordinator's frames back up.
        let (to_relay, _unread) = tokio::io::duplex(16);
        let opens: Vec<RelayFrame> = (1..=(MAX_STREAMS + QUEUE + 8) as u32).map(|stream| RelayFrame::Open { stream }).collect();
        let (mut relay_end, coordinator_end) = tokio::io::duplex(1 << 20);
        let task = tokio::spawn(serve(coordinator_end, to_relay, socket));
        relay_end.write_all(&frames(&opens)).await.expect("write");
        let outcome = tokio::time::timeout(Duration::from_secs(10), task).await.expect("it ends").expect("task");
        assert!(outcome.expect_err("an error").to_string().contains("stopped reading"));
    }

    #[tokio::test]
    async fn bytes_of_interleaved_streams_reach_the_socket_and_come_back_in_order() {
        let dir = tempfile::tempdir().expect("tempdir");
        let socket = echo_server(dir.path());
        let (to_relay, mut from_coordinator) = tokio::io::duplex(1 << 20);
        let (mut relay_end, coordinator_end) = tokio::io::duplex(1 << 20);
        let task = tokio::spawn(serve(coordinator_end, to_relay, socket));
        let payload: Vec<u8> = (0..200_000u32).map(|index| (index % 251) as u8).collect();
        let mut sent = vec![RelayFrame::Open { stream: 1 }, RelayFrame::Open { stream: 2 }];
        for (index, chunk) in payload.chunks(MAX_DATA_BYTES).enumerate() {
            sent.push(RelayFrame::Data { stream: 1 + (index % 2) as u32, bytes: chunk.to_vec() });
        }
        relay_end.write_all(&frames(&sent)).await.expect("write");
        let mut echoed: HashMap<u32, Vec<u8>> = HashMap::new();
        let mut reader = RelayReader::default();
        while echoed.values().map(Vec::len).sum::<usize>() < payload.len() {
            let mut chunk = vec![0u8; 1 << 16];
            let read = from_coordinator.read(&mut chunk).await.expect("read");
            assert_ne!(read, 0, "the coordinator's stream ended early");
            reader.push(&chunk[..read]);
            while let Some(frame) = reader.next_frame().expect("frame") {
                if let RelayFrame::Data { stream, bytes } = frame {
                    echoed.entry(stream).or_default().extend(bytes);
                }
            }
        }
        let expected = |stream: u32| -> Vec<u8> {
            payload
                .chunks(MAX_DATA_BYTES)
                .enumerate()
                .filter(|(index, _)| 1 + (index % 2) as u32 == stream)
                .flat_map(|(_, chunk)| chunk.to_vec())
                .collect()
        };
        assert_eq!(echoed[&1], expected(1));
        assert_eq!(echoed[&2], expected(2));
        drop(relay_end);
        task.await.expect("task").expect("ends");
    }
}
