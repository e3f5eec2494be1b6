"""``lattnbench env``: what results files record about the machine and the software."""
from __future__ import annotations

import json
import sys

import typer
from rich.table import Table

from lattnbench.commands.common import out


def register(app: typer.Typer) -> None:
    @app.command("env", epilog="Example:\n\n  lattnbench env --json")
    def env(json_: bool = typer.Option(False, "--json", help="Print the env block as JSON.")) -> None:
        """GPU, driver, CUDA, versions of torch / triton / jax / jaxlib / jax-triton, CPU, commit."""
        from lattnbench.env import collect

        block = collect()
        if json_:
            json.dump(block, sys.stdout, indent=1)
            sys.stdout.write("\n")
            return
        table = Table(show_header=False, title="environment", title_justify="left")
        table.add_column(style="bold")
        table.add_column()
        for key, value in block.items():
            if key == "versions":
                for pkg, ver in value.items():
                    table.add_row(pkg, ver or "[dim]not installed[/]")
            else:
                table.add_row(key, "—" if value is None else str(value))
        out.print(table)
