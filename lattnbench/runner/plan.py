"""The unit of work: a ``Task`` is one point (one kernel on one case, one kind of measurement).

Commands and suites turn into a list of tasks; the runner decides where each runs (in this
process or in a worker) and in which order. Tasks travel to workers as JSON.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

from lattnbench.spec import Case

KINDS = ("speed", "memory", "check-grad", "check-rows", "ceilings")
METRIC = {"speed": "time_ms", "memory": "peak_mb", "check-grad": "err_ratio", "check-rows": "err_ratio"}


@dataclass(frozen=True)
class Task:
    """One point: ``kind`` of measurement of ``kernel`` on ``case`` (modes for speed / memory).

    ``run`` numbers the repetition of a speed point under ``--repeat``; ``budget`` is the
    seconds of samples per timer; ``seed`` the check-grad inputs' seed; ``settle_c`` the GPU
    temperature a speed point waits for before it starts (None: no wait); ``breakdown`` has a
    speed point also profile the kernels each call launches.
    """

    kind: str
    kernel: str = ""
    case: Case | None = None
    modes: tuple[str, ...] = ()
    budget: float = 0.5
    seed: int = 0
    run: int = 0
    settle_c: float | None = None  # speed: wait for the GPU to cool to this temperature first
    breakdown: bool = False  # speed: each timed mode's kernels (measure.breakdown)
    tolerance: str = "lattnbench"  # check-grad: the tolerance table that judges each err
    autotune: str = "tuned"  # check-grad: "first" takes every autotuner's first config that fits

    @property
    def metric(self) -> str:
        return METRIC[self.kind]

    @property
    def times(self) -> bool:
        """True for the tasks whose numbers depend on what ran before them in a process."""
        return self.kind in ("speed", "memory")

    def label(self) -> str:
        run = f" run {self.run + 1}" if self.run else ""
        return f"{self.kind} {self.kernel} {self.case.label()}{run}" if self.case else self.kind

    def to_json(self) -> dict:
        d = asdict(self)
        d["case"] = None if self.case is None else {**asdict(self.case),
                                                    "varlen": list(self.case.varlen) if self.case.varlen else None}
        d["modes"] = list(self.modes)
        return d

    @classmethod
    def from_json(cls, d: dict) -> "Task":
        c = d.get("case")
        case = None if c is None else Case(**{**c, "varlen": tuple(c["varlen"]) if c.get("varlen") else None})
        return cls(kind=d["kind"], kernel=d.get("kernel", ""), case=case, modes=tuple(d.get("modes", ())),
                   budget=float(d.get("budget", 0.5)), seed=int(d.get("seed", 0)), run=int(d.get("run", 0)),
                   settle_c=None if d.get("settle_c") is None else float(d["settle_c"]),
                   breakdown=bool(d.get("breakdown", False)),
                   tolerance=str(d.get("tolerance", "lattnbench")), autotune=str(d.get("autotune", "tuned")))


@dataclass
class Plan:
    """What a command asked for: the tasks of one run, and how many runs of the speed tasks."""

    tasks: list[Task] = field(default_factory=list)
    repeat: int = 1
