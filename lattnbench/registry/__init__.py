"""The kernel registry: every implementation the harness can run, with availability flags.

Modelled on tritonbench's registry: an entry names a kernel, its family and framework, the
devices it runs on, the modules it needs, and a *loader* that imports it lazily and returns
a function with the family's uniform signature (see ``lattnbench.registry.bundled``):

- lightning: ``fn(q, k, v, gamma, scale, initial_state, reverse, cu_seqlens) -> (o, S_T)``
- gla:       ``fn(q, k, v, g, scale, initial_state, reverse, cu_seqlens) -> (o, S_T)``
- gdn:       ``fn(q, k, v, g, beta, scale, initial_state, reverse, cu_seqlens) -> (o, S_T)``
- softmax:   ``fn(q, k, v, scale) -> o`` (causal)

``available(device)`` and ``supports(case, device)`` return ``None`` or a one-line reason.
"""

import difflib
import fnmatch
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cache

from lattnbench.registry import bundled, peers
from lattnbench.operators import names as family_names
from lattnbench.registry.entry import ALL_FEATURES, FRAMEWORKS, KernelEntry
from lattnbench.registry.plugins import PLUGIN_ATTRIBUTES, clash, entry_point_plugins, load_plugin
from lattnbench.spec import SpecError

__all__ = ["ALL_FEATURES", "FRAMEWORKS", "PLUGIN_ATTRIBUTES", "KernelEntry", "Registry",
           "default_registry", "load_plugin", "registry_with", "unknown_kernel_message"]


@dataclass
class Registry:
    """Name → entry, with glob selection and close-match suggestions."""

    entries: dict[str, KernelEntry] = field(default_factory=dict)

    def add(self, entry: KernelEntry) -> KernelEntry:
        if entry.family not in family_names() or entry.framework not in FRAMEWORKS:
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
        """Entries matching names or globs (``softmax/*``), in registry order; SpecError if none.

        A glob matches bundled kernels and plugins; peers (other projects' kernels, whose
        packages and limits differ) run only when named.
        """
        chosen: list[str] = []
        for pat in split_patterns(patterns):
            hits = [n for n in self.entries if _match(self.entries[n], pat)]
            if not hits:
                raise SpecError(unknown_kernel_message(pat, self.entries))
            chosen.extend(h for h in hits if h not in chosen)
        if not chosen:
            raise SpecError("no kernel named: give names or globs, e.g. -k 'lightning/*' (see `lattnbench list`)")
        order = list(self.entries)
        return [self.entries[n] for n in sorted(chosen, key=order.index)]

    def peers_left_out(self, patterns: Iterable[str]) -> list[str]:
        """Peers a glob in ``patterns`` matches by name but leaves out (see ``select``)."""
        pats = split_patterns(patterns)
        return [n for n, e in self.entries.items() if e.origin == "peer" and n not in pats
                and any(fnmatch.fnmatchcase(n, p) for p in pats)]


def split_patterns(patterns: Iterable[str]) -> list[str]:
    """Kernel names or globs, given repeated and/or comma separated, as one list."""
    return [p for raw in patterns for p in (x.strip() for x in raw.split(",")) if p]


def _match(entry: KernelEntry, pattern: str) -> bool:
    if entry.name == pattern:
        return True
    return entry.origin != "peer" and fnmatch.fnmatchcase(entry.name, pattern)


def unknown_kernel_message(name: str, known: Iterable[str]) -> str:
    close = difflib.get_close_matches(name, list(known), n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(close)}?" if close else "; `lattnbench list` shows them all"
    return f"unknown kernel {name!r}{hint}"


@cache
def default_registry() -> Registry:
    """Bundled kernels, then peers (fla, official, ejkernel, flash_attn), then entry-point plugins."""
    reg = Registry()
    for entry in [*bundled.entries(), *peers.entries()]:
        reg.add(entry)
    for entry in entry_point_plugins(dict(reg.entries)):
        reg.add(entry)
    return reg


def registry_with(plugins: Iterable[str] = ()) -> Registry:
    """The default registry plus ``--kernel package.module:function`` plugins.

    A plugin whose name is taken by a bundled kernel, a peer or a different plugin is a
    SpecError (one line, exit 2), never a silent replacement; the same plugin twice is fine.
    """
    reg = Registry(dict(default_registry().entries))
    for spec in plugins:
        entry = load_plugin(spec)
        why = clash(reg.entries, entry)
        if why:
            raise SpecError(why)
        reg.add(entry)
    return reg
