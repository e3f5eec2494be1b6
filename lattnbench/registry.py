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


#: the function attributes a plugin may set to describe itself (docs/plugins.md)
PLUGIN_ATTRIBUTES = {
    "lattnbench_name": "registry name (default plugin/<function>, or plugin/<entry-point name>)",
    "lattnbench_family": "lightning (default), gla or softmax: which uniform signature it has",
    "lattnbench_framework": "torch (default) or jax: which arrays it takes",
    "lattnbench_devices": "devices it runs on, from cpu and cuda (default both)",
    "lattnbench_dtypes": "input dtypes it takes, from fp32, bf16, fp16, fp64 (default fp32, bf16, fp16)",
    "lattnbench_features": "what it handles, from initial_state, reverse, varlen, gqa, dv, any_dim "
                           "(default all; softmax: gqa, dv, any_dim); a case needing another is unsupported",
    "lattnbench_supports": "callable(case) -> None or the reason the case is unsupported",
    "lattnbench_scale": "a fixed scale for kernels without a scale argument (the reference uses it too)",
    "lattnbench_final_state": "False when it returns (o, None) (default True)",
    "lattnbench_description": "one line for `lattnbench list` (default the docstring's first line)",
}
_DEVICES = ("cpu", "cuda")
_SOFTMAX_FEATURES = frozenset({"gqa", "dv", "any_dim"})


@dataclass(frozen=True)
class _PluginLoader:
    """Returns the plugin's function; equal for the same function (so a repeat is not a clash)."""

    fn: Callable
    spec: str = field(compare=False)

    def __call__(self) -> Callable:
        return self.fn


def _names(value, what: str, allowed, spec: str) -> tuple[str, ...]:
    items = (value,) if isinstance(value, str) else tuple(value)
    bad = [x for x in items if x not in allowed]
    if bad or not items:
        raise SpecError(f"plugin {spec!r}: bad {what} {', '.join(map(str, bad)) or '(empty)'}; "
                        f"choose from {', '.join(sorted(allowed))}")
    return items


def load_plugin(spec: str, default_name: str | None = None) -> KernelEntry:
    """``package.module:function`` → a registry entry (docs/plugins.md, README "Plugins").

    The function has its family's uniform signature (see the module docstring; torch tensors or
    JAX arrays by framework). It may describe itself with the attributes in PLUGIN_ATTRIBUTES
    (``fn.lattnbench_family = "gla"``, ...); every value is checked here, and a bad one is a
    one-line SpecError, as is a module that does not import or lacks the function.
    """
    from lattnbench.spec import DTYPES

    module_name, _, attr = spec.partition(":")
    module_name, attr = module_name.strip(), attr.strip()
    if not module_name or not attr:
        raise SpecError(f"bad plugin {spec!r}: use package.module:function")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise SpecError(f"cannot import plugin module {module_name!r}: {exc}") from None
    fn = module
    for part in attr.split("."):
        fn = getattr(fn, part, None)
    if not callable(fn):
        raise SpecError(f"plugin {spec!r}: {module_name} has no function {attr!r}")
    unknown = sorted(a for a in dir(fn) if a.startswith("lattnbench_") and a not in PLUGIN_ATTRIBUTES)
    if unknown:
        raise SpecError(f"plugin {spec!r}: unknown attribute {unknown[0]} "
                        f"(known: {', '.join(PLUGIN_ATTRIBUTES)})")

    name = getattr(fn, "lattnbench_name", default_name or f"plugin/{attr.split('.')[-1]}")
    if not isinstance(name, str) or not name or any(c.isspace() or c in ",*?[]" for c in name):
        raise SpecError(f"plugin {spec!r}: bad name {name!r} (no spaces, commas or glob characters)")
    family = _names(getattr(fn, "lattnbench_family", "lightning"), "family", FAMILIES, spec)
    framework = _names(getattr(fn, "lattnbench_framework", "torch"), "framework", FRAMEWORKS, spec)
    if len(family) != 1 or len(framework) != 1:
        raise SpecError(f"plugin {spec!r}: give one family and one framework")
    family, framework = family[0], framework[0]
    devices = _names(getattr(fn, "lattnbench_devices", _DEVICES), "device", _DEVICES, spec)
    dtypes = _names(getattr(fn, "lattnbench_dtypes", ("fp32", "bf16", "fp16")), "dtype", DTYPES, spec)
    default_features = _SOFTMAX_FEATURES if family == "softmax" else ALL_FEATURES
    wanted = getattr(fn, "lattnbench_features", default_features)
    features = frozenset(_names(wanted, "feature", ALL_FEATURES, spec) if len(wanted) else ())
    supports = getattr(fn, "lattnbench_supports", None)
    if supports is not None and not callable(supports):
        raise SpecError(f"plugin {spec!r}: lattnbench_supports must be callable(case) -> reason or None")
    scale = getattr(fn, "lattnbench_scale", None)
    if scale is not None and (isinstance(scale, bool) or not isinstance(scale, (int, float)) or scale <= 0):
        raise SpecError(f"plugin {spec!r}: lattnbench_scale must be a positive number, got {scale!r}")
    final_state = getattr(fn, "lattnbench_final_state", family != "softmax")
    if not isinstance(final_state, bool):
        raise SpecError(f"plugin {spec!r}: lattnbench_final_state must be True or False")
    doc = (fn.__doc__ or "").strip()
    description = getattr(fn, "lattnbench_description", doc.splitlines()[0] if doc else f"plugin {spec}")
    return KernelEntry(
        name=name, family=family, framework=framework, loader=_PluginLoader(fn, f"{module_name}:{attr}"),
        devices=devices, dtypes=dtypes, features=features, case_check=supports,
        fixed_scale=None if scale is None else float(scale), final_state=final_state,
        description=str(description), origin="plugin",
    )


def _clash(reg: Registry, entry: KernelEntry) -> str | None:
    """Why ``entry`` may not join ``reg`` (its name is taken by another kernel), or None."""
    old = reg.entries.get(entry.name)
    if old is None or (old.origin == "plugin" and old.loader == entry.loader):
        return None
    where = old.loader.spec if isinstance(old.loader, _PluginLoader) else f"the {old.origin} kernel"
    return (f"plugin {entry.loader.spec!r}: the name {entry.name!r} is taken by {where}; "
            "set lattnbench_name to another name")


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
    """Plugins that installed packages declare in the ``lattnbench.kernels`` entry-point group.

    ``my-kernel = "my_kernel.lightning:chunked_lightning"``: the entry-point name gives the
    default registry name ``plugin/my-kernel``. A plugin that fails to load, or whose name is
    taken, is skipped with a warning: a broken third-party package must not break the tool.
    """
    import warnings
    from importlib.metadata import entry_points

    from lattnbench import bundled, peers

    builtin = Registry({e.name: e for e in [*bundled.entries(), *peers.entries()]})
    found: list[KernelEntry] = []
    for ep in entry_points(group="lattnbench.kernels"):
        try:
            entry = load_plugin(ep.value, default_name=f"plugin/{ep.name}")
        except Exception as exc:  # noqa: BLE001 - third-party import code may raise anything
            msg = str(exc) if isinstance(exc, SpecError) else f"{type(exc).__name__}: {exc}"
            warnings.warn(f"lattnbench: entry-point plugin {ep.name!r} ({ep.value}) skipped: {msg}",
                          stacklevel=2)
            continue
        taken = [e for e in found if e.name == entry.name]
        why = _clash(builtin, entry)
        if taken and taken[0].loader != entry.loader:
            why = f"plugin {ep.value!r}: the name {entry.name!r} is taken by {taken[0].loader.spec}"
        if why:
            warnings.warn(f"lattnbench: entry-point plugin {ep.name!r} skipped: {why}", stacklevel=2)
            continue
        if not taken:
            found.append(entry)
    return found


def registry_with(plugins: Iterable[str] = ()) -> Registry:
    """The default registry plus ``--kernel package.module:function`` plugins.

    A plugin whose name is taken by a bundled kernel, a peer or a different plugin is a
    SpecError (one line, exit 2), never a silent replacement; the same plugin twice is fine.
    """
    reg = Registry(dict(default_registry().entries))
    for spec in plugins:
        entry = load_plugin(spec)
        why = _clash(reg, entry)
        if why:
            raise SpecError(why)
        reg.add(entry)
    return reg
