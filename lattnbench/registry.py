"""The kernel registry: every implementation the harness can run, with availability flags.

Modelled on tritonbench's registry: an entry names a kernel, its family and framework, the
devices it runs on, the modules it needs, and a *loader* that imports it lazily and returns
a function with the family's uniform signature (see ``lattnbench.bundled``):

- lightning: ``fn(q, k, v, gamma, scale, initial_state, reverse, cu_seqlens) -> (o, S_T)``
- gla:       ``fn(q, k, v, g, scale, initial_state, reverse, cu_seqlens) -> (o, S_T)``
- softmax:   ``fn(q, k, v, scale) -> o`` (causal)

``available(device)`` and ``supports(case, device)`` return ``None`` or a one-line reason.
"""
from __future__ import annotations

import difflib
import fnmatch
import importlib
import importlib.util
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import cache

from lattnbench.spec import Case, SpecError

FAMILIES = ("lightning", "gla", "softmax")
FRAMEWORKS = ("torch", "jax")
ALL_FEATURES = frozenset({"initial_state", "reverse", "varlen", "gqa", "dv", "any_dim"})


@dataclass(frozen=True)
class KernelEntry:
    """One runnable implementation; cheap to create, imports nothing until ``load``."""

    name: str
    family: str
    framework: str
    loader: Callable[[], Callable]
    devices: tuple[str, ...] = ("cpu", "cuda")
    requires: tuple[str, ...] = ()
    dtypes: tuple[str, ...] = ("fp32", "bf16", "fp16")
    features: frozenset[str] = ALL_FEATURES
    description: str = ""
    reference: bool = False          # a naive, fp64-capable reference
    interpreted_on_cpu: bool = False  # Triton kernels: CPU runs are interpreter runs
    max_scores: int | None = None    # quadratic kernels: largest B·H·T² they may materialise
    case_check: Callable[[Case], str | None] | None = None
    origin: str = "bundled"           # bundled | peer | plugin
    fixed_scale: float | None = None  # kernels without a scale argument (the reference uses it too)
    final_state: bool = True          # returns S_T (softmax kernels never do)

    def available(self, device: str) -> str | None:
        """None when the kernel can run on ``device``, else why not (package missing, no GPU)."""
        for module in (*self.requires, *(("jax",) if self.framework == "jax" else ())):
            if not _importable(module):
                return f"package {module.split('.')[0]!r} is not installed"
        if device not in self.devices:
            return f"runs on {'/'.join(self.devices)} only, not {device}"
        return None

    def supports(self, case: Case, device: str) -> str | None:
        """None when the kernel handles ``case``, else the reason it is ``unsupported``."""
        if case.dtype not in self.dtypes:
            return f"dtype {case.dtype} not supported (only {', '.join(self.dtypes)})"
        if device == "cpu" and self.interpreted_on_cpu and case.dtype == "bf16":
            return "the Triton interpreter cannot compute bf16 dots (triton#11584); checked on the GPU"
        needs = {
            "initial_state": case.initial_state, "reverse": case.reverse,
            "varlen": case.varlen is not None, "gqa": case.kv_heads != case.heads,
            "dv": case.dim_v != case.dim_qk,
        }
        for feature, wanted in needs.items():
            if wanted and feature not in self.features:
                return f"no {feature.replace('dv', 'dim_v != dim_qk')} support"
        if "any_dim" not in self.features:
            for dim in {case.dim_qk, case.dim_v}:
                if dim & (dim - 1) or dim < 16:
                    return f"head dim {dim} is not a power of two >= 16"
        if self.max_scores is not None:
            scores = case.batch * case.heads * case.seqlen * case.seqlen
            if scores > self.max_scores:
                return (f"quadratic kernel: {case.seqlen}² scores per head exceed its limit "
                        "(the chunked reference takes over for long sequences)")
        if self.case_check is not None:
            return self.case_check(case)
        return None

    def load(self) -> Callable:
        return _load(self)


@cache
def _load(entry: KernelEntry) -> Callable:
    return entry.loader()


@cache
def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


@dataclass
class Registry:
    """Name → entry, with glob selection and close-match suggestions."""

    entries: dict[str, KernelEntry] = field(default_factory=dict)

    def add(self, entry: KernelEntry) -> KernelEntry:
        if entry.family not in FAMILIES or entry.framework not in FRAMEWORKS:
            raise ValueError(f"kernel {entry.name}: bad family/framework {entry.family}/{entry.framework}")
        self.entries[entry.name] = entry
        return entry

    def __getitem__(self, name: str) -> KernelEntry:
        try:
            return self.entries[name]
        except KeyError:
            raise SpecError(unknown_kernel_message(name, self.entries)) from None

    def __iter__(self):
        return iter(self.entries.values())

    def select(self, patterns: Iterable[str]) -> list[KernelEntry]:
        """Entries matching names or globs (``softmax/*``), in registry order; SpecError if none."""
        chosen: list[str] = []
        for raw in patterns:
            for pat in (p.strip() for p in raw.split(",")):
                if not pat:
                    continue
                hits = [n for n in self.entries if fnmatch.fnmatchcase(n, pat)]
                if not hits:
                    raise SpecError(unknown_kernel_message(pat, self.entries))
                chosen.extend(h for h in hits if h not in chosen)
        order = list(self.entries)
        return [self.entries[n] for n in sorted(chosen, key=order.index)]


def unknown_kernel_message(name: str, known: Iterable[str]) -> str:
    close = difflib.get_close_matches(name, list(known), n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(close)}?" if close else "; `lattnbench list` shows them all"
    return f"unknown kernel {name!r}{hint}"


def load_plugin(spec: str) -> KernelEntry:
    """``package.module:function`` → a lightning-family torch entry (see README "Plugins").

    The function may carry attributes ``lattnbench_family`` / ``lattnbench_framework`` /
    ``lattnbench_name`` / ``lattnbench_devices`` to describe itself.
    """
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise SpecError(f"bad plugin {spec!r}: use package.module:function")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise SpecError(f"cannot import plugin module {module_name!r}: {exc}") from None
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise SpecError(f"plugin {spec!r}: {module_name} has no function {attr!r}")
    return KernelEntry(
        name=getattr(fn, "lattnbench_name", f"plugin/{attr}"),
        family=getattr(fn, "lattnbench_family", "lightning"),
        framework=getattr(fn, "lattnbench_framework", "torch"),
        devices=tuple(getattr(fn, "lattnbench_devices", ("cpu", "cuda"))),
        loader=lambda: fn,
        description=(fn.__doc__ or "").strip().splitlines()[0] if fn.__doc__ else f"plugin {spec}",
        origin="plugin",
    )


@cache
def default_registry() -> Registry:
    """Bundled kernels, then peers (fla, official, ejkernel, flash_attn), then entry-point plugins."""
    from lattnbench import bundled, peers

    reg = Registry()
    for entry in [*bundled.entries(), *peers.entries()]:
        reg.add(entry)
    for entry in _entry_point_plugins():
        reg.add(entry)
    return reg


def _entry_point_plugins() -> list[KernelEntry]:
    from importlib.metadata import entry_points

    found = []
    for ep in entry_points(group="lattnbench.kernels"):
        try:
            found.append(load_plugin(ep.value))
        except SpecError:
            continue  # a broken third-party plugin must not break the tool; `list` omits it
    return found


def registry_with(plugins: Iterable[str] = ()) -> Registry:
    """The default registry plus ``--kernel package.module:function`` plugins."""
    reg = Registry(dict(default_registry().entries))
    for spec in plugins:
        reg.add(load_plugin(spec))
    return reg
