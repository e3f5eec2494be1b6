"""Plugins: ``--kernel package.module:function`` and the ``lattnbench.kernels`` entry-point group.

The function has its family's uniform signature (see ``lattnbench.registry``) and may describe
itself with the attributes in PLUGIN_ATTRIBUTES; every value is checked when it loads.
"""
from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field

from lattnbench.operators import family as family_of
from lattnbench.operators import names as family_names
from lattnbench.registry.entry import ALL_FEATURES, FRAMEWORKS, KernelEntry
from lattnbench.spec import SpecError

PLUGIN_ATTRIBUTES = {
    "lattnbench_name": "registry name (default plugin/<function>, or plugin/<entry-point name>)",
    "lattnbench_family": "lightning (default), gla, gdn or softmax: which uniform signature it has",
    "lattnbench_framework": "torch (default) or jax: which arrays it takes",
    "lattnbench_devices": "devices it runs on, from cpu and cuda (default both)",
    "lattnbench_dtypes": "input dtypes it takes, from fp32, bf16, fp16, fp64 (default fp32, bf16, fp16)",
    "lattnbench_features": "what it handles, from initial_state, reverse, varlen, gqa, dv, any_dim "
                           "(default all; softmax: gqa, dv, any_dim); a case needing another is unsupported",
    "lattnbench_supports": "callable(case) -> None or the reason the case is unsupported",
    "lattnbench_scale": "a fixed scale for kernels without a scale argument (the reference uses it too)",
    "lattnbench_final_state": "False when it returns (o, None) (default True)",
    "lattnbench_description": "one line for `lattnbench list` (default the docstring's first line)",
    "lattnbench_sequence_parallel": "True when it takes this rank's shard of the sequence and runs at "
                                    "--world-size N (default False)",
}
_DEVICES = ("cpu", "cuda")


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
    family = _names(getattr(fn, "lattnbench_family", "lightning"), "family", family_names(), spec)
    framework = _names(getattr(fn, "lattnbench_framework", "torch"), "framework", FRAMEWORKS, spec)
    if len(family) != 1 or len(framework) != 1:
        raise SpecError(f"plugin {spec!r}: give one family and one framework")
    family, framework = family[0], framework[0]
    devices = _names(getattr(fn, "lattnbench_devices", _DEVICES), "device", _DEVICES, spec)
    dtypes = _names(getattr(fn, "lattnbench_dtypes", ("fp32", "bf16", "fp16")), "dtype", DTYPES, spec)
    default_features = family_of(family).default_features
    wanted = getattr(fn, "lattnbench_features", default_features)
    features = frozenset(_names(wanted, "feature", ALL_FEATURES, spec) if len(wanted) else ())
    supports = getattr(fn, "lattnbench_supports", None)
    if supports is not None and not callable(supports):
        raise SpecError(f"plugin {spec!r}: lattnbench_supports must be callable(case) -> reason or None")
    scale = getattr(fn, "lattnbench_scale", None)
    if scale is not None and (isinstance(scale, bool) or not isinstance(scale, (int, float)) or scale <= 0):
        raise SpecError(f"plugin {spec!r}: lattnbench_scale must be a positive number, got {scale!r}")
    final_state = getattr(fn, "lattnbench_final_state", family_of(family).has_state)
    if not isinstance(final_state, bool):
        raise SpecError(f"plugin {spec!r}: lattnbench_final_state must be True or False")
    parallel = getattr(fn, "lattnbench_sequence_parallel", False)
    if not isinstance(parallel, bool):
        raise SpecError(f"plugin {spec!r}: lattnbench_sequence_parallel must be True or False")
    doc = (fn.__doc__ or "").strip()
    description = getattr(fn, "lattnbench_description", doc.splitlines()[0] if doc else f"plugin {spec}")
    return KernelEntry(
        name=name, family=family, framework=framework, loader=_PluginLoader(fn, f"{module_name}:{attr}"),
        devices=devices, dtypes=dtypes, features=features, case_check=supports,
        fixed_scale=None if scale is None else float(scale), final_state=final_state,
        description=str(description), origin="plugin", sequence_parallel=parallel,
    )


def clash(known: dict[str, KernelEntry], entry: KernelEntry) -> str | None:
    """Why ``entry`` may not join ``known`` (its name is taken by another kernel), or None."""
    old = known.get(entry.name)
    if old is None or (old.origin == "plugin" and old.loader == entry.loader):
        return None
    where = old.loader.spec if isinstance(old.loader, _PluginLoader) else f"the {old.origin} kernel"
    return (f"plugin {entry.loader.spec!r}: the name {entry.name!r} is taken by {where}; "
            "set lattnbench_name to another name")


def entry_point_plugins(builtin: dict[str, KernelEntry]) -> list[KernelEntry]:
    """Plugins that installed packages declare in the ``lattnbench.kernels`` entry-point group.

    ``my-kernel = "my_kernel.lightning:chunked_lightning"``: the entry-point name gives the
    default registry name ``plugin/my-kernel``. A plugin that fails to load, or whose name is
    taken (``builtin``: the bundled kernels and peers), is skipped with a warning: a broken
    third-party package must not break the tool.
    """
    import warnings
    from importlib.metadata import entry_points

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
        why = clash(builtin, entry)
        if taken and taken[0].loader != entry.loader:
            why = f"plugin {ep.value!r}: the name {entry.name!r} is taken by {taken[0].loader.spec}"
        if why:
            warnings.warn(f"lattnbench: entry-point plugin {ep.name!r} skipped: {why}", stacklevel=2)
            continue
        if not taken:
            found.append(entry)
    return found
