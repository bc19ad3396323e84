//! Unix-socket transport for jsonrpsee `Methods` (jsonrpsee has none).
//! Only connections from our own uid (SO_PEERCRED) are served.
//!
//! Per connection: a reader loop (framed messages in), one task per request (dispatch into
//! `Methods`), and a writer task that drains an mpsc channel (framed messages out). The
//! channel's sender is wrapped in a `MethodSink`, which is what jsonrpsee's subscription
//! machinery writes subscription responses and notifications into, so responses and
//! notifications share one ordered outbound stream.
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use jsonrpsee::core::id_providers::RandomStringIdProvider;
use jsonrpsee::core::traits::IdProvider;
use jsonrpsee::types::error::{reject_too_many_subscriptions, ErrorCode};
use jsonrpsee::types::{ErrorObject, Id, Notification, Params, Request};
use jsonrpsee::{BoundedSubscriptions, ConnectionId, Extensions, MethodCallback, MethodResponse, MethodSink, Methods, SubscriptionState};
use serde_json::value::RawValue;
use tokio::io::BufReader;
use tokio::net::unix::{OwnedWriteHalf, UCred};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;

use crate::framing::{read_message, write_message};

/// Limits for one connection.
#[derive(Debug, Clone)]
pub struct Config {
    /// Largest accepted request body; a bigger frame closes the connection.
    pub max_request_size: usize,
    /// Larger responses are replaced by a JSON-RPC "response too big" error by jsonrpsee.
    pub max_response_size: usize,
    /// Concurrent subscriptions per connection (`BoundedSubscriptions`).
    pub max_subscriptions: u32,
    /// Outbound queue length; a subscription's `sink.send().await` waits when it is full.
    pub outbound_buffer: usize,
}

impl Default for Config {
    fn default() -> Self {
        Self { max_request_size: 16 << 20, max_response_size: 16 << 20, max_subscriptions: 64, outbound_buffer: 256 }
    }
}

/// Lifecycle of a connection, for the coordinator (reference counting etc.).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConnectionEvent {
    Opened {
        conn_id: ConnectionId,
        peer: Option<UCred>,
    },
    /// Sent after the socket is gone *and* every in-flight handler of that connection has
    /// been cancelled/finished, so no `session/register` of this connection can land after it.
    Closed {
        conn_id: ConnectionId,
    },
}

/// Accept connections forever, numbering them from 1 (0 is what `Methods::call` /
/// `raw_json_request` use internally, so it never names a real connection).
pub async fn serve(
    listener: UnixListener,
    methods: Methods,
    config: Config,
    events: mpsc::UnboundedSender<ConnectionEvent>,
) -> io::Result<()> {
    let next_id = AtomicUsize::new(1);
    let own_uid = nix::unistd::getuid().as_raw();
    let config = Arc::new(config);
    let mut backoff = crate::accept::Backoff::default();
    loop {
        let stream = crate::accept::next(&listener, &mut backoff, "control").await;
        let peer = stream.peer_cred().ok();
        if peer.map(|cred| cred.uid()) != Some(own_uid) {
            tracing::warn!(?peer, "refusing a control connection from another user");
            drop(stream);
            continue;
        }
        let conn_id = ConnectionId(next_id.fetch_add(1, Ordering::Relaxed));
        let methods = methods.clone();
        let config = config.clone();
        let events = events.clone();
        tokio::spawn(async move {
            let _ = events.send(ConnectionEvent::Opened { conn_id, peer });
            let _ = serve_connection(stream, conn_id, methods, &config).await;
            let _ = events.send(ConnectionEvent::Closed { conn_id });
        });
    }
}

/// Serve one connection until the peer disconnects (EOF or read error) or sends a frame that
/// cannot be parsed. When this returns, all handlers of the connection are finished and
/// every `SubscriptionSink` of it reports `closed()`.
pub async fn serve_connection(stream: UnixStream, conn_id: ConnectionId, methods: Methods, config: &Config) -> io::Result<()> {
    let peer = stream.peer_cred().ok();
    let (read_half, write_half) = stream.into_split();

    let (tx, rx) = mpsc::channel::<Box<RawValue>>(config.outbound_buffer);
    let sink = MethodSink::new_with_limit(tx, config.max_response_size.min(u32::MAX as usize) as u32);
    let (stop_writer, writer_stopped) = oneshot::channel();
    let writer = tokio::spawn(write_loop(write_half, rx, writer_stopped));

    // Handlers read these with `#[method(..., with_extensions)]` -> `ext.get::<ConnectionId>()`.
    let mut extensions = Extensions::new();
    extensions.insert(conn_id);
    if let Some(cred) = peer {
        extensions.insert(cred);
    }

    let conn = Arc::new(Connection {
        conn_id,
        methods,
        sink: sink.clone(),
        subscriptions: BoundedSubscriptions::new(config.max_subscriptions),
        id_provider: Arc::new(RandomStringIdProvider::new(16)),
        extensions,
        max_response_size: config.max_response_size,
    });

    let mut calls = JoinSet::new();
    let mut reader = BufReader::new(read_half);
    let result = loop {
        match read_message(&mut reader, config.max_request_size).await {
            Ok(Some(body)) => {
                let conn = conn.clone();
                calls.spawn(async move { conn.handle(body).await });
                // Reap finished handlers so the set does not grow with the connection's age.
                while calls.try_join_next().is_some() {}
            }
            Ok(None) => break Ok(()),
            Err(e) if e.kind() == io::ErrorKind::InvalidData => {
                // Framing is lost; tell the peer and hang up.
                let _ = sink.send_error(Id::Null, ErrorCode::ParseError.into()).await;
                break Err(e);
            }
            Err(e) => break Err(e),
        }
    };

    // Peer is gone: cancel in-flight calls (their responses have nowhere to go), then drop
    // the outbound receiver so every MethodSink/SubscriptionSink of this connection is closed.
    // (Subscription tasks hold clones of the sender, so the channel never ends by itself:
    // the writer is told to stop, flushes what is queued, e.g. the ParseError above, and
    // drops the receiver.)
    calls.shutdown().await;
    let _ = stop_writer.send(());
    let _ = writer.await;
    result
}

async fn write_loop(mut write_half: OwnedWriteHalf, mut rx: mpsc::Receiver<Box<RawValue>>, mut stop: oneshot::Receiver<()>) {
    loop {
        tokio::select! {
            biased;
            msg = rx.recv() => match msg {
                Some(msg) => {
                    if write_message(&mut write_half, msg.get().as_bytes()).await.is_err() {
                        break;
                    }
                }
                None => break,
            },
            _ = &mut stop => {
                while let Ok(msg) = rx.try_recv() {
                    if write_message(&mut write_half, msg.get().as_bytes()).await.is_err() {
                        break;
                    }
                }
                break;
            }
        }
    }
    // Dropping `rx` here makes every MethodSink / SubscriptionSink of this connection closed.
}

struct Connection {
    conn_id: ConnectionId,
    methods: Methods,
    sink: MethodSink,
    subscriptions: BoundedSubscriptions,
    id_provider: Arc<dyn IdProvider>,
    extensions: Extensions,
    max_response_size: usize,
}

impl Connection {
    async fn handle(&self, body: Vec<u8>) {
        let first = body.iter().find(|b| !b.is_ascii_whitespace()).copied();
        if first == Some(b'[') {
            let err = ErrorObject::borrowed(ErrorCode::InvalidRequest.code(), "batch requests are not supported", None);
            let _ = self.sink.send_error(Id::Null, err).await;
            return;
        }

        if let Ok(req) = serde_json::from_slice::<Request>(&body) {
            let rp = self.call(req).await;
            // Subscription responses (accept/reject) were already written into the sink by
            // PendingSubscriptionSink; writing them again would duplicate them.
            if rp.is_method_call() {
                let is_success = rp.is_success();
                let (json, on_close, _ext) = rp.into_parts();
                let sent = self.sink.send(json).await.is_ok();
                if let Some(n) = on_close {
                    n.notify(sent && is_success);
                }
            }
        } else if let Ok(notif) = serde_json::from_slice::<Notification<Option<Box<RawValue>>>>(&body) {
            self.notification(notif).await;
        } else if is_response(&body) {
            // A response to a server->client request; this prototype sends none. Ignore.
        } else {
            let (id, code) = jsonrpsee::helpers::prepare_error(&body);
            let _ = self.sink.send_error(id, code.into()).await;
        }
    }

    /// Same dispatch as jsonrpsee-server's `RpcService::call`, with our connection's id,
    /// sink, extensions and subscription limit.
    async fn call(&self, req: Request<'_>) -> MethodResponse {
        let Request { id, method, params, .. } = req;
        let params = Params::new(params.as_ref().map(|p| p.get()));
        let ext = self.extensions.clone();
        let max = self.max_response_size;
        match self.methods.method(&method) {
            None => MethodResponse::error(id, ErrorObject::from(ErrorCode::MethodNotFound)),
            Some(MethodCallback::Sync(cb)) => (cb)(id, params, max, ext),
            Some(MethodCallback::Async(cb)) => (cb)(id.into_owned(), params.into_owned(), self.conn_id, max, ext).await,
            Some(MethodCallback::Subscription(cb)) => match self.subscriptions.acquire() {
                Some(permit) => {
                    let state = SubscriptionState { conn_id: self.conn_id, id_provider: &*self.id_provider, subscription_permit: permit };
                    (cb)(id, params, self.sink.clone(), state, ext).await
                }
                None => MethodResponse::error(id, reject_too_many_subscriptions(self.subscriptions.max())),
            },
            // Subscriptions are keyed by (ConnectionId, SubscriptionId): another connection
            // cannot cancel ours.
            Some(MethodCallback::Unsubscription(cb)) => (cb)(id, params, self.conn_id, max, ext),
        }
    }

    /// Client notifications (no id): run plain methods for their side effects, never reply.
    async fn notification(&self, n: Notification<'_, Option<Box<RawValue>>>) {
        let params = Params::new(n.params.as_ref().map(|p| p.get()));
        let ext = self.extensions.clone();
        match self.methods.method(&n.method) {
            Some(MethodCallback::Sync(cb)) => {
                let _ = (cb)(Id::Null, params, self.max_response_size, ext);
            }
            Some(MethodCallback::Async(cb)) => {
                let _ = (cb)(Id::Null, params.into_owned(), self.conn_id, self.max_response_size, ext).await;
            }
            _ => {}
        }
    }
}

fn is_response(body: &[u8]) -> bool {
    #[derive(serde::Deserialize)]
    struct Probe<'a> {
        #[serde(borrow)]
        method: Option<&'a RawValue>,
        #[serde(borrow)]
        result: Option<&'a RawValue>,
        #[serde(borrow)]
        error: Option<&'a RawValue>,
    }
    matches!(serde_json::from_slice::<Probe>(body), Ok(p) if p.method.is_none() && (p.result.is_some() || p.error.is_some()))
}
