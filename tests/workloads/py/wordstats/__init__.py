"""Word statistics over plain text: the code under test of the pytest workload."""

import collections
import re

WORD = re.compile(r"[A-Za-z']+")


def words(text):
    """The words of `text`, lower-cased, in order."""
    return [w.lower().strip("'") for w in WORD.findall(text) if w.strip("'")]


def counts(text):
    """How often each word occurs."""
    return collections.Counter(words(text))


def top(text, n):
    """The `n` most frequent words, ties broken alphabetically."""
    return sorted(counts(text).items(), key=lambda kv: (-kv[1], kv[0]))[:n]


def sentences(text):
    """The sentences of `text` (split at . ! ?), stripped, empty ones dropped."""
    return [s.strip() for s in re.split(r"[.!?]+", text) if s.strip()]


def wrap(text, width):
    """Greedy line wrapping at `width` columns; a longer word gets a line of its own."""
    if width < 1:
        raise ValueError(f"width must be at least 1, not {width}")
    lines, line = [], ""
    for word in text.split():
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    if line:
        lines.append(line)
    return lines
