"""The environment block every results file carries: machine, driver, versions, commit, time."""
from __future__ import annotations

import datetime as dt
import importlib.metadata as md
import os
import platform
import re
import subprocess
from pathlib import Path

PACKAGES = ("lattnbench", "torch", "triton", "jax", "jaxlib", "jax-triton", "numpy",
            "fla-core", "lightning-attn", "flash-attn", "ejkernel")


def package_version(pkg: str) -> str | None:
    try:
        return md.version(pkg)
    except md.PackageNotFoundError:
        return None


def _run(cmd: list[str], cwd: str | None = None) -> str | None:
    try:
        out = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def commit() -> str | None:
    """The project's git commit (with ``-dirty`` when the tree has changes), if in a checkout.

    ``LATTNBENCH_COMMIT`` overrides it: a copied working tree (e.g. the lent GPU machine's) can
    carry a stale ``.git``, so device scripts pass the commit they were launched from.
    """
    forced = os.environ.get("LATTNBENCH_COMMIT", "").strip()
    if forced:
        return forced
    here = str(Path(__file__).resolve().parent)
    sha = _run(["git", "rev-parse", "--short=12", "HEAD"], cwd=here)
    if sha and _run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=here):
        sha += "-dirty"
    return sha


# Environment variables that change what the kernels run (backward path, autotune lists, Triton
# and JAX options, the harness's autotune mode): recorded with every result, so a run made under a
# knob says so.
# The kernels' and the harness's own switches (report lines name these; Triton's, fla's and JAX's
# options stay in the JSON)
OWN_KNOB_PREFIXES = ("LIGHTNING_TRITON_", "LIGHTNING_GLUON_", "GLA_GLUON_", "GLA_JAX_", "GLA_INTRA_",
                     "LATTNBENCH_AUTOTUNE")
KNOB_PREFIXES = OWN_KNOB_PREFIXES + ("TRITON_", "FLA_", "JAX_", "XLA_")


def knobs() -> dict[str, str]:
    """The set environment variables that start with one of KNOB_PREFIXES, sorted by name."""
    return {k: os.environ[k] for k in sorted(os.environ) if k.startswith(KNOB_PREFIXES)}


def gpu_info() -> dict:
    """GPU name, count, memory, driver and CUDA runtime, via torch when it sees a GPU."""
    try:
        import torch
    except ImportError:
        return {}
    if not torch.cuda.is_available():
        return {}
    props = torch.cuda.get_device_properties(0)
    driver = _run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])
    uuid = getattr(props, "uuid", None)  # tells apart two cards of one model (a resumed run)
    return {"gpu": props.name, "gpu_count": torch.cuda.device_count(),
            "gpu_memory_gb": round(props.total_memory / 1e9, 1), "sm_count": props.multi_processor_count,
            "gpu_uuid": str(uuid) if uuid is not None else None,
            "driver": driver.splitlines()[0] if driver else None, "cuda": torch.version.cuda}


def collect(with_gpu: bool = True) -> dict:
    """The env block: host, CPU, GPU (when asked and present), package versions, commit, time."""
    env = {
        "time": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "host": platform.node(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu": cpu_name(),
        "cpu_count": os.cpu_count(),
        "commit": commit(),
        "versions": {p: package_version(p) for p in PACKAGES},
        "triton_interpret": os.environ.get("TRITON_INTERPRET") == "1",
        "knobs": knobs(),
    }
    if with_gpu:
        env.update(gpu_info())
    return env


def machine_name(env: dict) -> str:
    """Folder name under results/: ``h200`` for an NVIDIA H200, ``cpu`` without a GPU."""
    gpu = env.get("gpu")
    if not gpu:
        return "cpu"
    m = re.search(r"([A-Z]+\d+[A-Za-z]*)", gpu.replace("NVIDIA", ""))
    return (m.group(1) if m else re.sub(r"\W+", "-", gpu)).lower()
