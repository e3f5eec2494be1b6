"""``lattnbench doctor``: the machine, its ceilings and clocks, and a timer self-check."""
from __future__ import annotations

import json

import typer
from rich.table import Table

from lattnbench.commands.common import out

EXAMPLE = """Examples:

  lattnbench doctor

  lattnbench doctor --json | jq '.checks[] | select(.verdict != "ok")'
"""

_STYLE = {"ok": "green", "DISAGREE": "bold red", "missing": "bold red", "noisy": "yellow", "short": "yellow",
          "info": "dim"}
_VERDICT = {
    "ok": "[green]ok[/]: the timers agree within tolerance",
    "disagree": "[bold red]DISAGREE[/]: timers differ beyond tolerance; speed tables from here are suspect",
    "unmeasured": "[bold red]UNMEASURED[/]: a timer the check needs did not run on this GPU",
    "noisy": "[bold red]NOISY[/]: the clocks moved too much between rounds to judge any timer; rerun on a quiet GPU",
    "info": "info: nothing was judged here (no GPU, or every reference call under 0.5 ms)",
}


def _ms(v: float | None) -> str:
    from lattnbench.views.rows import sig3

    return "—" if v is None else sig3(v)


def _facts(d) -> Table:
    from lattnbench.views.tables import table as make_table

    t = make_table("lattnbench doctor", 2)
    t.show_header = False
    t.add_column(style="bold", no_wrap=True)
    t.add_column(overflow="fold")
    m = d.machine
    extra = f" ({m['cores']} cores)" if m.get("cores") else (f" ×{m['gpu_count']}" if m.get("gpu_count", 1) > 1 else "")
    t.add_row("machine", f"{m.get('kind', '?')}: {m.get('name') or 'unknown'}{extra}")
    c = d.ceilings
    t.add_row("ceilings", f"copy {c['copy_gbps']:.0f} GB/s · bf16 {c['matmul_tflops']:.0f} TFLOP/s"
              if c else f"— {d.ceilings_reason}")
    s = (d.clocks or {}).get("sample")
    if s and "sm_mhz" in s:
        t.add_row("clocks", f"SM {s['sm_mhz']}/{s['sm_max_mhz']} MHz · mem {s['mem_mhz']} MHz · "
                  f"{s['power_w']} W · {s['temp_c']} °C" + (" · THROTTLED" if s.get("throttled") else ""))
    else:
        t.add_row("clocks", f"— {(s or {}).get('error') or (d.clocks or {}).get('reason')}")
    return t


def _timers(d) -> Table:
    from lattnbench.views.tables import table as make_table
    from lattnbench.measure.doctor import READINGS

    t = make_table("timers on the reference kernels (ms, median)", 2,
               caption="\n".join(f"{r['name']}: {r['what']}" for r in d.references))
    t.add_column("reference", no_wrap=True)
    for name in READINGS:
        t.add_column(name, justify="right", no_wrap=True)
    for r in d.references:
        t.add_row(r["name"], *[_ms(r["timers"].get(name, {}).get("ms")) for name in READINGS])
    return t


def _checks(d) -> Table:
    from lattnbench.views.tables import table as make_table

    t = make_table("checks", 2)
    for col, just in (("reference", "left"), ("timers", "left"), ("a/b − 1", "right"), ("bound", "right"),
                      ("verdict", "left")):
        t.add_column(col, justify=just, no_wrap=True)  # type: ignore[arg-type]
    for c in d.checks:
        style = _STYLE.get(c.verdict, "")
        t.add_row(c.reference, f"{c.a} / {c.b}", "—" if c.diff is None else f"{c.diff:+.1%}",
                  "—" if c.bound is None else f"±{c.bound:.0%}", f"[{style}]{c.verdict}[/]" if style else c.verdict)
    return t


def register(app: typer.Typer) -> None:
    @app.command("doctor", epilog=EXAMPLE)
    def doctor(json_: bool = typer.Option(False, "--json", help="Print one JSON object instead of tables.")) -> None:
        """The machine, its ceilings and clocks, and a timer self-check on fixed reference kernels.

        GPU: a bf16 matmul and a device copy, timed by every timer and by do_bench.

        device vs do_bench within 3 %, graph vs device within 5 % (calls >= 0.5 ms), the timers
        taking turns in 5 rounds; a reference whose rounds spread wider than that is 'noisy'.

        Exit 1 when timers disagree, one the check needs cannot run, or every reference of a pair
        of timers was noisy; 0 otherwise.

        CPU: the host-clock timers run for information; exit 0.
        """
        from lattnbench.measure import doctor as doc

        d = doc.diagnose(doc.detect_probe())
        if json_:
            typer.echo(json.dumps(d.to_json(), indent=1, default=str))
        else:
            for table in (_facts(d), _timers(d), _checks(d)):
                out.print(table)
                out.print()
            for c in d.checks:
                if c.verdict in ("DISAGREE", "noisy", "missing", "short"):
                    out.print(f"  {c.reference} {c.a}/{c.b}: {c.why}", highlight=False)
            for note in d.notes:
                out.print(f"note: {note}", highlight=False)
            out.print(f"verdict: {_VERDICT[d.verdict]}", highlight=False)
        raise typer.Exit(d.exit_code)
