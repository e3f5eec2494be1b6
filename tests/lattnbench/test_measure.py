"""Reasons recorded for failed points stay one line and keep the actual error."""
from lattnbench.measure import one_line


class CompilationError(Exception):
    pass


def test_one_line_keeps_the_actual_error_of_a_compile_failure():
    exc = CompilationError("at 11:4:\n    _chunk_pass(q, k)\n    ^\nIncompatibleTypeErrorImpl('fp64 vs fp32')")
    line = one_line(exc)
    assert "\n" not in line
    assert line.startswith("CompilationError: at 11:4:") and "IncompatibleTypeErrorImpl" in line


def test_one_line_is_short_and_first_line_only_otherwise():
    line = one_line(RuntimeError("first\nsecond " + "x" * 1000))
    assert line == "RuntimeError: first"
    assert len(one_line(RuntimeError("y" * 1000))) == 300
