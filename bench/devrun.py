"""The bookkeeping of a one-call device script: a timestamped log under $OUT, a results dict
rewritten as JSON after every measurement (a hang or a kill keeps what was done), a time budget,
and `guarded` measurements that record a failure in one line and let the rest go on."""
from __future__ import annotations

import json
import os
import time
import traceback
from collections.abc import Callable
from typing import Any


class DevRun:
    def __init__(self, name: str, budget_s: float, sections: tuple[str, ...]):
        self.t0 = time.time()
        self.budget_s = budget_s
        self.out = os.environ.get("OUT", "out")
        os.makedirs(self.out, exist_ok=True)
        self.name = name
        self.log_file = open(os.path.join(self.out, f"{name}.log"), "a")
        self.results: dict = {sec: {} for sec in sections}
        self.results["fail"] = []

    def elapsed(self) -> float:
        return time.time() - self.t0

    def over_budget(self) -> bool:
        return self.elapsed() > self.budget_s

    def log(self, *a: Any) -> None:
        msg = f"[{self.elapsed():6.1f}s] " + " ".join(str(x) for x in a)
        print(msg, flush=True)
        self.log_file.write(msg + "\n")
        self.log_file.flush()

    def dump(self) -> None:
        with open(os.path.join(self.out, f"{self.name}.json"), "w") as f:
            json.dump(self.results, f, indent=1)

    def fail(self, msg: str) -> None:
        self.results["fail"].append(msg)
        self.log("FAIL", msg)
        traceback.print_exc()

    def guarded(self, section: str, key: str, fn: Callable[[], Any], width: int = 48) -> Any:
        """Run one measurement: its value lands in results[section][key], or a one-line failure."""
        if self.over_budget():
            self.log(f"skip {section} {key}: over budget")
            return None
        try:
            val = fn()
            self.results.setdefault(section, {})[key] = val
            self.log(f"{section:5s} {key:{width}s} {val}")
            return val
        except Exception as exc:  # noqa: BLE001
            text = str(exc).strip()
            self.fail(f"{section} {key}: {type(exc).__name__}: {text.splitlines()[-1][:300] if text else ''}")
            return None
        finally:
            self.dump()

    def run_sections(self, table: dict[str, Callable[[], None]], names: list[str]) -> None:
        """Run the named sections in order (a section that raises is one failure line), then write
        the JSON and a closing line."""
        for name in names:
            try:
                table[name]()
            except Exception as exc:  # noqa: BLE001
                self.fail(f"section {name}: {type(exc).__name__}: {exc}"[:400])
        self.dump()
        self.log("done", len(self.results["fail"]), "failures")
