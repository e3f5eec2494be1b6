"""The range grammar and cases: what parses, what is refused, and properties of both."""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lattnbench.spec import MAX_POINTS, Case, SpecError, parse_choices, parse_range


@pytest.mark.parametrize("text, want", [
    ("512..32768", [512, 1024, 2048, 4096, 8192, 16384, 32768]),
    ("512..4096:x2", [512, 1024, 2048, 4096]),
    ("100..1000:x3", [100, 300, 900]),
    ("1000..4000:+1000", [1000, 2000, 3000, 4000]),
    ("512,1000,4096", [512, 1000, 4096]),
    ("4096,512,512", [512, 4096]),
    ("64", [64]),
    ("1k..4k", [1024, 2048, 4096]),
    ("512..600", [512]),
    (" 1, 2 ", [1, 2]),
])
def test_range_grammar(text, want):
    assert parse_range(text) == want


@pytest.mark.parametrize("text", ["", "abc", "512..", "..512", "4096..512", "0", "0..8", "-5", "1..10:x1",
                                  "1..10:+0", "512,,1024", "1.5", "1..2**40:+1", "1..100000000:+1",
                                  "512..1024:y2", "1e3"])
def test_bad_ranges_are_one_line_spec_errors(text):
    with pytest.raises(SpecError) as info:
        parse_range(text, "--n")
    assert "\n" not in str(info.value) and str(info.value)


@settings(max_examples=200, deadline=None)
@given(start=st.integers(1, 10**6), factor=st.integers(2, 9), count=st.integers(0, 12))
def test_doubling_ranges_property(start, factor, count):
    stop = start * factor**count
    values = parse_range(f"{start}..{stop}:x{factor}")
    assert values[0] == start and values[-1] == stop and len(values) == count + 1
    assert all(b == a * factor for a, b in zip(values, values[1:]))


@settings(max_examples=200, deadline=None)
@given(start=st.integers(1, 10**5), step=st.integers(1, 10**4), count=st.integers(0, 50))
def test_arithmetic_ranges_property(start, step, count):
    values = parse_range(f"{start}..{start + step * count}:+{step}")
    assert values == list(range(start, start + step * count + 1, step))


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=20))
def test_arbitrary_text_parses_or_raises_spec_error(text):
    try:
        values = parse_range(text)
    except SpecError:
        return
    assert values == sorted(set(values)) and all(v > 0 for v in values) and len(values) <= MAX_POINTS


def test_absurdly_long_range_is_refused():
    with pytest.raises(SpecError, match="more than"):
        parse_range(f"1..{MAX_POINTS * 2}:+1")


def test_choices():
    assert parse_choices("bf16,FP32,bf16", ["fp32", "bf16"], "dtype") == ["bf16", "fp32"]
    with pytest.raises(SpecError, match="unknown dtype 'fp8'"):
        parse_choices("fp8", ["fp32", "bf16"], "dtype")


def test_case_validation():
    c = Case(4, 1024, 32, 8, 128, 64, "bf16")
    assert c.label() == "B4 T1024 H32/8 D128E64 bf16" and c.num_sequences == 4
    with pytest.raises(SpecError, match="multiple of kv heads"):
        Case(1, 10, 6, 4, 8, 8)
    with pytest.raises(SpecError, match="batch 1"):
        Case(2, 10, 4, 4, 8, 8, varlen=(5, 5))
    with pytest.raises(SpecError, match="sum to seqlen"):
        Case(1, 10, 4, 4, 8, 8, varlen=(5, 4))
    with pytest.raises(SpecError, match="dtype"):
        Case(1, 10, 4, 4, 8, 8, dtype="int8")
    assert Case(1, 10, 4, 4, 8, 8, varlen=(9, 1)).num_sequences == 2


# ---- comma lists of ranges, suffixes, spaces (properties) --------------------------------------

@st.composite
def range_items(draw):
    """One valid item of the grammar, as text, and the values it stands for."""
    kind = draw(st.sampled_from(["single", "doubling", "times", "plus", "k"]))
    start = draw(st.integers(1, 5000))
    if kind == "single":
        return str(start), [start]
    if kind == "k":
        return f"{start % 64 + 1}k", [(start % 64 + 1) * 1024]
    if kind == "plus":
        step, count = draw(st.integers(1, 500)), draw(st.integers(0, 20))
        return f"{start}..{start + step * count}:+{step}", list(range(start, start + step * count + 1, step))
    factor = 2 if kind == "doubling" else draw(st.integers(2, 5))
    count = draw(st.integers(0, 8))
    last = start * factor**count
    stop = last + draw(st.integers(0, last * (factor - 1) - 1))  # any stop short of the next value
    text = f"{start}..{stop}" if kind == "doubling" else f"{start}..{stop}:x{factor}"
    return text, [start * factor**i for i in range(count + 1)]


@settings(max_examples=150, deadline=None)
@given(st.lists(range_items(), min_size=1, max_size=5), st.lists(st.sampled_from(["", " ", "  "]), min_size=10,
                                                                   max_size=10))
def test_comma_lists_are_the_sorted_union_of_their_items(items, spaces):
    text = ",".join(f"{spaces[i]}{t}{spaces[-i - 1]}" for i, (t, _) in enumerate(items))
    want = sorted(set().union(*(set(v) for _, v in items)))
    assert parse_range(text) == want
    assert parse_range(",".join(reversed([t for t, _ in items]))) == want  # order does not matter


@settings(max_examples=100, deadline=None)
@given(st.lists(range_items(), min_size=1, max_size=4),
       st.sampled_from(["0", "-1", "abc", "1.5", "", "8..4", "4..", "1..8:x1", "1..8:+0", "x2"]),
       st.integers(0, 4))
def test_one_bad_item_spoils_a_comma_list(items, bad_item, where):
    parts = [t for t, _ in items]
    parts.insert(where % (len(parts) + 1), bad_item)
    with pytest.raises(SpecError) as info:
        parse_range(",".join(parts), "--n")
    assert "\n" not in str(info.value) and "--n" in str(info.value)


def test_a_comma_list_too_long_in_total_is_refused():
    items = ",".join(f"{i * 10000 + 1}..{i * 10000 + 1000}:+1" for i in range(MAX_POINTS // 1000 + 1))
    with pytest.raises(SpecError, match="more than"):
        parse_range(items)
