import pytest

from wordstats import sentences, wrap


@pytest.mark.parametrize("n", range(1, 80))
def test_sentences(n):
    text = "".join(f"Sentence {i}{'.!?'[i % 3]} " for i in range(n))
    assert len(sentences(text)) == n


@pytest.mark.parametrize("width", range(1, 120))
def test_wrap_width(width):
    text = "lorem ipsum dolor sit amet consectetur adipiscing elit " * 5
    lines = wrap(text, width)
    assert " ".join(lines) == " ".join(text.split())
    assert all(len(line) <= width or " " not in line for line in lines)


def test_wrap_refuses_zero():
    with pytest.raises(ValueError, match="width must be at least 1, not 0"):
        wrap("a b", 0)
