"""What to measure: the range grammar, one benchmark ``Case``, and the expansion of axes into cases.

Pure Python (no framework imports) so that parsing a command line or a suite is instant.
"""
from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace

DTYPES = ("fp32", "bf16", "fp16", "fp64")
MODES = ("fwd", "bwd", "fwdbwd")
DECAYS = ("alibi", "lightning", "zero", "random", "strong")
#: dtypes a GLA gate tensor g may be drawn in (the kernel gets it in that dtype)
G_DTYPES = ("fp32", "bf16", "fp16")
#: the GLA paper's gate normaliser: g = log σ(x) / 16 (fla's GLA layer default, gate_logit_normalizer)
DEFAULT_GATE_NORM = 16.0
DEFAULT_G_DTYPE = "fp32"
#: the case fields that say how the input values are drawn, not the problem's shape
DISTRIBUTION_FIELDS = ("decay", "gate_norm", "g_dtype", "input_scale")
MAX_POINTS = 4096  # a range longer than this is a typo, not a sweep
_INT = r"(\d+)([kKmM]?)"


class SpecError(ValueError):
    """A user error in a range, a case or a suite: the message is one line, shown as is."""


def _int(num: str, suffix: str) -> int:
    mult = {"": 1, "k": 1024, "m": 1024 * 1024}[suffix.lower()]
    return int(num) * mult


def _one_range(item: str, what: str) -> list[int]:
    m = re.fullmatch(rf"{_INT}(?:\.\.{_INT}(?::(x|\+)(\d+))?)?", item)
    if not m:
        raise SpecError(
            f"bad {what} range {item!r}: use 512, 512..32768 (doubling), 512..4096:x2, "
            "1000..4000:+1000 or a comma list such as 512,1000,4096")
    start = _int(m[1], m[2])
    if m[3] is None:
        values = [start]
    else:
        stop = _int(m[3], m[4])
        op, step = (m[5] or "x"), int(m[6] or 2)
        if stop < start:
            raise SpecError(f"bad {what} range {item!r}: the end ({stop}) is below the start ({start})")
        if start == 0 and op == "x":
            raise SpecError(f"bad {what} range {item!r}: a doubling range cannot start at 0")
        if (op == "x" and step < 2) or (op == "+" and step < 1):
            raise SpecError(f"bad {what} range {item!r}: the step must be x2 or more, or +1 or more")
        count = (stop - start) // step + 1 if op == "+" else 1
        if op == "x":
            v = start
            while v * step <= stop:
                v, count = v * step, count + 1
        if count > MAX_POINTS:
            raise SpecError(f"bad {what} range {item!r}: {count} points is more than {MAX_POINTS}")
        values, v = [], start
        while v <= stop:
            values.append(v)
            v = v * step if op == "x" else v + step
    if any(x <= 0 for x in values):
        raise SpecError(f"bad {what} range {item!r}: values must be positive")
    return values


def parse_range(text: str | int, what: str = "value") -> list[int]:
    """Parse the range grammar into a sorted, de-duplicated list of positive ints.

    ``512..32768`` doubles (inclusive), ``512..4096:x2``, ``1000..4000:+1000``, ``512,1000,4096``,
    single values; ``k`` means 1024 (``32k``). Anything else raises SpecError.
    """
    if isinstance(text, int) and not isinstance(text, bool):
        text = str(text)
    if not isinstance(text, str) or not text.strip():
        raise SpecError(f"empty {what} range")
    values: set[int] = set()
    for item in text.replace(" ", "").split(","):
        if not item:
            raise SpecError(f"bad {what} range {text!r}: empty item in the comma list")
        values.update(_one_range(item, what))
        if len(values) > MAX_POINTS:
            raise SpecError(f"bad {what} range {text!r}: more than {MAX_POINTS} points")
    return sorted(values)


def parse_floats(text: str | float | Sequence[float], what: str, example: str = "16,1,0.1") -> list[float]:
    """A comma list (or list) of positive finite numbers such as ``16,1,0.1``; order kept, duplicates dropped."""
    items = (text.split(",") if isinstance(text, str)
             else [text] if isinstance(text, (int, float)) and not isinstance(text, bool) else list(text))
    out: list[float] = []
    for raw in items:
        try:
            value = float(raw.strip() if isinstance(raw, str) else raw)
        except (TypeError, ValueError):
            raise SpecError(f"bad {what} {raw!r}: give positive numbers such as {example}") from None
        if isinstance(raw, bool) or not math.isfinite(value) or value <= 0:
            raise SpecError(f"bad {what} {raw!r}: give positive numbers such as {example}")
        if value not in out:
            out.append(value)
    if not out:
        raise SpecError(f"no {what} given")
    return out


def parse_choices(text: str | Sequence[str], allowed: Sequence[str], what: str) -> list[str]:
    """A comma list (or list) of names, each one of ``allowed``; order kept, duplicates dropped."""
    items = text.split(",") if isinstance(text, str) else list(text)
    out: list[str] = []
    for raw in items:
        name = raw.strip().lower()
        if name not in allowed:
            raise SpecError(f"unknown {what} {raw.strip()!r}: choose from {', '.join(allowed)}")
        if name not in out:
            out.append(name)
    if not out:
        raise SpecError(f"no {what} given")
    return out


def memory_modes(modes: Sequence[str]) -> list[str]:
    """``modes`` for a memory measurement: fwd and fwdbwd only, as a backward's peak is inside
    fwd+bwd's (the CLI's --mode and a suite's [memory] modes alike)."""
    if "bwd" in modes:
        raise SpecError("memory measures fwd and fwdbwd (a backward's peak is inside fwd+bwd's), not bwd")
    return list(modes)


@dataclass(frozen=True)
class Case:
    """One problem shape: q [batch, seqlen, heads, dim_qk], k/v with kv_heads, v with dim_v."""

    batch: int
    seqlen: int
    heads: int
    kv_heads: int
    dim_qk: int
    dim_v: int
    dtype: str = "bf16"
    decay: str = "alibi"
    varlen: tuple[int, ...] | None = None  # packed sequence lengths (batch must be 1)
    initial_state: bool = False
    reverse: bool = False
    input_scale: float = 1.0  # q, k, v drawn ~N(0, scale²): magnitude stress
    world_size: int = 1       # ranks (or mesh devices) the sequence is split over
    gate_norm: float = DEFAULT_GATE_NORM  # gated families: g = log σ(x) / gate_norm, x ~ N(0, 1)
    g_dtype: str = DEFAULT_G_DTYPE  # gated families: the dtype g is drawn in and handed to the kernel

    def __post_init__(self) -> None:
        for name in ("batch", "seqlen", "heads", "kv_heads", "dim_qk", "dim_v"):
            if getattr(self, name) <= 0:
                raise SpecError(f"{name} must be positive, got {getattr(self, name)}")
        if self.heads % self.kv_heads:
            raise SpecError(f"heads ({self.heads}) must be a multiple of kv heads ({self.kv_heads})")
        if self.dtype not in DTYPES:
            raise SpecError(f"unknown dtype {self.dtype!r}: choose from {', '.join(DTYPES)}")
        if self.decay not in DECAYS:
            raise SpecError(f"unknown decay {self.decay!r}: choose from {', '.join(DECAYS)}")
        if not isinstance(self.world_size, int) or self.world_size < 1:
            raise SpecError(f"world size must be a positive integer, got {self.world_size!r}")
        if not self.input_scale > 0:
            raise SpecError(f"input scale must be positive, got {self.input_scale}")
        if not (isinstance(self.gate_norm, (int, float)) and math.isfinite(self.gate_norm) and self.gate_norm > 0):
            raise SpecError(f"gate norm must be a positive number, got {self.gate_norm!r}")
        object.__setattr__(self, "gate_norm", float(self.gate_norm))  # 16 and 16.0 are one point
        if self.g_dtype not in G_DTYPES:
            raise SpecError(f"unknown g dtype {self.g_dtype!r}: choose from {', '.join(G_DTYPES)}")
        if self.varlen is not None:
            if self.batch != 1:
                raise SpecError("varlen cases need batch 1 (sequences are packed)")
            if sum(self.varlen) != self.seqlen or any(n <= 0 for n in self.varlen):
                raise SpecError(f"varlen lengths {self.varlen} must be positive and sum to seqlen {self.seqlen}")

    @property
    def num_sequences(self) -> int:
        return len(self.varlen) if self.varlen else self.batch

    @property
    def tokens(self) -> int:
        return self.batch * self.seqlen

    def label(self) -> str:
        """Short human label, e.g. ``B4 T32768 H32 D128 bf16``."""
        kv = f"/{self.kv_heads}" if self.kv_heads != self.heads else ""
        dims = f"D{self.dim_qk}" if self.dim_qk == self.dim_v else f"D{self.dim_qk}E{self.dim_v}"
        extra = "".join([" varlen" if self.varlen else "", " h0" if self.initial_state else "",
                         " rev" if self.reverse else "", f" x{self.input_scale:g}" if self.input_scale != 1 else "",
                         f" P{self.world_size}" if self.world_size != 1 else "",
                         f" gate/{self.gate_norm:g}" if self.gate_norm != DEFAULT_GATE_NORM else "",
                         f" g:{self.g_dtype}" if self.g_dtype != DEFAULT_G_DTYPE else ""])
        return f"B{self.batch} T{self.seqlen} H{self.heads}{kv} {dims} {self.dtype}{extra}"

    def fields(self, gated: bool = False) -> dict:
        """The columns a results row carries for this case (schema names); ``gated``: the kernel's
        family draws gates, so its rows record their distribution (``gate_norm``, ``g_dtype``)."""
        d = asdict(self)
        d["varlen"] = list(self.varlen) if self.varlen else None
        if self.input_scale == 1:  # the common case keeps the row's identity it always had
            del d["input_scale"]
        if self.world_size == 1:
            del d["world_size"]
        if not gated:
            del d["gate_norm"], d["g_dtype"]
        return d

    def for_family(self, gated: bool) -> "Case":
        """This case as a family sees it: an ungated family's at the default gates (its rows do not
        record them), so that a sweep over gate norms runs a Lightning kernel once."""
        return self if gated else replace(self, gate_norm=DEFAULT_GATE_NORM, g_dtype=DEFAULT_G_DTYPE)

    def same_work(self, decayed: bool) -> "Case":
        """What tells two of a family's points apart: a family without a per-head decay computes
        the same at every decay, so a sweep over decays runs it once (at the first; its rows keep
        the decay they were given, as they always have)."""
        return self if decayed else replace(self, decay="alibi")

    def with_(self, **kw) -> "Case":
        return replace(self, **kw)


def expand(ns: Sequence[int], batches: Sequence[int], heads: Sequence[int], kv_heads: Sequence[int] | None,
           dims: Sequence[int], dim_vs: Sequence[int] | None, dtypes: Sequence[str], decay: str | Sequence[str],
           initial_states: Sequence[bool] = (False,), reverse: bool = False,
           varlen: Sequence[int] | None = None, input_scales: Sequence[float] = (1.0,),
           gate_norms: Sequence[float] = (DEFAULT_GATE_NORM,), g_dtypes: Sequence[str] = (DEFAULT_G_DTYPE,)) -> list[Case]:
    """Every case of a sweep: the input distribution (input scale, decay, gate norm, g dtype) outermost,
    then dtype, batch, heads, kv heads, dims and initial state, n innermost.

    ``kv_heads`` / ``dim_vs`` of None follow heads / dim. With ``varlen`` (packed sequence lengths)
    each shape is one batch-1 case of the lengths' sum, and ``ns`` / ``batches`` do not apply.
    """
    decays = [decay] if isinstance(decay, str) else list(decay)
    for d in decays:
        if d not in DECAYS:
            raise SpecError(f"unknown decay {d!r}: choose from {', '.join(DECAYS)}")
    out: list[Case] = []
    for scale in input_scales:
        for dec in decays:
            for gn in gate_norms:
                for gd in g_dtypes:
                    out.extend(_expand_shapes(ns, batches, heads, kv_heads, dims, dim_vs, dtypes, dec,
                                              initial_states, reverse, varlen, float(scale), gn, gd))
    return out


def _expand_shapes(ns, batches, heads, kv_heads, dims, dim_vs, dtypes, decay, initial_states, reverse, varlen,
                   input_scale, gate_norm, g_dtype) -> list[Case]:
    out: list[Case] = []
    for dt in dtypes:
        for b in ([1] if varlen else batches):
            for h in heads:
                for hk in kv_heads or [h]:
                    if h % hk:
                        raise SpecError(f"heads {h} is not a multiple of kv heads {hk}")
                    for d in dims:
                        for e in dim_vs or [d]:
                            for h0 in initial_states:
                                if varlen:
                                    out.append(Case(1, sum(varlen), h, hk, d, e, dt, decay, tuple(varlen), h0, reverse,
                                                    input_scale, gate_norm=gate_norm, g_dtype=g_dtype))
                                    continue
                                out.extend(Case(b, t, h, hk, d, e, dt, decay, None, h0, reverse, input_scale,
                                                gate_norm=gate_norm, g_dtype=g_dtype)
                                           for t in ns)
    return out


def with_world_sizes(cases: Sequence[Case], world_sizes: Sequence[int]) -> list[Case]:
    """Every case at every world size, world size outermost (the points of one size share their ranks)."""
    return [c.with_(world_size=w) for w in world_sizes for c in cases]
