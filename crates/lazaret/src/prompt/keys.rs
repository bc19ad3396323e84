//! Decoding the raw bytes of a terminal in raw mode into the few keys the
//! prompt understands.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Key {
    Char(char),
    Enter,
    Backspace,
    Escape,
    Left,
    Right,
    Home,
    End,
    Delete,
}

/// Decodes `bytes` (one read from the terminal). Unknown sequences are dropped.
pub fn decode(bytes: &[u8]) -> Vec<Key> {
    let mut keys = Vec::new();
    let text = String::from_utf8_lossy(bytes);
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\r' | '\n' => keys.push(Key::Enter),
            '\u{7f}' | '\u{8}' => keys.push(Key::Backspace),
            '\u{1b}' => match (chars.peek().copied(), chars.clone().nth(1)) {
                (Some('['), Some(code)) => {
                    chars.next();
                    chars.next();
                    match code {
                        'D' => keys.push(Key::Left),
                        'C' => keys.push(Key::Right),
                        'H' => keys.push(Key::Home),
                        'F' => keys.push(Key::End),
                        '3' => {
                            if chars.peek() == Some(&'~') {
                                chars.next();
                            }
                            keys.push(Key::Delete);
                        }
                        _ => {}
                    }
                }
                _ => keys.push(Key::Escape),
            },
            '\u{1}' => keys.push(Key::Home),
            '\u{5}' => keys.push(Key::End),
            c if !c.is_control() => keys.push(Key::Char(c)),
            _ => {}
        }
    }
    keys
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_printables_and_sequences() {
        assert_eq!(decode(b"a\r"), vec![Key::Char('a'), Key::Enter]);
        assert_eq!(decode(b"\x1b[D\x1b[C\x7f"), vec![Key::Left, Key::Right, Key::Backspace]);
        assert_eq!(decode(b"\x1b"), vec![Key::Escape]);
        assert_eq!(decode(b"\x1b[3~x"), vec![Key::Delete, Key::Char('x')]);
        assert_eq!(decode("é".as_bytes()), vec![Key::Char('é')]);
    }
}
