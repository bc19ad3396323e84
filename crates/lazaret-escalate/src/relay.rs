//! `lazaret-escalate --relay`: the Escalation Socket inside a pod (the
//! Kubernetes backend, issue 32), where no host socket can be mounted.
//!
//! Serves [`paths::SOCKET`] and carries each connection to it as a stream
//! of [`RelayFrame`]s over stdout, reading the coordinator's frames from
//! stdin; the coordinator (`lazaret-coordinator`'s `escalation::relay`)
//! connects each stream to its own Escalation Socket. It moves bytes and
//! nothing else: mTLS and the signed request run end to end between a
//! `lazaret-escalate` client and the coordinator, so this process holds no
//! secret and is trusted by no one. When stdin ends (the coordinator or the
//! exec stream went away), it removes the socket and exits.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::Shutdown;
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use lazaret_protocol::escalation::paths;
use lazaret_protocol::relay::{RelayFrame, RelayReader, MAX_DATA_BYTES};

type Streams = Arc<Mutex<HashMap<u32, UnixStream>>>;
type Output = Arc<Mutex<std::io::Stdout>>;

/// How long one write to a client may block the relay's stdin; a client
/// that reads nothing for longer loses its connection.
const CLIENT_WRITE: Duration = Duration::from_secs(10);

/// Serves until stdin ends; the socket is removed whatever the end.
pub fn run() -> Result<(), String> {
    let _ = std::fs::remove_file(paths::SOCKET);
    let listener = UnixListener::bind(paths::SOCKET).map_err(|error| format!("cannot serve {}: {error}", paths::SOCKET))?;
    let streams: Streams = Arc::default();
    let output: Output = Arc::new(Mutex::new(std::io::stdout()));
    {
        let streams = streams.clone();
        std::thread::spawn(move || {
            let reason = from_coordinator(&streams);
            let _ = std::fs::remove_file(paths::SOCKET);
            if let Err(reason) = reason {
                eprintln!("lazaret-escalate: relay: {reason}");
                std::process::exit(1);
            }
            std::process::exit(0);
        });
    }
    let served = accept(&listener, &streams, &output);
    let _ = std::fs::remove_file(paths::SOCKET);
    served
}

/// Each client becomes a stream: its `Open`, then its bytes.
fn accept(listener: &UnixListener, streams: &Streams, output: &Output) -> Result<(), String> {
    let mut next: u32 = 0;
    for connection in listener.incoming() {
        let connection = match connection {
            Ok(connection) => connection,
            Err(error) => {
                // Out of descriptors, say: try again shortly rather than spin.
                eprintln!("lazaret-escalate: relay: accept: {error}");
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
        };
        next = next.checked_add(1).ok_or("out of stream numbers")?;
        let stream = next;
        let Ok(reader) = connection.try_clone() else { continue };
        let _ = connection.set_write_timeout(Some(CLIENT_WRITE));
        streams.lock().unwrap_or_else(PoisonError::into_inner).insert(stream, connection);
        send(output, &RelayFrame::Open { stream })?;
        let (streams, output) = (streams.clone(), output.clone());
        std::thread::spawn(move || to_coordinator(stream, reader, &streams, &output));
    }
    Ok(())
}

/// One client's bytes, as frames, until it closes; then its `Close`.
fn to_coordinator(stream: u32, mut reader: UnixStream, streams: &Streams, output: &Output) {
    let mut buffer = vec![0u8; MAX_DATA_BYTES];
    loop {
        match reader.read(&mut buffer) {
            Ok(0) | Err(_) => break,
            Ok(read) => {
                if send(output, &RelayFrame::Data { stream, bytes: buffer[..read].to_vec() }).is_err() {
                    break;
                }
            }
        }
    }
    if streams.lock().unwrap_or_else(PoisonError::into_inner).remove(&stream).is_some() {
        let _ = send(output, &RelayFrame::Close { stream });
    }
}

/// The coordinator's frames, to their clients, until stdin ends.
fn from_coordinator(streams: &Streams) -> Result<(), String> {
    let mut stdin = std::io::stdin().lock();
    let mut reader = RelayReader::default();
    let mut chunk = vec![0u8; MAX_DATA_BYTES];
    loop {
        let read = stdin.read(&mut chunk).map_err(|error| format!("reading stdin: {error}"))?;
        if read == 0 {
            return Ok(());
        }
        reader.push(&chunk[..read]);
        while let Some(frame) = reader.next_frame().map_err(|error| error.to_string())? {
            match frame {
                RelayFrame::Data { stream, bytes } => {
                    // Written without the lock: a slow client holds up only this thread.
                    let connection = streams.lock().unwrap_or_else(PoisonError::into_inner).get(&stream).and_then(|c| c.try_clone().ok());
                    if let Some(mut connection) = connection {
                        if connection.write_all(&bytes).is_err() {
                            let _ = connection.shutdown(Shutdown::Both);
                        }
                    }
                }
                RelayFrame::Close { stream } => {
                    if let Some(connection) = streams.lock().unwrap_or_else(PoisonError::into_inner).remove(&stream) {
                        let _ = connection.shutdown(Shutdown::Both);
                    }
                }
                RelayFrame::Open { stream } => return Err(format!("the coordinator opened stream {stream}; only the relay opens streams")),
            }
        }
    }
}

fn send(output: &Output, frame: &RelayFrame) -> Result<(), String> {
    let mut bytes = Vec::with_capacity(16);
    frame.encode(&mut bytes);
    let mut output = output.lock().unwrap_or_else(PoisonError::into_inner);
    output.write_all(&bytes).and_then(|()| output.flush()).map_err(|error| format!("writing stdout: {error}"))
}
