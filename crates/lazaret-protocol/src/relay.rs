//! The escalation relay's wire format (the Kubernetes backend, issue 32).
//!
//! In a pod no host socket can be mounted, so `lazaret-escalate --relay`
//! serves [`crate::escalation::paths::SOCKET`] inside and carries every
//! connection to it over one long-lived exec stream to the coordinator,
//! which connects each to its Escalation Socket. The relay only moves
//! bytes: mTLS and the signed requests run end to end between
//! `lazaret-escalate` and the coordinator, and the relay (like the pod) is
//! untrusted.
//!
//! A frame is a kind byte, the stream's number (4 bytes, big-endian) and,
//! for [`RelayFrame::Data`] only, a length (4 bytes, big-endian, at most
//! [`MAX_DATA_BYTES`]) and that many bytes. Streams are numbered by the
//! relay, from 1, never reused.

/// The most bytes one [`RelayFrame::Data`] carries.
pub const MAX_DATA_BYTES: usize = 64 << 10;
/// The most streams open at once; the coordinator closes what is past it.
pub const MAX_STREAMS: usize = 64;

const OPEN: u8 = 1;
const DATA: u8 = 2;
const CLOSE: u8 = 3;
const HEADER: usize = 5;

/// One frame of the relay stream, in either direction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RelayFrame {
    /// Relay to coordinator: a client connected; connect it on.
    Open { stream: u32 },
    /// Bytes of a stream.
    Data { stream: u32, bytes: Vec<u8> },
    /// The stream is over, both ways.
    Close { stream: u32 },
}

/// A relay stream that is not a sequence of frames.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RelayError {
    UnknownKind(u8),
    TooLong(usize),
}

impl std::fmt::Display for RelayError {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RelayError::UnknownKind(kind) => write!(formatter, "relay frame of unknown kind {kind}"),
            RelayError::TooLong(length) => write!(formatter, "relay frame of {length} bytes, more than {MAX_DATA_BYTES}"),
        }
    }
}

impl std::error::Error for RelayError {}

impl RelayFrame {
    pub fn stream(&self) -> u32 {
        match self {
            RelayFrame::Open { stream } | RelayFrame::Data { stream, .. } | RelayFrame::Close { stream } => *stream,
        }
    }

    /// Appends the frame's bytes to `out`. Data longer than
    /// [`MAX_DATA_BYTES`] must be split by the caller.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let (kind, stream) = match self {
            RelayFrame::Open { stream } => (OPEN, stream),
            RelayFrame::Data { stream, .. } => (DATA, stream),
            RelayFrame::Close { stream } => (CLOSE, stream),
        };
        out.push(kind);
        out.extend_from_slice(&stream.to_be_bytes());
        if let RelayFrame::Data { bytes, .. } = self {
            out.extend_from_slice(&u32::try_from(bytes.len()).unwrap_or(u32::MAX).to_be_bytes());
            out.extend_from_slice(bytes);
        }
    }

    /// The first frame of `buffer` and how many bytes it took; `Ok(None)`
    /// while the frame is incomplete.
    pub fn decode(buffer: &[u8]) -> Result<Option<(RelayFrame, usize)>, RelayError> {
        let Some((&kind, rest)) = buffer.split_first() else { return Ok(None) };
        if !matches!(kind, OPEN | DATA | CLOSE) {
            return Err(RelayError::UnknownKind(kind));
        }
        let Some(stream) = rest.get(..4) else { return Ok(None) };
        let stream = u32::from_be_bytes([stream[0], stream[1], stream[2], stream[3]]);
        match kind {
            OPEN => Ok(Some((RelayFrame::Open { stream }, HEADER))),
            CLOSE => Ok(Some((RelayFrame::Close { stream }, HEADER))),
            _ => {
                let Some(length) = rest.get(4..8) else { return Ok(None) };
                let length = u32::from_be_bytes([length[0], length[1], length[2], length[3]]) as usize;
                if length > MAX_DATA_BYTES {
                    return Err(RelayError::TooLong(length));
                }
                let start = HEADER + 4;
                Ok(buffer.get(start..start + length).map(|bytes| (RelayFrame::Data { stream, bytes: bytes.to_vec() }, start + length)))
            }
        }
    }
}

/// Frames out of a byte stream that arrives in pieces: [`RelayReader::push`]
/// what was read, then take [`RelayReader::next_frame`] until `Ok(None)`. It
/// holds at most one incomplete frame (a refused length is an error before
/// its bytes arrive).
#[derive(Debug, Default)]
pub struct RelayReader {
    buffer: Vec<u8>,
    offset: usize,
}

impl RelayReader {
    pub fn push(&mut self, bytes: &[u8]) {
        self.buffer.drain(..self.offset);
        self.offset = 0;
        self.buffer.extend_from_slice(bytes);
    }

    /// The next complete frame, `Ok(None)` until more bytes are pushed.
    pub fn next_frame(&mut self) -> Result<Option<RelayFrame>, RelayError> {
        let Some((frame, used)) = RelayFrame::decode(&self.buffer[self.offset..])? else { return Ok(None) };
        self.offset += used;
        Ok(Some(frame))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_split_anywhere() {
        let frames = vec![
            RelayFrame::Open { stream: 1 },
            RelayFrame::Data { stream: 1, bytes: (0..=255).collect() },
            RelayFrame::Data { stream: 7, bytes: Vec::new() },
            RelayFrame::Close { stream: u32::MAX },
        ];
        let mut wire = Vec::new();
        for frame in &frames {
            frame.encode(&mut wire);
        }
        for split in 0..wire.len() {
            let mut reader = RelayReader::default();
            let mut decoded = Vec::new();
            for piece in [&wire[..split], &wire[split..]] {
                reader.push(piece);
                while let Some(frame) = reader.next_frame().expect("valid") {
                    decoded.push(frame);
                }
            }
            assert_eq!(decoded, frames, "split at {split}");
        }
    }

    #[test]
    fn unknown_kinds_and_oversized_data_are_refused_before_the_bytes_arrive() {
        assert_eq!(RelayFrame::decode(&[9, 0, 0, 0, 1]), Err(RelayError::UnknownKind(9)));
        let mut header = vec![DATA, 0, 0, 0, 1];
        header.extend_from_slice(&((MAX_DATA_BYTES + 1) as u32).to_be_bytes());
        assert_eq!(RelayFrame::decode(&header), Err(RelayError::TooLong(MAX_DATA_BYTES + 1)));
        header.truncate(5);
        header.extend_from_slice(&(MAX_DATA_BYTES as u32).to_be_bytes());
        assert_eq!(RelayFrame::decode(&header), Ok(None), "the longest allowed frame waits for its bytes");
    }
}
