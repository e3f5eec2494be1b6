"""The registry: names, selection by glob, suggestions, availability and support reasons."""
import pytest

from lattnbench.registry import default_registry
from lattnbench.spec import Case, SpecError

STABLE_NAMES = ["lightning/naive-torch", "lightning/naive-jax", "lightning/triton", "lightning/jax-triton",
                "lightning/jax-chunked", "lightning/jax-recurrent", "gla/naive-torch", "gla/naive-jax",
                "gla/jax-chunked", "gla/jax-recurrent", "softmax/naive-torch", "softmax/sdpa-flash",
                "softmax/sdpa-cudnn", "softmax/sdpa-efficient", "softmax/flash-attn", "softmax/jax-cudnn",
                "softmax/jax-xla", "lightning/fla-chunk", "lightning/opennlplab"]


def test_stable_names_are_registered():
    names = {e.name for e in default_registry()}
    assert set(STABLE_NAMES) <= names


def test_glob_selection_and_order():
    reg = default_registry()
    soft = reg.select(["softmax/*"])
    assert soft and all(e.family == "softmax" for e in soft)
    both = reg.select(["softmax/jax-xla,lightning/triton"])
    assert [e.name for e in both] == ["lightning/triton", "softmax/jax-xla"]  # registry order


def test_unknown_kernel_suggests_close_names():
    with pytest.raises(SpecError, match="did you mean lightning/triton"):
        default_registry().select(["lightning/trition"])
    with pytest.raises(SpecError, match="lattnbench list"):
        default_registry().select(["zzz"])


def test_availability_reasons():
    reg = default_registry()
    assert "cuda only" in reg["softmax/sdpa-flash"].available("cpu")
    assert reg["lightning/naive-torch"].available("cpu") is None
    fla = reg["lightning/fla-chunk"]
    assert fla.available("cpu") is not None


def test_support_reasons():
    reg = default_registry()
    case = Case(1, 64, 4, 4, 32, 32, "fp32", initial_state=True)
    assert reg["lightning/triton"].supports(case, "cpu") is None
    assert "initial_state" in reg["lightning/opennlplab"].supports(case, "cuda")
    assert "dtype fp32" in reg["softmax/sdpa-flash"].supports(case, "cuda")
    assert reg["lightning/triton"].supports(case.with_(dtype="bf16"), "cpu") is None  # interpreter_bf16
    big = Case(4, 32768, 32, 32, 128, 128, "fp32")
    assert "quadratic" in reg["lightning/naive-torch"].supports(big, "cuda")
    odd = Case(1, 64, 4, 4, 48, 48, "bf16")
    assert "power" in reg["lightning/opennlplab"].supports(odd, "cuda")


def test_bf16_in_the_interpreter_is_refused_only_where_its_correction_cannot_be_installed(monkeypatch):
    """A Triton kernel's CPU point in bf16 runs once ``interpreter_bf16`` is in; where this Triton's
    interpreter has another form, the point is unsupported with the reason (fp32 still runs)."""
    from lattnbench.harness import interpreter_bf16
    from lattnbench.harness.points import point_gate

    entry = default_registry()["gla/triton"]
    case = Case(1, 64, 4, 4, 32, 32, "bf16")
    assert point_gate(entry, case, "cpu") is None and interpreter_bf16.install()
    monkeypatch.setattr(interpreter_bf16, "install", lambda: False)
    status, reason = point_gate(entry, case, "cpu")
    assert status == "unsupported" and "triton#11584" in reason
    assert point_gate(entry, case.with_(dtype="fp32"), "cpu") is None
    assert point_gate(entry, case, "cuda") is None  # compiled: the interpreter is not consulted
