"""One module per CLI command; each exposes ``register(app: typer.Typer)``.

Shared helpers for printing and exiting live in ``lattnbench.commands.common``.
"""
