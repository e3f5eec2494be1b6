"""What every command shares: one-line errors with the right exit code, and the consoles."""
from __future__ import annotations

from typing import NoReturn

import typer
from rich.console import Console

#: tables and results go to stdout, progress and errors to stderr
out = Console()
err = Console(stderr=True)

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2


def die(message: str, code: int = EXIT_USAGE) -> NoReturn:
    """Print ``error: message`` on one line to stderr and exit (2 = usage error).

    The message is escaped: messages quote TOML sections (``[speed]``) and paths that rich would
    otherwise read as markup and drop.
    """
    from rich.markup import escape

    err.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)
