//! A JSON-RPC client over the control socket: requests are matched to
//! responses by id; notifications go to a channel.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;
use tokio::io::BufReader;
use tokio::net::unix::OwnedWriteHalf;
use tokio::net::UnixStream;
use tokio::sync::{mpsc, oneshot};

use crate::framing::{read_message, write_message};

const MAX_MESSAGE: usize = 16 << 20;

#[derive(Debug, thiserror::Error)]
pub enum RpcError {
    #[error("cannot connect to the control socket {path}: {source}")]
    Connect { path: String, source: std::io::Error },
    #[error("control connection: {0}")]
    Io(#[from] std::io::Error),
    #[error("the coordinator closed the connection")]
    Closed,
    #[error("{message} (code {code})")]
    Remote { code: i64, message: String },
    #[error("unexpected response: {0}")]
    Decode(String),
}

type Pending = Arc<Mutex<HashMap<u64, oneshot::Sender<Result<Value, RpcError>>>>>;

pub struct RpcClient {
    writer: tokio::sync::Mutex<OwnedWriteHalf>,
    pending: Pending,
    next_id: AtomicU64,
    reader: tokio::task::JoinHandle<()>,
}

impl RpcClient {
    /// Connects; returns the client and a receiver of server notifications
    /// (`{"method": ..., "params": ...}` objects).
    pub async fn connect(path: &Path) -> Result<(RpcClient, mpsc::UnboundedReceiver<Value>), RpcError> {
        let stream = UnixStream::connect(path).await.map_err(|source| RpcError::Connect { path: path.display().to_string(), source })?;
        let (read_half, write_half) = stream.into_split();
        let pending: Pending = Arc::default();
        let (notifications_tx, notifications) = mpsc::unbounded_channel();
        let reader_pending = pending.clone();
        let reader = tokio::spawn(async move {
            let mut reader = BufReader::new(read_half);
            while let Ok(Some(body)) = read_message(&mut reader, MAX_MESSAGE).await {
                let Ok(message) = serde_json::from_slice::<Value>(&body) else { continue };
                match message.get("id").and_then(Value::as_u64) {
                    Some(id) if message.get("method").is_none() => {
                        let result = match message.get("error") {
                            Some(error) => Err(RpcError::Remote {
                                code: error.get("code").and_then(Value::as_i64).unwrap_or(0),
                                message: error.get("message").and_then(Value::as_str).unwrap_or("error").to_owned(),
                            }),
                            None => Ok(message.get("result").cloned().unwrap_or(Value::Null)),
                        };
                        let waiter = reader_pending.lock().ok().and_then(|mut pending| pending.remove(&id));
                        if let Some(waiter) = waiter {
                            let _ = waiter.send(result);
                        }
                    }
                    _ => {
                        let _ = notifications_tx.send(message);
                    }
                }
            }
            // Connection gone: fail every outstanding call.
            if let Ok(mut pending) = reader_pending.lock() {
                for (_, waiter) in pending.drain() {
                    let _ = waiter.send(Err(RpcError::Closed));
                }
            }
        });
        Ok((RpcClient { writer: tokio::sync::Mutex::new(write_half), pending, next_id: AtomicU64::new(1), reader }, notifications))
    }

    pub async fn call<P: Serialize, R: DeserializeOwned>(&self, method: &str, params: P) -> Result<R, RpcError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (sender, receiver) = oneshot::channel();
        self.pending.lock().map_err(|_| RpcError::Closed)?.insert(id, sender);
        let request = serde_json::json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params });
        let body = serde_json::to_vec(&request).map_err(|error| RpcError::Decode(error.to_string()))?;
        write_message(&mut *self.writer.lock().await, &body).await?;
        let value = receiver.await.map_err(|_| RpcError::Closed)??;
        serde_json::from_value(value).map_err(|error| RpcError::Decode(error.to_string()))
    }
}

impl Drop for RpcClient {
    fn drop(&mut self) {
        self.reader.abort();
    }
}
