"""``lattnbench list``: every registered kernel, with availability and the reason when not."""
from __future__ import annotations

import json
import sys

import typer
from rich.table import Table

from lattnbench.commands.common import out

EXAMPLE = """Examples:

  lattnbench list

  lattnbench list --json | jq '.[] | select(.available) | .name'
"""


def register(app: typer.Typer) -> None:
    @app.command("list", epilog=EXAMPLE)
    def list_kernels(
        json_: bool = typer.Option(False, "--json", help="Print a JSON array of objects instead of a table."),
        device: str = typer.Option("auto", help="Judge availability for auto (CUDA when present), cuda or cpu."),
        kernel: list[str] | None = typer.Option(None, "--kernel", help="Also list a plugin package.module:function."),
    ) -> None:
        """Every registered kernel: family, framework, devices and availability (with the reason)."""
        from lattnbench.commands.sweep import setup

        dev, reg = setup(device if device != "cuda" else "auto", kernel)
        dev = device if device in ("cuda", "cpu") else dev
        items = []
        for e in reg:
            reason = e.available(dev)
            items.append({"name": e.name, "family": e.family, "framework": e.framework,
                          "devices": list(e.devices), "available": reason is None, "reason": reason,
                          "origin": e.origin, "reference": e.reference, "dtypes": list(e.dtypes),
                          "description": e.description})
        if json_:
            json.dump(items, sys.stdout, indent=1)
            sys.stdout.write("\n")
            return
        table = Table(title=f"kernels (availability on {dev})", title_justify="left")
        table.add_column("name", no_wrap=True, style="bold")
        for col in ("family", "framework", "devices", "available"):
            table.add_column(col)
        table.add_column("about", ratio=1)
        for it in items:
            avail = "[green]yes[/]" if it["available"] else f"[dim]no: {it['reason']}[/]"
            table.add_row(it["name"], it["family"], it["framework"], "/".join(it["devices"]), avail,
                          it["description"])
        out.print(table)
