//! Events for watchers on the control socket (the coordinator): one JSON object per
//! line. A sandbox can send refused queries as fast as it likes, so events are
//! rate limited (a token bucket); what the limit drops is counted and reported in
//! the next event as `suppressed`. A slow watcher loses events rather than slowing
//! DNS down. Events the sandbox cannot cause at will (`entriesExpired`: bounded by
//! the number of timed entries) bypass the limit ([`Events::emit_always`]).
//!
//! The dropped events that count toward a grant's hits (`dnsResolved`, and
//! `dnsRefused` for a deny) are also counted per name, up to
//! [`TALLY_NAMES`] names, and sent as one `dnsTally` by
//! [`Events::flush_tally`] (the expiry loop's tick): a flood is counted
//! exactly without an event per question.

use crate::lock;
use std::collections::HashMap;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::Mutex;
use std::time::Instant;

use lazaret_protocol::sidecar::{DnsRefusal, NameCount, SidecarEvent, TALLY_NAMES};

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
    /// Dropped `dnsResolved` events per name, until the next tally.
    answered: HashMap<String, u64>,
    /// Dropped `dnsRefused` events of reason `denied` per name.
    denied: HashMap<String, u64>,
}

impl Bucket {
    /// Counts a dropped event toward its name's tally, if it is one that counts.
    fn tally(&mut self, event: &SidecarEvent) {
        let (counts, name) = match event {
            SidecarEvent::DnsResolved { name, .. } => (&mut self.answered, name),
            SidecarEvent::DnsRefused { name, reason: DnsRefusal::Denied, .. } => (&mut self.denied, name),
            _ => return,
        };
        if let Some(count) = counts.get_mut(name) {
            *count += 1;
        } else if counts.len() < TALLY_NAMES {
            counts.insert(name.clone(), 1);
        }
    }
}

fn name_counts(counts: HashMap<String, u64>) -> Vec<NameCount> {
    let mut counts: Vec<NameCount> = counts.into_iter().map(|(name, count)| NameCount { name, count }).collect();
    counts.sort_by(|a, b| a.name.cmp(&b.name));
    counts
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
            bucket: Mutex::new(Bucket {
                tokens: EVENT_BURST,
                refilled: Instant::now(),
                suppressed: 0,
                answered: HashMap::new(),
                denied: HashMap::new(),
            }),
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
                bucket.tally(&event);
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

    /// Sends what the limit dropped since the last call, counted per name,
    /// as one `dnsTally` (nothing when nothing that counts was dropped).
    pub fn flush_tally(&self) {
        let (answered, denied) = {
            let mut bucket = lock(&self.bucket);
            (std::mem::take(&mut bucket.answered), std::mem::take(&mut bucket.denied))
        };
        if !answered.is_empty() || !denied.is_empty() {
            self.send(&SidecarEvent::DnsTally { answered: name_counts(answered), denied: name_counts(denied) });
        }
    }

    fn send(&self, event: &SidecarEvent) {
        let Ok(line) = serde_json::to_string(event) else { return };
        lock(&self.watchers).retain(|watcher| !matches!(watcher.try_send(line.clone()), Err(TrySendError::Disconnected(_))));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn a_flood_of_answers_and_denials_is_tallied_per_name_exactly() {
        let events = Events::new();
        let receiver = events.watch();
        let resolved = |name: &str| SidecarEvent::DnsResolved {
            name: name.to_owned(),
            record_type: "A".to_owned(),
            addresses: vec![],
            suppressed: None,
        };
        let denied = SidecarEvent::DnsRefused {
            name: "deny.test".to_owned(),
            record_type: "A".to_owned(),
            reason: DnsRefusal::Denied,
            message: String::new(),
            suppressed: None,
        };
        for _ in 0..150 {
            events.emit(resolved("grant.test"));
            events.emit(denied.clone());
            events.emit(refused("other.test"));
        }
        events.emit(resolved("once.test"));
        let delivered: Vec<SidecarEvent> = receiver.try_iter().map(|line| serde_json::from_str(&line).unwrap()).collect();
        let count = |name: &str, sent: &[SidecarEvent]| {
            sent.iter()
                .filter(|event| match event {
                    SidecarEvent::DnsResolved { name: n, .. } | SidecarEvent::DnsRefused { name: n, .. } => n == name,
                    _ => false,
                })
                .count() as u64
        };
        events.flush_tally();
        let tally: SidecarEvent = serde_json::from_str(&receiver.try_recv().unwrap()).unwrap();
        let SidecarEvent::DnsTally { answered, denied: refused } = tally else { panic!("{tally:?}") };
        let tallied = |counts: &[NameCount], name: &str| counts.iter().find(|c| c.name == name).map_or(0, |c| c.count);
        assert_eq!(count("grant.test", &delivered) + tallied(&answered, "grant.test"), 150, "{answered:?}");
        assert_eq!(count("once.test", &delivered) + tallied(&answered, "once.test"), 1, "{answered:?}");
        assert_eq!(count("deny.test", &delivered) + tallied(&refused, "deny.test"), 150, "{refused:?}");
        assert!(!refused.iter().any(|c| c.name == "other.test"), "a refusal for a name on no entry counts toward nothing");
        events.flush_tally();
        assert!(receiver.try_recv().is_err(), "nothing new dropped: no tally");
    }

    #[test]
    fn a_tally_names_at_most_its_cap() {
        let events = Events::new();
        let receiver = events.watch();
        for n in 0..(TALLY_NAMES + 500) {
            events.emit(SidecarEvent::DnsResolved {
                name: format!("n{n}.test"),
                record_type: "A".into(),
                addresses: vec![],
                suppressed: None,
            });
        }
        receiver.try_iter().for_each(drop);
        events.flush_tally();
        let tally: SidecarEvent = serde_json::from_str(&receiver.try_recv().unwrap()).unwrap();
        let SidecarEvent::DnsTally { answered, .. } = tally else { panic!("{tally:?}") };
        assert_eq!(answered.len(), TALLY_NAMES);
    }

    #[test]
    fn gone_watchers_are_dropped() {
        let events = Events::new();
        drop(events.watch());
        events.emit(refused("x.test"));
        assert!(lock(&events.watchers).is_empty());
    }
}
