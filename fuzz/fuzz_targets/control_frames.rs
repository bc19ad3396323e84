//! Fuzzes the control socket's server side with arbitrary bytes from a
//! client: LSP framing, then jsonrpsee dispatch (requests, notifications,
//! batches, responses, subscriptions) as `lazaret_rpc::server` does it for
//! the coordinator, here over a socketpair with a small module of methods.
//! Invariants checked: nothing panics; the connection ends once the client
//! has sent everything and closed (nothing hangs); everything the server
//! writes is well-framed JSON.
#![no_main]

use std::sync::OnceLock;
use std::time::Duration;

use jsonrpsee::{ConnectionId, Methods, RpcModule, SubscriptionMessage};
use lazaret_rpc::framing::read_message;
use lazaret_rpc::server::{serve_connection, Config};
use libfuzzer_sys::fuzz_target;
use tokio::io::{AsyncWriteExt, BufReader};
use tokio::net::UnixStream;

fn methods() -> Methods {
    let mut module = RpcModule::new(());
    module.register_method("domain/status", |_, _, _| serde_json::json!({"apiVersion": 1})).expect("register");
    module
        .register_method("session/list", |params, _, _| {
            let limit: Option<usize> = params.one().ok();
            serde_json::json!(limit)
        })
        .expect("register");
    module
        .register_subscription("events/subscribe", "events/event", "events/unsubscribe", |_, pending, _, _| async move {
            let sink = pending.accept().await?;
            let message = SubscriptionMessage::from(serde_json::value::to_raw_value(&serde_json::json!({"seq": 1, "kind": "x"}))?);
            let _ = sink.send(message).await;
            Ok(())
        })
        .expect("register");
    module.into()
}

fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime"))
}

fuzz_target!(|data: &[u8]| {
    runtime().block_on(async {
        let (server, mut client) = UnixStream::pair().expect("socketpair");
        let config = Config { max_request_size: 64 * 1024, max_response_size: 64 * 1024, max_subscriptions: 4, outbound_buffer: 16 };
        let serving = tokio::spawn(async move {
            let _ = serve_connection(server, ConnectionId(1), methods(), &config).await;
        });
        let (read_half, mut write_half) = client.split();
        let write = async {
            let _ = write_half.write_all(data).await;
            let _ = write_half.shutdown().await;
        };
        let read = async {
            let mut reader = BufReader::new(read_half);
            // Whatever the server writes must be framed JSON, until it hangs up.
            while let Ok(Some(body)) = read_message(&mut reader, 1 << 20).await {
                serde_json::from_slice::<serde_json::Value>(&body).expect("the server wrote JSON");
            }
        };
        let ended = tokio::time::timeout(Duration::from_secs(10), async {
            tokio::join!(write, read);
            serving.await
        })
        .await;
        assert!(ended.is_ok(), "the connection did not end after the client closed");
    });
});
