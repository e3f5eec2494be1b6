"""Which kernels a run measures and the tasks it keeps: named kernels or the defaults, the plugins
given with ``--kernel``, the case as each family sees it, and each task once."""
from __future__ import annotations

from collections.abc import Callable

from lattnbench.registry import KernelEntry, Registry, split_patterns
from lattnbench.runner.plan import Task
from lattnbench.spec import SpecError


def pick_kernels(reg: Registry, patterns: list[str] | None, device: str, families=None,
                 plugins: list[str] | None = None, timing: bool = True, parallel: bool = False,
                 note: Callable[[str], None] | None = None) -> list[KernelEntry]:
    """Named kernels, or the defaults of ``families`` (plus the plugins given with ``--kernel``).

    Defaults: for timing, the bundled kernels timed by default on the device; for check-grad
    (``timing`` False) every available bundled kernel that is not a reference. With ``parallel``
    (a world size above 1 asked for) the defaults are the sequence-parallel kernels instead. Peers
    and plugins run when named; a glob leaves peers out and says so through ``note``.
    """
    if patterns:
        chosen = reg.select(patterns)
        left = reg.peers_left_out(patterns)
        if left and note is not None:
            note(f"the glob leaves out the peers {', '.join(left)}; name them to run them")
        return chosen
    chosen = [e for e in reg if default_kernel(e, device, timing, parallel)
              and (families is None or e.family in families)]
    return chosen + given_plugins(reg, plugins)


def given_plugins(reg: Registry, specs: list[str] | None) -> list[KernelEntry]:
    """The registry entries of the plugins given with ``--kernel``."""
    return [e for e in reg if e.origin == "plugin" and e.loader.spec in (specs or ())]


def with_plugins(reg: Registry, chosen: list[KernelEntry], specs: list[str] | None) -> list[KernelEntry]:
    """The plugins given with ``--kernel`` that join a suite's measurement: those of a family the
    measurement already has, not chosen yet (a suite names bundled kernels, not plugins)."""
    families = {e.family for e in chosen}
    names = {e.name for e in chosen}
    return [e for e in given_plugins(reg, specs) if e.family in families and e.name not in names]


def default_kernel(entry: KernelEntry, device: str, timing: bool = True, parallel: bool = False) -> bool:
    """Runs when no ``--kernels`` is given: bundled, not a reference, available, sequence parallel
    exactly when ``parallel``; for timing also timed by default on ``device`` (every sequence-parallel
    one when ``parallel``) and, on a CPU, not interpreted."""
    if entry.reference or entry.origin != "bundled" or entry.available(device) is not None:
        return False
    if entry.sequence_parallel != parallel:
        return False
    return not timing or ((parallel or device in entry.timed_by_default)
                          and not (device == "cpu" and entry.interpreted_on_cpu))


def family_case(entry: KernelEntry, case):
    """The case as the kernel's family sees it (an ungated family's at the default gates)."""
    from lattnbench.operators import family

    return case.for_family(gated=family(entry.family).gated)


def family_applies(entry: KernelEntry, case) -> bool:
    """Whether check-grad has anything to compare for the kernel's family on the case."""
    from lattnbench.operators import family

    return family(entry.family).applies(case)


def distinct(tasks: list[Task], reg: Registry) -> list[Task]:
    """Each task once, in order: a sweep over gate norms runs a Lightning kernel once, and one over
    decays runs a GLA kernel once."""
    from lattnbench.operators import family

    seen: set = set()
    out = []
    for t in tasks:
        decayed = t.kernel not in reg.entries or family(reg[t.kernel].family).decayed
        key = (t.kind, t.kernel, t.case.same_work(decayed), t.run)
        if key not in seen:
            seen.add(key)
            out.append(t)
    return out


def runs_at(entry: KernelEntry, case) -> bool:
    """Only sequence-parallel kernels have points above world size 1."""
    return case.world_size == 1 or entry.sequence_parallel


def single_rank(chosen: list[KernelEntry], cases) -> list[str]:
    """The chosen kernels that lose points to a world size above 1 (not sequence parallel)."""
    if max((c.world_size for c in cases), default=1) == 1:
        return []
    return [e.name for e in chosen if not e.sequence_parallel]


def nothing_to_run(reg: Registry, chosen: list[KernelEntry], cases, world: str = "--world-size") -> str:
    """Why a selection of kernels and cases has no point to run, for a one-line usage error
    (``world`` names where the world size was asked for: the option, or a suite's axis)."""
    worlds = sorted({c.world_size for c in cases})
    if not chosen:
        return "no kernel to run: `lattnbench list` shows them all"
    if worlds and worlds[0] > 1:
        names = single_rank(chosen, cases)
        parallel = [e.name for e in reg if e.sequence_parallel]
        return (f"nothing to run: {world} {','.join(map(str, worlds))} splits the sequence over ranks, and "
                f"{', '.join(names)} {'is' if len(names) == 1 else 'are'} not sequence parallel "
                f"(those that are: {', '.join(parallel) or 'none'})")
    from lattnbench.operators import family

    names = ", ".join(e.name for e in chosen)
    if all(c.initial_state for c in cases) and not any(family(e.family).has_state for e in chosen):
        return (f"nothing to run: {names} {'keeps' if len(chosen) == 1 else 'keep'} no state, so an initial "
                f"state leaves nothing to check; use --initial-state off or both")
    return f"nothing to run: {names} {'has' if len(chosen) == 1 else 'have'} nothing to measure at the cases asked for"


def only_kernels(tasks: list[Task], patterns: list[str], suite: str) -> list[Task]:
    """The tasks whose kernel matches one of ``patterns`` (names or shell globs); a pattern that
    matches none of the suite's kernels is a SpecError."""
    import fnmatch

    pats = split_patterns(patterns)
    names = sorted({t.kernel for t in tasks})
    for pat in pats:
        if not any(fnmatch.fnmatchcase(n, pat) for n in names):
            raise SpecError(f"--kernels {pat!r} matches no kernel of suite {suite!r} "
                            f"(kernels: {', '.join(names) or 'none'})")
    return [t for t in tasks if any(fnmatch.fnmatchcase(t.kernel, p) for p in pats)]
