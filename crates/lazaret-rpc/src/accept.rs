//! Accepting on the coordinator's Unix sockets without ever stopping or
//! spinning (attack review finding 11): a failed `accept` (EMFILE when the
//! descriptors run out, ECONNABORTED, ENOBUFS, ...) is retried after a pause
//! that doubles from 10 ms up to 1 s and resets on success, and is logged on
//! the first failure of a run and then at each power of two.

use std::time::Duration;

use tokio::net::{UnixListener, UnixStream};

const FIRST_PAUSE: Duration = Duration::from_millis(10);
const LONGEST_PAUSE: Duration = Duration::from_secs(1);

/// Consecutive accept failures and the pause the next one earns.
#[derive(Debug, Default)]
pub struct Backoff {
    failures: u32,
}

impl Backoff {
    /// Records a failure; returns the pause before the next attempt and
    /// whether this failure should be logged.
    pub fn failed(&mut self) -> (Duration, bool) {
        self.failures = self.failures.saturating_add(1);
        let shift = self.failures.saturating_sub(1).min(16);
        let pause = FIRST_PAUSE.saturating_mul(1u32 << shift).min(LONGEST_PAUSE);
        (pause, self.failures.is_power_of_two())
    }

    pub fn succeeded(&mut self) {
        self.failures = 0;
    }
}

/// The next connection on `listener`; never returns an error.
pub async fn next(listener: &UnixListener, backoff: &mut Backoff, socket: &str) -> UnixStream {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                backoff.succeeded();
                return stream;
            }
            Err(error) => {
                let (pause, log) = backoff.failed();
                if log {
                    tracing::warn!(socket, %error, failures = backoff.failures, "accept failed; retrying after {pause:?}");
                }
                tokio::time::sleep(pause).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[test]
    fn pauses_double_up_to_a_second_and_reset_on_success() {
        let mut backoff = Backoff::default();
        let pauses: Vec<(u128, bool)> = (0..10).map(|_| backoff.failed()).map(|(pause, log)| (pause.as_millis(), log)).collect();
        assert_eq!(
            pauses,
            [
                (10, true),
                (20, true),
                (40, false),
                (80, true),
                (160, false),
                (320, false),
                (640, false),
                (1000, true),
                (1000, false),
                (1000, false)
            ]
        );
        // A run of failures costs a few attempts a second, not a spin.
        let mut backoff = Backoff::default();
        let mut elapsed = Duration::ZERO;
        let mut attempts = 0;
        while elapsed < Duration::from_secs(1) {
            elapsed += backoff.failed().0;
            attempts += 1;
        }
        assert!(attempts <= 7, "{attempts} attempts in the first second");
        backoff.succeeded();
        assert_eq!(backoff.failed(), (FIRST_PAUSE, true));
    }

    #[tokio::test]
    async fn connections_are_accepted() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("s.sock");
        let listener = UnixListener::bind(&path).expect("bind");
        let mut backoff = Backoff::default();
        let client = tokio::spawn(async move {
            let mut stream = UnixStream::connect(path).await.expect("connect");
            stream.write_all(b"ping").await.expect("write");
            stream
        });
        let mut server_side = next(&listener, &mut backoff, "test").await;
        let _client = client.await.expect("client");
        // The accepted stream is the client's: what it wrote arrives.
        let mut bytes = [0u8; 4];
        server_side.read_exact(&mut bytes).await.expect("read");
        assert_eq!(&bytes, b"ping");
    }
}
