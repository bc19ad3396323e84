import pytest

from wordstats import counts, top, words


@pytest.mark.parametrize("n", range(100))
def test_words_round_trip(n):
    text = " ".join(f"word{i % 7}" for i in range(n))
    assert len(words(text.replace("word", "w"))) == n


@pytest.mark.parametrize("text,expected", [("It's a test", ["it's", "a", "test"]), ("''", []), ("A-b", ["a", "b"])])
def test_words_edges(text, expected):
    assert words(text) == expected


@pytest.mark.parametrize("n", range(1, 60))
def test_counts_sum(n):
    text = " ".join("ab"[i % 2] * (i % 3 + 1) for i in range(n))
    assert sum(counts(text).values()) == n


@pytest.mark.parametrize("n", range(1, 40))
def test_top_order(n):
    name = [f"x{a}{b}" for a in "abcdefghij" for b in "abcdefghij"]
    text = " ".join(name[i] for i in range(n) for _ in range(i + 1))
    best = top(text, 3)
    assert [c for _, c in best] == sorted((c for _, c in best), reverse=True)
    assert best[0] == (name[n - 1], n)
