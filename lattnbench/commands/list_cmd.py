"""``lattnbench list``: every registered kernel, whether it runs by default, and why not."""
from __future__ import annotations

import json
import sys

import typer

from lattnbench.commands import axes
from lattnbench.commands.common import out

EXAMPLE = """Examples:

  lattnbench list

  lattnbench list --json | jq '.[] | select(.default) | .name'
"""


def register(app: typer.Typer) -> None:
    @app.command("list", epilog=EXAMPLE)
    def list_kernels(
        json_: bool = typer.Option(False, "--json", help="Print a JSON array of objects instead of a table."),
        device: str = typer.Option("auto", help="Judge availability for auto (CUDA when present), cuda or cpu."),
        kernel: list[str] | None = typer.Option(None, "--kernel", help="Also list plugins package.module:function "
                                                "(repeated or comma-separated).", callback=axes.plugin_specs),
    ) -> None:
        """Every registered kernel: framework, devices, availability (with the reason) and defaults.

        A kernel marked default is timed by a plain speed or memory run on this device; check-grad
        checks every available bundled kernel; peers and plugins run when named.
        """
        from lattnbench.commands.sweep import setup
        from lattnbench.runner.select import pick_kernels
        from lattnbench.views.tables import kernel_table

        dev, reg = setup(device if device != "cuda" else "auto", kernel)
        dev = device if device in ("cuda", "cpu") else dev
        default = {e.name for e in pick_kernels(reg, None, dev)}
        items = []
        for e in reg:
            reason = e.available(dev)
            items.append({"name": e.name, "family": e.family, "framework": e.framework,
                          "devices": list(e.devices), "available": reason is None, "reason": reason,
                          "default": e.name in default, "origin": e.origin, "reference": e.reference,
                          "interpreted": dev == "cpu" and e.interpreted_on_cpu,
                          "dtypes": list(e.dtypes), "description": e.description})
        if json_:
            json.dump(items, sys.stdout, indent=1)
            sys.stdout.write("\n")
            return
        out.print(kernel_table(items, dev))
