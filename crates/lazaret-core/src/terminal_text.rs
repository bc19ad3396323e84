//! Agent-controlled text on the user's terminal. File names, patches,
//! justifications and audit reasons come from the sandbox; printed raw, an
//! escape sequence in them can erase or rewrite what the user reads (the
//! attack review erased `lazaret diff`'s warning block with a file name made
//! of `ESC[1A ESC[2K`). Everything the CLI prints from the agent goes
//! through [`name`] (one-line values, quoted as git's `core.quotePath` does)
//! or [`block`] (multi-line text such as a patch, lines kept).

use std::borrow::Cow;
use std::fmt::Write as _;

/// Characters that must not reach a terminal as they are: every control
/// character (C0, DEL, C1; so ESC, BEL, CR, backspace), the Unicode
/// formatting characters that reorder or hide text (bidi controls,
/// invisible characters) and whitespace other than the space: the same set
/// the policy engine escapes when it shows a command to the human.
pub fn is_unsafe(character: char) -> bool {
    crate::policy::is_display_unsafe(character)
}

fn escape(character: char, out: &mut String) {
    match character {
        '\n' => out.push_str("\\n"),
        '\t' => out.push_str("\\t"),
        '\r' => out.push_str("\\r"),
        '\u{1b}' => out.push_str("\\e"),
        '\\' => out.push_str("\\\\"),
        '"' => out.push_str("\\\""),
        c if (c as u32) < 0x100 => {
            let _ = write!(out, "\\x{:02x}", c as u32);
        }
        c => {
            let _ = write!(out, "\\u{{{:04x}}}", c as u32);
        }
    }
}

/// A one-line value (a path, a name, a reason): as it is when it holds
/// nothing unsafe, a double quote or a backslash; otherwise in double quotes
/// with C-style escapes (`"a\e[2Kb"`), so it can neither act on the terminal
/// nor pass for another value.
pub fn name(text: &str) -> Cow<'_, str> {
    if !text.chars().any(|c| is_unsafe(c) || c == '"' || c == '\\') {
        return Cow::Borrowed(text);
    }
    Cow::Owned(quoted(text))
}

/// `text` always in double quotes, with the escapes of [`name`] (one word
/// of an argv shown as a list).
pub fn quoted(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 8);
    out.push('"');
    for character in text.chars() {
        if is_unsafe(character) || character == '"' || character == '\\' {
            escape(character, &mut out);
        } else {
            out.push(character);
        }
    }
    out.push('"');
    out
}

/// Multi-line text (a patch): newlines and tabs stay; every other unsafe
/// character is shown escaped (`\e`, `\x07`, `\u{202e}`).
pub fn block(text: &str) -> Cow<'_, str> {
    if !text.chars().any(|c| is_unsafe(c) && c != '\n' && c != '\t') {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for character in text.chars() {
        if is_unsafe(character) && character != '\n' && character != '\t' {
            escape(character, &mut out);
        } else {
            out.push(character);
        }
    }
    Cow::Owned(out)
}

/// The start of `text` (already made safe), at most `max_chars`
/// characters, and a note of how much was cut: a long command or
/// justification cannot push what matters out of sight, and the reader is
/// told there is more.
pub fn cut(text: &str, max_chars: usize) -> Cow<'_, str> {
    match text.char_indices().nth(max_chars) {
        None => Cow::Borrowed(text),
        Some((end, _)) => {
            let more = text[end..].chars().count();
            Cow::Owned(format!("{}… (cut: {more} more characters)", &text[..end]))
        }
    }
}

/// `text` (already made safe) at most about `max_chars` characters, cut in
/// the middle: its start and, longer, its end, with a note of how much was
/// left out between them. For names, whose end (the registrable part)
/// decides who controls them (D19): `api.anthropic.com.aaaa…` must never
/// hide `….x.typeahead.test`.
pub fn cut_middle(text: &str, max_chars: usize) -> Cow<'_, str> {
    let count = text.chars().count();
    if count <= max_chars {
        return Cow::Borrowed(text);
    }
    let head = max_chars / 3;
    let tail = max_chars - head;
    let start: String = text.chars().take(head).collect();
    let end: String = text.chars().skip(count - tail).collect();
    Cow::Owned(format!("{start}…({} characters cut)…{end}", count - head - tail))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cut_middle_keeps_the_end_of_a_long_name() {
        assert!(matches!(cut_middle("grant.test", 10), Cow::Borrowed("grant.test")));
        let name = format!("api.anthropic.com.{}.x.typeahead.test", "a".repeat(218));
        let shown = cut_middle(&name, 60);
        assert!(shown.starts_with("api.anthropic.com."), "{shown}");
        assert!(shown.ends_with("aaaa.x.typeahead.test"), "{shown}");
        assert!(shown.contains(&format!("({} characters cut)", name.len() - 60)), "{shown}");
        assert_eq!(cut_middle("ünïcödé", 3), "ü…(4 characters cut)…dé");
    }

    #[test]
    fn cut_keeps_the_start_and_says_how_much_is_left() {
        assert!(matches!(cut("short", 5), Cow::Borrowed("short")));
        assert_eq!(cut("ünïcode", 3), "ünï… (cut: 4 more characters)");
        assert_eq!(cut(&"a".repeat(65536), 10), format!("{}… (cut: 65526 more characters)", "a".repeat(10)));
    }

    #[test]
    fn plain_text_is_unchanged() {
        assert!(matches!(name("src/lib.rs"), Cow::Borrowed("src/lib.rs")));
        assert!(matches!(block("+a\n-b\tc\n"), Cow::Borrowed(_)));
        assert_eq!(name("ünïcode ok"), "ünïcode ok");
    }

    #[test]
    fn escapes_are_neutralized() {
        assert_eq!(name("x\u{1b}[1A\u{1b}[2Ky"), "\"x\\e[1A\\e[2Ky\"");
        assert_eq!(name("a\"b"), "\"a\\\"b\"");
        assert_eq!(name("a\\b"), "\"a\\\\b\"");
        assert_eq!(name("evil\u{202e}txt.exe"), "\"evil\\u{202e}txt.exe\"");
        assert_eq!(name("cr\rlf\n"), "\"cr\\rlf\\n\"");
        assert_eq!(block("+\u{1b}]0;pwned\u{7}\n+ok\r\n"), "+\\e]0;pwned\\x07\n+ok\\r\n");
    }

    #[test]
    fn no_output_holds_an_unsafe_character() {
        let samples = ["\u{1b}[31m", "\u{7}\u{8}\u{7f}", "\u{9b}2J", "\u{2066}x\u{2069}", "\u{200b}", "\u{feff}"];
        for sample in samples {
            assert!(!name(sample).chars().any(is_unsafe), "{sample:?}");
            assert!(!block(sample).chars().any(|c| is_unsafe(c) && c != '\n' && c != '\t'), "{sample:?}");
        }
    }
}
