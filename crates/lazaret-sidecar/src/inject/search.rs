//! The search for an endpoint's credential in what the origin sends back
//! (docs/decisions.md D19): [`Needles`], the forms of the key no answer may
//! carry (the header's whole value, and the secret after an auth-scheme
//! word), found in a head in any letter case; [`BodyScan`], a body passing
//! through, which holds back only the bytes that could begin a form and
//! stops before the first one. Neither has `Debug`: they hold the key.

use super::http::is_token_byte;

/// The forms of an endpoint's credential that no answer may carry: the
/// header's whole value and, when it starts with an auth-scheme word
/// (`Bearer `, `Basic `), the secret after it. (No `Debug`: it holds the key.)
pub(super) struct Needles {
    forms: Vec<Vec<u8>>,
    /// The same in ASCII lower case, for heads.
    lower: Vec<Vec<u8>>,
}

impl Needles {
    pub(super) fn new(value: &str) -> Needles {
        let mut forms = vec![value.as_bytes().to_vec()];
        if let Some((scheme, secret)) = value.split_once(' ') {
            let secret = secret.trim_start_matches(' ');
            if !scheme.is_empty() && scheme.bytes().all(is_token_byte) && !secret.is_empty() {
                forms.push(secret.as_bytes().to_vec());
            }
        }
        forms.retain(|form| !form.is_empty());
        let lower = forms.iter().map(|form| form.to_ascii_lowercase()).collect();
        Needles { forms, lower }
    }

    /// Where the first form found in `haystack` begins.
    fn find(&self, haystack: &[u8]) -> Option<usize> {
        self.forms.iter().filter_map(|form| position(haystack, form)).min()
    }

    /// Whether `text` (a head, trailers, a message) carries a form, in any
    /// letter case (header names are sent in lower case).
    pub(super) fn in_head(&self, text: &[u8]) -> bool {
        let text = text.to_ascii_lowercase();
        self.lower.iter().any(|form| position(&text, form).is_some())
    }

    /// How many bytes at the end of `data` could be the beginning of a
    /// form (the longest such suffix, shorter than the form).
    fn partial(&self, data: &[u8]) -> usize {
        let mut longest = 0;
        for form in &self.forms {
            let reach = data.len().min(form.len() - 1);
            let from = data.len() - reach;
            // The earliest start that fits is the longest suffix.
            if let Some(start) = (from..data.len()).find(|start| form.starts_with(&data[*start..])) {
                longest = longest.max(data.len() - start);
            }
        }
        longest
    }
}

/// Where `needle` first occurs in `haystack`.
fn position(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    let first = *needle.first()?;
    if haystack.len() < needle.len() {
        return None;
    }
    (0..=haystack.len() - needle.len()).find(|at| haystack[*at] == first && haystack[*at..].starts_with(needle))
}

/// A body passing through: what may be sent of each read.
pub(super) struct BodyScan<'a> {
    pub(super) needles: &'a Needles,
    /// Bytes read and not yet dropped: the first `released` were sent, the
    /// rest held back (they could begin the credential).
    window: Vec<u8>,
    released: usize,
}

/// What of a read may be sent.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Scanned<'s> {
    /// These bytes; the rest is held back until the next read shows
    /// whether it is the credential.
    Clean(&'s [u8]),
    /// The credential begins after these bytes: send them and end.
    Found(&'s [u8]),
}

impl<'a> BodyScan<'a> {
    pub(super) fn new(needles: &'a Needles) -> BodyScan<'a> {
        BodyScan { needles, window: Vec::new(), released: 0 }
    }

    pub(super) fn push(&mut self, data: &[u8]) -> Scanned<'_> {
        self.window.drain(..self.released);
        self.released = 0;
        self.window.extend_from_slice(data);
        if let Some(at) = self.needles.find(&self.window) {
            // Nor the start of another copy just before it.
            let clean = at - self.needles.partial(&self.window[..at]);
            self.window.truncate(clean);
            self.released = clean;
            return Scanned::Found(&self.window[..clean]);
        }
        self.released = self.window.len() - self.needles.partial(&self.window);
        Scanned::Clean(&self.window[..self.released])
    }

    /// The body ended: what was held back (no credential can complete now).
    pub(super) fn finish(&mut self) -> &[u8] {
        self.window.drain(..self.released);
        self.released = self.window.len();
        &self.window
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inject::tests::{head, KEY};

    /// Pushes `reads` through a scan for KEY: what was sent, and whether the
    /// key was found (nothing held back is sent then).
    fn scan(needles: &Needles, reads: &[&[u8]]) -> (Vec<u8>, bool) {
        let mut scan = BodyScan::new(needles);
        let mut sent = Vec::new();
        for read in reads {
            match scan.push(read) {
                Scanned::Clean(bytes) => sent.extend_from_slice(bytes),
                Scanned::Found(before) => {
                    sent.extend_from_slice(before);
                    return (sent, true);
                }
            }
        }
        sent.extend_from_slice(scan.finish());
        (sent, false)
    }

    #[test]
    fn the_key_is_found_across_reads_and_nothing_of_it_is_sent() {
        let needles = Needles::new(KEY);
        let body = format!(r#"{{"headers":{{"x-api-key":"{KEY}","accept":"*/*"}}}}"#);
        let before = &body[..body.find(KEY).unwrap()];
        // Split at every point, and one byte per read.
        for split in 0..=body.len() {
            let (sent, found) = scan(&needles, &[&body.as_bytes()[..split], &body.as_bytes()[split..]]);
            assert!(found, "split at {split}");
            assert_eq!(sent, before.as_bytes(), "split at {split}");
        }
        let bytes: Vec<&[u8]> = body.as_bytes().chunks(1).collect();
        assert_eq!(scan(&needles, &bytes), (before.as_bytes().to_vec(), true));
        // Only what could begin the key is held back: the bytes before it
        // went out with their read.
        let mut held = BodyScan::new(&needles);
        assert_eq!(held.push(b"data: 1\n\nx sk-real"), Scanned::Clean(b"data: 1\n\nx "));
        assert_eq!(held.push(b"-k"), Scanned::Clean(b""));
        assert_eq!(held.push(b"ey-123 and on"), Scanned::Found(b""));
        // The key at the very end of the body.
        assert_eq!(scan(&needles, &[b"tail: ", &KEY.as_bytes()[..5], &KEY.as_bytes()[5..]]), (b"tail: ".to_vec(), true));
        // A copy that begins just before another: neither is sent.
        assert_eq!(scan(&needles, &[format!("a sk-{KEY}").as_bytes()]), (b"a ".to_vec(), true));
    }

    #[test]
    fn a_near_miss_is_held_only_until_it_misses_and_then_sent_intact() {
        let needles = Needles::new(KEY);
        let mut held = BodyScan::new(&needles);
        assert_eq!(held.push(b"event: x\ndata: sk-real-key-1"), Scanned::Clean(b"event: x\ndata: "));
        assert_eq!(held.push(b"24\n\n"), Scanned::Clean(b"sk-real-key-124\n\n"));
        assert_eq!(held.finish(), b"");
        // A prefix of the key at the very end of the body goes out at its end.
        let body = b"all of it, then sk-real-key-12";
        for split in 0..=body.len() {
            assert_eq!(scan(&needles, &[&body[..split], &body[split..]]), (body.to_vec(), false), "split at {split}");
        }
        // Ordinary streams are not held at all.
        let mut stream = BodyScan::new(&needles);
        assert_eq!(stream.push(b"data: {\"text\":\"hi\"}\n\n"), Scanned::Clean(b"data: {\"text\":\"hi\"}\n\n"));
    }

    #[test]
    fn a_schemes_secret_is_searched_alone_too() {
        let bearer = Needles::new("Bearer sk-tok-456");
        assert_eq!(scan(&bearer, &[b"{\"token\":\"sk-tok", b"-456\"}"]), (b"{\"token\":\"".to_vec(), true));
        assert_eq!(scan(&bearer, &[b"auth: Bearer sk-tok-456"]), (b"auth: ".to_vec(), true));
        let basic = Needles::new("Basic dXNlcjpwYXNz");
        assert!(scan(&basic, &[b"dXNlcjpwYXNz"]).1);
        // Without a scheme word, the value alone.
        let plain = Needles::new("sk-plain");
        assert_eq!(plain.forms.len(), 1);
        assert!(!scan(&plain, &[b"Bearer and sk-plai and more"]).1);
    }

    #[test]
    fn a_head_that_carries_the_key_is_found_in_any_letter_case() {
        let needles = Needles::new("Bearer sk-Tok-456");
        assert!(needles.in_head(&head("HTTP/1.1 200 OK\r\nX-Echo: Bearer sk-Tok-456\r\n\r\n").text()));
        assert!(needles.in_head(&head("HTTP/1.1 200 OK\r\nsk-tok-456: 1\r\n\r\n").text()));
        assert!(needles.in_head(&head("HTTP/1.1 200 SK-TOK-456\r\n\r\n").text()));
        assert!(!needles.in_head(&head("HTTP/1.1 200 OK\r\nx-echo: sk-tok-45\r\ncontent-length: 6\r\n\r\n").text()));
    }
}
