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
