"""The ``lattnbench`` command line: one Typer app; each command lives in ``lattnbench.commands``.

Only Typer and the command modules are imported at start-up; torch and jax load lazily inside
the commands that need them, so ``lattnbench --help`` is instant.
"""
from __future__ import annotations

import importlib
import inspect

import typer


def _flags_take_no_value() -> None:
    """Help shows no type beside a flag: Typer's rich help prints ``<bool>`` there, which reads as
    if ``--json true`` were the way to write it (click then refuses the ``true``)."""
    from typer.core import TyperOption

    shown = getattr(TyperOption, "display_type_rich", None)
    if shown is None:  # a Typer before 0.15 renders its help otherwise and needs no patch
        return

    def display_type_rich(self, ctx):
        if self.is_flag and not self.count:
            return None
        return shown(self, ctx)

    TyperOption.display_type_rich = display_type_rich  # type: ignore[method-assign]


_flags_take_no_value()

app = typer.Typer(
    name="lattnbench",
    help="How fast, how much memory, and is it right: benchmark and check linear-attention kernels "
    "(Lightning Attention, GLA, the gated delta rule) against FlashAttention, fla and fp64 references.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)

#: command modules, in the order ``--help`` lists them; each defines ``register(app)``
COMMAND_MODULES = ("speed", "memory", "check_grad", "run", "gate", "compare", "static", "report", "plot", "list_cmd",
                   "env_cmd",
                   "doctor")

for _name in COMMAND_MODULES:
    importlib.import_module(f"lattnbench.commands.{_name}").register(app)


def reflowed(doc: str) -> str:
    """A docstring's paragraphs with their line breaks removed. Typer's rich help keeps a
    paragraph's breaks, so lines wrapped at the source's width broke again at the terminal's."""
    return "\n\n".join(" ".join(p.split()) for p in inspect.cleandoc(doc).split("\n\n"))


for _info in app.registered_commands:
    if _info.help is None and _info.callback is not None and _info.callback.__doc__:
        _info.help = reflowed(_info.callback.__doc__)


def main() -> None:
    """Console-script entry point: usage errors become one line on stderr with exit status 2."""
    import sys

    from typer import _click  # the click Typer runs on (bundled in recent Typer)
    from typer.exceptions import Abort

    try:
        code = app(standalone_mode=False)
    except _click.exceptions.ClickException as exc:  # usage errors: exit 2
        print(f"error: {exc.format_message()}", file=sys.stderr)
        sys.exit(exc.exit_code)
    except Abort:
        print("aborted", file=sys.stderr)
        sys.exit(130)
    sys.exit(code if isinstance(code, int) else 0)
