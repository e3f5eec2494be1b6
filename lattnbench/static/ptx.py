"""PTX text → instruction counts: all instructions, those inside the chunk loop (and its barriers),
and the mma ones.

How the chunk loop is found: PTX marks a loop by a label (``$L__BB0_7:``) and a branch back to
it from further down (``@%p1 bra $L__BB0_7;``). Each back-branch spans the instructions between
its label and itself; the chunk loop is the widest span that holds no other span. The Lightning
kernels and the GLA kernels' torch launches have one loop over chunks per pass (everything inside
a chunk is unrolled by Triton), so that is the loop; the GLA bridge's launches hold a second copy
with the exact path, whose token-by-token loops sit inside it, so the widest innermost span is
the chunk loop every row takes. A software-pipelined loop keeps its steady state between one label
and one back-branch, its prologue and epilogue outside it.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

_LABEL = re.compile(r"^\s*(\$L__\w+):")
_BRANCH = re.compile(r"\bbra(?:\.uni)?\s+(\$L__\w+)\s*;")
_MMA = re.compile(r"\b(?:wgmma\.mma_async|mma\.sync|mma\.sp)\b")
_WGMMA = re.compile(r"\bwgmma\.mma_async\b")
_BARRIER = re.compile(r"\b(?:bar|barrier)\.sync\b")
_NOT_INSTR = re.compile(r"^\s*(?:\.|//|\{|\}|\$L__|\)|\(|$)")


@dataclass(frozen=True)
class PtxCounts:
    """Instruction counts of one kernel's PTX."""

    instructions: int
    loop_instructions: int
    loop_barriers: int  # bar.sync in the chunk loop: each stops every warp it names until all arrive
    mma: int    # mma.sync, mma.sp and wgmma.mma_async
    wgmma: int  # of those, the Hopper warpgroup ones (a fall-back to mma.sync keeps mma, loses these)


def instructions(ptx: str) -> list[str]:
    """The instruction lines of the PTX, labels kept (they mark loop heads), directives, comments,
    braces and the debug sections dropped."""
    text = ptx.split(".section\t.debug")[0]
    lines = []
    for raw in text.splitlines():
        line = raw.split("//")[0].rstrip()
        if _LABEL.match(line):
            lines.append(line.strip())
        elif line.strip() and not _NOT_INSTR.match(line):
            lines.append(line.strip())
    return lines


def is_instruction(line: str) -> bool:
    """Whether a line from ``instructions`` is an instruction (not a label)."""
    return not _LABEL.match(line)


def loop_span(lines: list[str]) -> tuple[int, int] | None:
    """(first, last) line index of the widest label..back-branch span holding no other such span,
    or None without a loop."""
    where = {m.group(1): i for i, ln in enumerate(lines) if (m := _LABEL.match(ln))}
    spans = [(where[m.group(1)], i) for i, ln in enumerate(lines)
             if (m := _BRANCH.search(ln)) and m.group(1) in where and where[m.group(1)] < i]
    innermost = [(a, b) for a, b in spans if not any(a <= c and d <= b and (c, d) != (a, b) for c, d in spans)]
    best: tuple[int, int] | None = None
    best_n = -1
    for start, end in innermost:
        n = sum(1 for x in lines[start:end + 1] if is_instruction(x))
        if n > best_n:
            best, best_n = (start, end), n
    return best


def count(ptx: str) -> PtxCounts:
    """All instructions, those in the chunk loop and its barriers (0 without a loop), the mma/wgmma
    ones and the wgmma ones."""
    lines = instructions(ptx)
    instr = [ln for ln in lines if is_instruction(ln)]
    span = loop_span(lines)
    body = [] if span is None else [ln for ln in lines[span[0]:span[1] + 1] if is_instruction(ln)]
    return PtxCounts(instructions=len(instr), loop_instructions=len(body),
                     loop_barriers=sum(1 for ln in body if _BARRIER.search(ln)),
                     mma=sum(1 for ln in instr if _MMA.search(ln)),
                     wgmma=sum(1 for ln in instr if _WGMMA.search(ln)))
