"""Operator families, registered in one place: ``family(name)`` answers everything family-specific.

A family is one folder (``lattnbench/operators/<name>/``) holding a ``Family`` subclass: its input
tensors and how they are drawn, how a kernel of it is called, its fp64 reference, the tensors
check-grad compares and their tolerances, its cost model and memory estimate. The harness asks
the family instead of branching on its name, so adding a family touches this registry and its
own folder only. Importing this module is light (no framework): views read ``order`` and flags.
"""
from __future__ import annotations

from lattnbench.operators.base import Family
from lattnbench.operators.gdn import FAMILY as _GDN
from lattnbench.operators.gla import FAMILY as _GLA
from lattnbench.operators.lightning import FAMILY as _LIGHTNING
from lattnbench.operators.softmax import FAMILY as _SOFTMAX

__all__ = ["Family", "family", "is_decayed", "is_gated", "names", "register"]

_FAMILIES: dict[str, Family] = {}


def register(fam: Family) -> Family:
    """Add a family (a plugin's or a test's); registering the same name again replaces it."""
    if not fam.name or "/" in fam.name:
        raise ValueError(f"bad family name {fam.name!r}")
    _FAMILIES[fam.name] = fam
    return fam


def family(name: str) -> Family:
    """The registered family called ``name`` (KeyError names the known ones)."""
    try:
        return _FAMILIES[name]
    except KeyError:
        raise KeyError(f"unknown family {name!r} (known: {', '.join(_FAMILIES)})") from None


def names() -> tuple[str, ...]:
    """Registered family names, in table order."""
    return tuple(sorted(_FAMILIES, key=lambda n: (_FAMILIES[n].order, n)))


def is_gated(name: str | None) -> bool:
    """Whether rows of this family carry the gate fields (False for an unknown family)."""
    fam = _FAMILIES.get(name or "")
    return bool(fam and fam.gated)


def is_decayed(name: str | None) -> bool:
    """Whether rows of this family were drawn with the per-head decay γ of the ``decay`` axis."""
    fam = _FAMILIES.get(name or "")
    return bool(fam and fam.decayed)


for _fam in (_LIGHTNING, _GLA, _GDN, _SOFTMAX):
    register(_fam)
