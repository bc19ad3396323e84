//! LSP-style message framing for the control socket: `Content-Length: N\r\n` (other headers such as `Content-Type` are
//! accepted and ignored), an empty line, then exactly N bytes of UTF-8 JSON.
use std::io;

use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Longest header line accepted (bytes, including the line ending).
const MAX_HEADER_LINE: u64 = 1024;
/// Most header lines accepted before the empty line.
const MAX_HEADERS: usize = 16;

fn invalid(msg: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.into())
}

/// Read one framed message body.
///
/// Returns `Ok(None)` on a clean end of stream *between* messages (the peer disconnected),
/// `Err(UnexpectedEof)` if the stream ends inside a message, and `Err(InvalidData)` for a
/// malformed header or a body over `max_body`.
///
/// Not cancel-safe: do not race it in `tokio::select!` against other branches, or a
/// partially read frame is lost. Give the reader its own loop/task.
pub async fn read_message<R>(reader: &mut R, max_body: usize) -> io::Result<Option<Vec<u8>>>
where
    R: AsyncBufRead + Unpin,
{
    let mut content_length: Option<usize> = None;
    let mut line = String::new();
    let mut headers = 0usize;
    loop {
        line.clear();
        let n = (&mut *reader).take(MAX_HEADER_LINE).read_line(&mut line).await?;
        if n == 0 {
            return if headers == 0 { Ok(None) } else { Err(io::Error::new(io::ErrorKind::UnexpectedEof, "eof inside header")) };
        }
        if !line.ends_with('\n') {
            if n as u64 >= MAX_HEADER_LINE {
                return Err(invalid("header line too long"));
            }
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "eof inside header"));
        }
        let text = line.trim_end_matches(['\r', '\n']);
        if text.is_empty() {
            if headers == 0 {
                // Tolerate stray blank lines between messages.
                continue;
            }
            break;
        }
        headers += 1;
        if headers > MAX_HEADERS {
            return Err(invalid("too many header lines"));
        }
        let (name, value) = text.split_once(':').ok_or_else(|| invalid(format!("bad header line {text:?}")))?;
        if name.trim().eq_ignore_ascii_case("content-length") {
            let len = value.trim().parse::<usize>().map_err(|_| invalid(format!("bad Content-Length {value:?}")))?;
            content_length = Some(len);
        }
    }
    let len = content_length.ok_or_else(|| invalid("missing Content-Length"))?;
    if len > max_body {
        return Err(invalid(format!("message of {len} bytes exceeds limit {max_body}")));
    }
    let mut body = vec![0u8; len];
    reader.read_exact(&mut body).await?;
    Ok(Some(body))
}

/// Write one framed message (header and body in a single `write_all`).
pub async fn write_message<W>(writer: &mut W, body: &[u8]) -> io::Result<()>
where
    W: AsyncWrite + Unpin,
{
    let header = format!("Content-Length: {}\r\n\r\n", body.len());
    let mut frame = Vec::with_capacity(header.len() + body.len());
    frame.extend_from_slice(header.as_bytes());
    frame.extend_from_slice(body);
    writer.write_all(&frame).await?;
    writer.flush().await
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::BufReader;

    #[tokio::test]
    async fn roundtrip_and_headers() {
        let mut buf = Vec::new();
        write_message(&mut buf, br#"{"a":1}"#).await.expect("frame");
        buf.extend_from_slice(b"Content-Type: application/vscode-jsonrpc; charset=utf-8\r\ncontent-length: 2\r\n\r\n{}");
        let mut r = BufReader::new(&buf[..]);
        assert_eq!(read_message(&mut r, 100).await.expect("frame").expect("frame"), br#"{"a":1}"#);
        assert_eq!(read_message(&mut r, 100).await.expect("frame").expect("frame"), b"{}");
        assert!(read_message(&mut r, 100).await.expect("frame").is_none());
    }

    #[tokio::test]
    async fn rejects_bad_frames() {
        let mut r = BufReader::new(&b"Content-Length: 10\r\n\r\n{}"[..]);
        assert_eq!(read_message(&mut r, 100).await.unwrap_err().kind(), io::ErrorKind::UnexpectedEof);
        let mut r = BufReader::new(&b"Content-Length: 1000\r\n\r\n"[..]);
        assert_eq!(read_message(&mut r, 100).await.unwrap_err().kind(), io::ErrorKind::InvalidData);
        let mut r = BufReader::new(&b"X: y\r\n\r\n{}"[..]);
        assert_eq!(read_message(&mut r, 100).await.unwrap_err().kind(), io::ErrorKind::InvalidData);
    }
}
