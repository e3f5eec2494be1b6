"""Suite files: a TOML sweep definition — axes, kernels, what to measure, the reference kernel.

    name = "seed-readme"                  # results file name (default: the file's stem)
    description = "..."
    kernels = ["lightning/triton", "softmax/*"]
    reference = "softmax/sdpa-flash"      # kernel that ratios and the gate compare against
    threshold = "10%"                     # the gate's default threshold against this suite's runs

    [env]                                 # environment knobs the run sets (and records), e.g.
    LATTNBENCH_AUTOTUNE = "first"         # first config that fits, for correctness sweeps

    [axes]                                # range grammar strings or integers
    n = "512..32768"
    batch = 4
    heads = 32
    dim = 128                             # also: kv_heads, dim_v, dtype = "bf16,fp16", world_size = "1,2,4"
                                          # (ranks the sequence is split over); the input values:
    decay = ["alibi", "strong"]           # Lightning's per-head decay (a name or a list)
    gate_norm = [16, 1, 0.1]              # GLA gates g = log σ(x)/gate_norm (a number or a list)
    g_dtype = ["fp32", "bf16"]            # the dtype g is drawn in (a name or a list)
    input_scale = [1, 10]                 # q, k, v ~ N(0, s²) (a number or a list)

    [speed]                               # each section present is one measurement
    modes = ["fwd", "bwd"]
    budget = 0.5                          # seconds of samples per point
    [memory]
    modes = ["fwd", "fwdbwd"]
    [check-grad]                          # any section may override axes and kernels
    kernels = ["lightning/*"]
    tolerance = "fla"                     # judge by fla's table instead of lattnbench's (check-grad)
    autotune = "first"                    # untimed checks: each autotuner's first config that fits,
                                          # in the check workers alone (a peer's tuning costs minutes)
    axes = { n = "256,1000", dtype = "fp32,bf16" }
    # [[check-grad]] (an array of tables) gives several sweeps of one kind, e.g. a matrix of options
    [check-rows]                          # each batch row against itself alone (long sequences)
    axes = { n = 131072, batch = 4, heads = 32, dim = 128 }

Unknown keys and wrong types are refused with the key named. Pure Python (tomllib).
"""
from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lattnbench.env import KNOB_PREFIXES
from lattnbench.spec import (DECAYS, DEFAULT_GATE_NORM, DTYPES, G_DTYPES, MODES, Case, SpecError, expand,
                             memory_modes, parse_choices, parse_floats, parse_range, with_world_sizes)

AXIS_KEYS = ("n", "batch", "heads", "kv_heads", "dim", "dim_v", "dtype", "decay", "initial_state",
             "reverse", "varlen", "input_scale", "world_size", "gate_norm", "g_dtype")
TOP_KEYS = ("name", "description", "kernels", "reference", "threshold", "device", "axes", "env", "speed",
            "memory", "check-grad", "check-rows")
#: the knobs a suite may set: the kernels' and compilers' own, as every result records them
ENV_PREFIXES = KNOB_PREFIXES
SECTION_KEYS = {"speed": ("modes", "budget", "settle", "breakdown", "kernels", "axes"),
                "memory": ("modes", "kernels", "axes"),
                "check-grad": ("kernels", "axes", "seed", "tolerance", "autotune"),
                "check-rows": ("kernels", "axes", "seed", "tolerance", "autotune")}
MEASURES = ("speed", "memory", "check-grad", "check-rows")


@dataclass
class Measurement:
    """One section of a suite: what to measure, on which kernels and cases."""

    kind: str
    kernels: list[str]
    cases: list[Case]
    modes: list[str] = field(default_factory=list)
    budget: float = 0.5
    seed: int = 0
    settle_c: float | None = None  # speed: the GPU temperature each point waits for
    breakdown: bool = False  # speed: each timed mode's kernels, beside its timers
    tolerance: str = "lattnbench"  # check-grad / check-rows: the tolerance table (lattnbench or fla)
    autotune: str = "tuned"  # check-grad / check-rows: "first" = each autotuner's first config that fits


@dataclass
class Suite:
    name: str
    description: str
    reference: str | None
    device: str
    measurements: list[Measurement]
    threshold: str | None = None
    path: Path | None = None
    env: dict[str, str] = field(default_factory=dict)


def _where(path: str, key: str) -> str:
    return f"{path}: key {key!r}"


def _check_keys(table: dict, allowed: tuple[str, ...], where: str) -> None:
    for key in table:
        if key not in allowed:
            raise SpecError(f"{where}: unknown key {key!r} (allowed: {', '.join(allowed)})")


def _typed(value: Any, types: tuple[type, ...], where: str, what: str) -> Any:
    if isinstance(value, bool) and bool not in types:
        raise SpecError(f"{where} must be {what}, got {value!r}")
    if not isinstance(value, types):
        raise SpecError(f"{where} must be {what}, got {type(value).__name__} {value!r}")
    return value


def _str_list(value: Any, where: str) -> list[str]:
    if isinstance(value, str):
        return [value]
    _typed(value, (list,), where, "a string or a list of strings")
    for item in value:
        _typed(item, (str,), where, "a list of strings")
    return list(value)


def _range(value: Any, where: str) -> list[int]:
    _typed(value, (str, int), where, "an integer or a range string such as '512..32768'")
    try:
        return parse_range(value, where)
    except SpecError as exc:
        raise SpecError(f"{where}: {exc}") from None


def _numbers(value, where: str):
    """``value`` if it is a number or a list of numbers (``parse_floats`` then checks their values)."""
    _typed(value, (int, float, list), where, "a positive number or a list of them")
    for x in value if isinstance(value, list) else [value]:
        _typed(x, (int, float), where, "a list of positive numbers")
    return value


def cases_from_axes(axes: dict, where: str) -> list[Case]:
    """Expand an ``[axes]`` table into cases (n innermost)."""
    _check_keys(axes, AXIS_KEYS, f"{where} [axes]")
    if "n" not in axes:
        raise SpecError(f"{where} [axes]: missing key 'n' (sequence lengths)")
    ns = _range(axes["n"], _where(where, "axes.n"))
    bs = _range(axes.get("batch", 1), _where(where, "axes.batch"))
    hs = _range(axes.get("heads", 4), _where(where, "axes.heads"))
    kvs = _range(axes["kv_heads"], _where(where, "axes.kv_heads")) if "kv_heads" in axes else None
    ds = _range(axes.get("dim", 64), _where(where, "axes.dim"))
    dvs = _range(axes["dim_v"], _where(where, "axes.dim_v")) if "dim_v" in axes else None
    dtype = axes.get("dtype", "bf16")
    _typed(dtype, (str, list), _where(where, "axes.dtype"), "a string or list of dtypes")
    if isinstance(dtype, list):
        dtype = _str_list(dtype, _where(where, "axes.dtype"))
    dts = parse_choices(dtype, DTYPES, "dtype")
    decay = _typed(axes.get("decay", "alibi"), (str, list), _where(where, "axes.decay"), "a string or a list")
    decays = _str_list(decay, _where(where, "axes.decay"))
    for d in decays:
        if d not in DECAYS:
            raise SpecError(f"{_where(where, 'axes.decay')}: unknown decay {d!r} ({', '.join(DECAYS)})")
    norm = _numbers(axes.get("gate_norm", DEFAULT_GATE_NORM), _where(where, "axes.gate_norm"))
    scale = _numbers(axes.get("input_scale", 1.0), _where(where, "axes.input_scale"))
    try:
        norms = parse_floats(norm, "gate norm")
        scales = parse_floats(scale, "input scale", "1,10")
        g_dtypes = parse_choices(_str_list(axes.get("g_dtype", "fp32"), _where(where, "axes.g_dtype")), G_DTYPES,
                                 "g dtype")
    except SpecError as exc:
        raise SpecError(f"{where} [axes]: {exc}") from None
    h0 = axes.get("initial_state", False)
    h0s = (False, True) if h0 == "both" else (_typed(h0, (bool,), _where(where, "axes.initial_state"),
                                                       "true, false or 'both'"),)
    reverse = _typed(axes.get("reverse", False), (bool,), _where(where, "axes.reverse"), "true or false")
    varlen = axes.get("varlen")
    if varlen is not None:
        _typed(varlen, (list,), _where(where, "axes.varlen"), "a list of sequence lengths")
        for x in varlen:
            _typed(x, (int,), _where(where, "axes.varlen"), "a list of positive integers")
    worlds = _range(axes.get("world_size", 1), _where(where, "axes.world_size"))
    return with_world_sizes(expand(ns, bs, hs, kvs, ds, dvs, dts, decays, h0s, reverse, varlen or None, scales,
                                   norms, g_dtypes),
                            worlds)


def parse(doc: dict, where: str, default_name: str) -> Suite:
    """Validate a parsed TOML document into a Suite (SpecError naming the bad key)."""
    _check_keys(doc, TOP_KEYS, where)
    name = _typed(doc.get("name", default_name), (str,), _where(where, "name"), "a string")
    description = _typed(doc.get("description", ""), (str,), _where(where, "description"), "a string")
    reference = doc.get("reference")
    if reference is not None:
        _typed(reference, (str,), _where(where, "reference"), "a kernel name")
    device = _typed(doc.get("device", "auto"), (str,), _where(where, "device"), "auto, cuda or cpu")
    threshold = doc.get("threshold")
    if threshold is not None:
        _typed(threshold, (str,), _where(where, "threshold"), "a percentage such as '10%'")
    env = _typed(doc.get("env", {}), (dict,), _where(where, "env"), "a table of strings")
    for key, value in env.items():
        if not isinstance(value, str) or not key.startswith(ENV_PREFIXES):
            raise SpecError(f"{_where(where, 'env')}: {key} = {value!r}: give a string value to a knob "
                            f"starting with {', '.join(ENV_PREFIXES)}")
    top_kernels = _str_list(doc.get("kernels", []), _where(where, "kernels"))
    top_axes = _typed(doc.get("axes", {}), (dict,), _where(where, "axes"), "a table")
    measurements = []
    for kind in (k for k in doc if k in MEASURES):  # in the file's order: put the vital one first
        sections = doc[kind] if isinstance(doc[kind], list) else [doc[kind]]  # [[check-grad]]: several
        for i, sec in enumerate(sections):
            label = kind if len(sections) == 1 else f"{kind} #{i + 1}"
            measurements.append(_measurement(kind, sec, label, where, top_axes, top_kernels))
    if not measurements:
        raise SpecError(f"{where}: nothing to measure (add a [speed], [memory] or [check-grad] section)")
    return Suite(name, description, reference, device, measurements, threshold=threshold, env=dict(env))


def _measurement(kind: str, sec: Any, label: str, where: str, top_axes: dict, top_kernels: list[str]) -> Measurement:
    """One ``[kind]`` (or one ``[[kind]]`` entry) of a suite, validated."""
    sec = _typed(sec, (dict,), _where(where, label), "a table")
    _check_keys(sec, SECTION_KEYS[kind], f"{where} [{label}]")
    axes = {**top_axes, **_typed(sec.get("axes", {}), (dict,), _where(where, f"{label}.axes"), "a table")}
    kernels = _str_list(sec.get("kernels", top_kernels), _where(where, f"{label}.kernels"))
    m = Measurement(kind, kernels, cases_from_axes(axes, f"{where} [{label}]"))
    if kind in ("speed", "memory"):
        modes = _str_list(sec.get("modes", ["fwd", "fwdbwd"]), _where(where, f"{label}.modes"))
        m.modes = parse_choices(modes, MODES, "mode")
        if kind == "memory":
            try:
                memory_modes(m.modes)
            except SpecError as exc:
                raise SpecError(f"{_where(where, f'{label}.modes')}: {exc}") from None
    if kind == "speed":
        m.budget = float(_typed(sec.get("budget", 0.5), (int, float), _where(where, f"{label}.budget"), "seconds"))
        if not m.budget > 0:
            raise SpecError(f"{_where(where, f'{label}.budget')} must be positive seconds, got {m.budget}")
        if "settle" in sec:
            m.settle_c = float(_typed(sec["settle"], (int, float), _where(where, f"{label}.settle"), "degrees C"))
            if not m.settle_c > 0:
                raise SpecError(f"{_where(where, f'{label}.settle')} must be positive degrees C, got {m.settle_c}")
        m.breakdown = _typed(sec.get("breakdown", False), (bool,), _where(where, f"{label}.breakdown"), "true or false")
    if kind in ("check-grad", "check-rows"):
        m.seed = _typed(sec.get("seed", 0), (int,), _where(where, f"{label}.seed"), "an integer")
        if m.seed < 0:
            raise SpecError(f"{_where(where, f'{label}.seed')} must be >= 0, got {m.seed}")
        m.tolerance = _typed(sec.get("tolerance", "lattnbench"), (str,), _where(where, f"{label}.tolerance"),
                             "'lattnbench' or 'fla'")
        if m.tolerance not in ("lattnbench", "fla"):
            raise SpecError(f"{_where(where, f'{label}.tolerance')}: unknown table {m.tolerance!r} (lattnbench, fla)")
        m.autotune = _typed(sec.get("autotune", "tuned"), (str,), _where(where, f"{label}.autotune"),
                            "'tuned' or 'first'")
        if m.autotune not in ("tuned", "first"):
            raise SpecError(f"{_where(where, f'{label}.autotune')}: unknown mode {m.autotune!r} (tuned, first)")
    return m


#: the project's suites, beside the package (an editable install or a checkout)
SUITES_DIR = Path(__file__).resolve().parent.parent / "suites"


def load_suite(path: str | Path) -> Suite:
    """Read a suite TOML file; a bare name (``cpu``) is looked up in the project's ``suites/``."""
    p = Path(path)
    if not p.exists() and not p.suffix and p.name == str(path):
        p = next((d / f"{p}.toml" for d in (Path("suites"), SUITES_DIR) if (d / f"{p}.toml").exists()),
                 SUITES_DIR / f"{p}.toml")
    try:
        doc = tomllib.loads(p.read_text())
    except FileNotFoundError:
        raise SpecError(f"{path}: no such suite file") from None
    except OSError as exc:
        raise SpecError(f"{path}: cannot read ({exc.strerror})") from None
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"{p}: not valid TOML ({exc})") from None
    suite = parse(doc, str(p), p.stem)
    suite.path = p
    return suite
