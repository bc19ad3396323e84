//! Events for watchers on the control socket (the coordinator): one JSON object per
//! line. A sandbox can send refused queries as fast as it likes, so events are
//! rate limited (a token bucket); what the limit drops is counted and reported in
//! the next event as `suppressed`. A slow watcher loses events rather than slowing
//! DNS down. Events the sandbox cannot cause at will (`entriesExpired`: bounded by
//! the number of timed entries) bypass the limit ([`Events::emit_always`]).

use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::Mutex;
use std::time::Instant;

use lazaret_protocol::sidecar::SidecarEvent;

/// Events per second a watcher may get on average.
const EVENTS_PER_SECOND: f64 = 20.0;
/// Burst allowance.
const EVENT_BURST: f64 = 50.0;
/// Lines queued per watcher before new ones are dropped.
const WATCHER_QUEUE: usize = 256;

struct Bucket {
    tokens: f64,
    refilled: Instant,
    suppressed: u64,
}

pub struct Events {
    watchers: Mutex<Vec<SyncSender<String>>>,
    bucket: Mutex<Bucket>,
}

impl Default for Events {
    fn default() -> Events {
        Events::new()
    }
}

impl Events {
    pub fn new() -> Events {
        Events {
            watchers: Mutex::new(Vec::new()),
            bucket: Mutex::new(Bucket { tokens: EVENT_BURST, refilled: Instant::now(), suppressed: 0 }),
        }
    }

    /// A new watcher: the lines it will get.
    pub fn watch(&self) -> Receiver<String> {
        let (sender, receiver) = sync_channel(WATCHER_QUEUE);
        lock(&self.watchers).push(sender);
        receiver
    }

    /// Sends `event` to every watcher, if the rate allows.
    pub fn emit(&self, mut event: SidecarEvent) {
        {
            let mut bucket = lock(&self.bucket);
            let now = Instant::now();
            let refill = now.duration_since(bucket.refilled).as_secs_f64() * EVENTS_PER_SECOND;
            bucket.tokens = (bucket.tokens + refill).min(EVENT_BURST);
            bucket.refilled = now;
            if bucket.tokens < 1.0 {
                bucket.suppressed += 1;
                return;
            }
            bucket.tokens -= 1.0;
            if bucket.suppressed > 0 {
                event.set_suppressed(bucket.suppressed);
                bucket.suppressed = 0;
            }
        }
        self.send(&event);
    }

    /// Sends `event` to every watcher whatever the rate: for events the
    /// sandbox cannot cause at will (`entriesExpired`).
    pub fn emit_always(&self, event: SidecarEvent) {
        self.send(&event);
    }

    fn send(&self, event: &SidecarEvent) {
        let Ok(line) = serde_json::to_string(event) else { return };
        lock(&self.watchers).retain(|watcher| !matches!(watcher.try_send(line.clone()), Err(TrySendError::Disconnected(_))));
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use lazaret_protocol::sidecar::DnsRefusal;

    fn refused(name: &str) -> SidecarEvent {
        SidecarEvent::DnsRefused {
            name: name.to_owned(),
            record_type: "A".to_owned(),
            reason: DnsRefusal::NotAllowlisted,
            message: String::new(),
            suppressed: None,
        }
    }

    #[test]
    fn floods_are_limited_and_counted() {
        let events = Events::new();
        let receiver = events.watch();
        for n in 0..200 {
            events.emit(refused(&format!("n{n}.test")));
        }
        let delivered: Vec<String> = receiver.try_iter().collect();
        assert!(delivered.len() >= EVENT_BURST as usize && delivered.len() < 60, "{}", delivered.len());
        std::thread::sleep(std::time::Duration::from_millis(120));
        events.emit(refused("last.test"));
        let next: SidecarEvent = serde_json::from_str(&receiver.try_recv().unwrap()).unwrap();
        let SidecarEvent::DnsRefused { suppressed: Some(suppressed), .. } = next else { panic!("{next:?}") };
        assert!(suppressed > 100, "{suppressed}");
    }

    #[test]
    fn expiries_pass_a_spent_limit() {
        let events = Events::new();
        let receiver = events.watch();
        for n in 0..200 {
            events.emit(refused(&format!("n{n}.test")));
        }
        let flooded = receiver.try_iter().count();
        assert!(flooded < 60, "{flooded}");
        let expired = SidecarEvent::EntriesExpired { allow: vec!["grant.test".into()], deny: vec!["10.0.0.0/8".into()] };
        for _ in 0..20 {
            events.emit_always(expired.clone());
        }
        let delivered: Vec<SidecarEvent> = receiver.try_iter().map(|line| serde_json::from_str(&line).unwrap()).collect();
        assert_eq!(delivered, vec![expired; 20], "every expiry went through");
        assert!(lock(&events.bucket).suppressed > 100, "the count of dropped events waits for the next limited one");
    }

    #[test]
    fn gone_watchers_are_dropped() {
        let events = Events::new();
        drop(events.watch());
        events.emit(refused("x.test"));
        assert!(lock(&events.watchers).is_empty());
    }
}
