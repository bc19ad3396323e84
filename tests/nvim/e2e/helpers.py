"""Helpers of the end-to-end tests: requests from inside the sandbox, the
hostile corpus (tests/hostile/strings.json), and what "inert" means (the
unsafe character set of DECISIONS D16, the same as lazaret.text's and the
CLI's), checked on what the real Neovim shows."""

import json
import time
from pathlib import Path

from lzenv import wait_until

REPO_ROOT = Path(__file__).resolve().parents[3]
CORPUS = REPO_ROOT / "tests/hostile/strings.json"


def shell_word(word):
    return "'" + word.replace("'", "'\\''") + "'"


def escalate(env, repo, argv, justification=None):
    """A new session whose command asks the host to run ARGV with
    lazaret-escalate. Its first stdout line is the sandbox's clock (ms) just
    before the request; returns (process, t0_ms). Any text (no NUL) works
    as argv words and justification: they are single-quoted for sh."""
    words = " ".join(shell_word(word) for word in argv)
    why = f"--justification {shell_word(justification)} " if justification is not None else ""
    process = env.spawn(repo, f"echo $(( $(date +%s%N) / 1000000 )); lazaret-escalate {why}-- {words}; echo status=$?")
    line = process.stdout.readline()
    assert line.strip().isdigit(), f"no timestamp from the sandbox: {line!r} {process.stderr.read() if process.poll() is not None else ''}"
    return process, int(line)


def armed(editor):
    """Whether the pending window takes an answer now (DECISIONS D20). A
    plugin without arming (an older copy, LAZARET_NVIM_PLUGIN) always takes
    one: the tests then fail at what they check, not here."""
    return editor.lua("local a = require('lazaret.approvals'); if a.armed then return a.armed() end; return true")


def wait_armed(editor, timeout=10.0):
    """Waits until the pending window takes an answer: 1 s without a key
    since the request under the cursor last changed (lazaret.arming)."""
    assert wait_until(timeout, lambda: armed(editor), 0.05), "the pending window did not arm"


def press(editor, keys):
    """Types KEYS into the pending window once it is armed."""
    wait_armed(editor)
    editor.nvim.input(keys)


def selection(editor):
    """The answer selected in the pending window (nil: none), as a table."""
    return editor.lua("local a = require('lazaret.approvals'); return a.state and a.state.selection or vim.NIL")


def select_answer(editor, key="a"):
    """KEY (an approving key) once the window is armed; waits until the
    window names the answer it selected."""
    press(editor, key)
    assert wait_until(5, lambda: selection(editor), 0.05), "the window selected an answer"


def confirm(editor, key="a"):
    """KEY, then <CR> once the window names the answer (a separate read)."""
    select_answer(editor, key)
    editor.nvim.input("<CR>")


def finish(process, timeout=30):
    out, err = process.communicate(timeout=timeout)
    return out, err


def now_ms():
    return int(time.time() * 1000)


# The unsafe set (DECISIONS D16): never shown raw on any surface.
_RANGES = [
    (0x00, 0x1F), (0x7F, 0x9F), (0x202A, 0x202E), (0x2066, 0x2069), (0x200E, 0x200F), (0x061C, 0x061C),
    (0x00AD, 0x00AD), (0x034F, 0x034F), (0x115F, 0x1160), (0x17B4, 0x17B5), (0x180B, 0x180F),
    (0x200B, 0x200D), (0x2060, 0x2064), (0x206A, 0x206F), (0x3164, 0x3164), (0xFE00, 0xFE0F),
    (0xFEFF, 0xFEFF), (0xFFA0, 0xFFA0), (0xFFF9, 0xFFFB), (0x1D173, 0x1D17A), (0xE0000, 0xE007F),
    (0xE0100, 0xE01EF), (0x0085, 0x0085), (0x00A0, 0x00A0), (0x1680, 0x1680), (0x2000, 0x200A),
    (0x2028, 0x2029), (0x202F, 0x202F), (0x205F, 0x205F), (0x3000, 0x3000),
]


def unsafe(character):
    code = ord(character)
    return any(low <= code <= high for low, high in _RANGES)


def raw_unsafe(text):
    """The unsafe characters found raw in TEXT (empty: it is inert)."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    return sorted({f"U+{ord(c):04X}" for c in text if unsafe(c)})


def assert_inert(what, texts):
    """Every string of TEXTS (a string or a list) holds no raw unsafe character."""
    if isinstance(texts, str):
        texts = [texts]
    for text in texts:
        found = raw_unsafe(text)
        assert not found, f"{what}: raw {found} in {text[:300]!r}"


def inert(text):
    """What lazaret.text.inert shows for TEXT (to look for it on a surface)."""
    out = []
    for c in text:
        code = ord(c)
        if c == "\n":
            out.append("\\n")
        elif c == "\t":
            out.append("\\t")
        elif c == "\r":
            out.append("\\r")
        elif c == "\x1b":
            out.append("\\e")
        elif c == "\\":
            out.append("\\\\")
        elif unsafe(c):
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{{{code:04x}}}")
        else:
            out.append(c)
    return "".join(out)


def corpus_entries():
    """The corpus entries as they are written (name, text, and fields such
    as `tail` and `network`)."""
    return json.loads(CORPUS.read_text())["entries"]


def corpus(marker):
    """The corpus entries expanded: [(name, text)], @MARKER@ replaced."""
    data = json.loads(CORPUS.read_text())
    return [(entry["name"], (entry["text"] * entry.get("repeat", 1)).replace(data["marker"], marker)) for entry in data["entries"]]


def file_name(text, limit=200):
    """An entry as one valid file name component: `/` replaced with `_`
    (NUL is absent), cut to at most LIMIT bytes on a UTF-8 boundary."""
    name = text.replace("/", "_").replace("\0", "_")
    encoded = name.encode()
    if len(encoded) > limit:
        encoded = encoded[:limit]
        while True:
            try:
                name = encoded.decode()
                break
            except UnicodeDecodeError:
                encoded = encoded[:-1]
    return name


def create_files_script(paths, content_of=lambda path: "hostile\n"):
    """A sh script creating every path (directories too) with its content;
    every path single-quoted, so any byte but NUL is fine."""
    lines = ["set -e", "cd /workspace"]
    for path in paths:
        parent = path.rsplit("/", 1)[0] if "/" in path else None
        if parent:
            lines.append(f"mkdir -p -- {shell_word(parent)}")
        lines.append(f"printf '%s' {shell_word(content_of(path))} > {shell_word(path)}")
    return "\n".join(lines) + "\n"
