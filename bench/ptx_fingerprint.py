"""PTX fingerprints of the Lightning Triton kernels: every config of the default autotune lists
(forward and each backward role) and the interpreter's fixed config, compiled ahead of time for
sm_90 (no GPU needed), at D = E = 128 bf16 with the launch flags of the common calls.

What it is for: a change to ``kernels/lightning/triton/`` that should not change the generated
code (a refactor, a comment, a renamed helper) proves it with two runs whose outputs are equal:

    python bench/ptx_fingerprint.py > after.txt                    # this checkout
    python bench/ptx_fingerprint.py --root OLD_CHECKOUT > before.txt
    diff before.txt after.txt

Use the Triton of the GPU machines (3.6; a hash is of one compiler's output). Each line names the
kernel, its config and flag variant, a hash of the PTX instruction stream (debug sections, line
info and their labels stripped) and the shared memory the kernel needs. ``body`` is the same hash
without the entry's parameter list, for a change that only adds or drops a kernel parameter.
``--multiset`` hashes the sorted instructions with register numbers erased instead (register
allocation and instruction order ignored: a weaker check for changes that reorder code).

The kernels are loaded from ``ROOT/kernels`` as ``lattnbench.kernels`` without importing the
harness, so any checkout works without installing it (torch and numpy must be importable). The
compile itself (signature, specialisation, sm_90 target) is ``lattnbench.static.triton_aot``'s,
the one ``lattnbench static`` uses, taken from this tool's checkout.
"""
from __future__ import annotations

import argparse
import hashlib
import importlib
import importlib.util
import os
import re
import sys
import types
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's lattnbench.static
from lattnbench.static import triton_aot  # noqa: E402  (imported before load_kernels swaps lattnbench)

D = E = 128
BF, F32, I32 = "*bf16", "*fp32", "*i32"
# flag variants: the default call (no initial state, final state returned and used), and every
# optional input at once (initial state, reverse, packed varlen: the pointer path of TR=3)
VARIANTS = {
    "plain": dict(REVERSE=False, HAS_H0=False, IS_VARLEN=False),
    "h0-rev-varlen": dict(REVERSE=True, HAS_H0=True, IS_VARLEN=True),
}


def load_kernels(root: Path):
    """lattnbench.kernels.lightning.triton.kernels of the checkout at ``root``, compiled for a GPU."""
    os.environ.pop("TRITON_INTERPRET", None)
    for name in [m for m in sys.modules if m == "lattnbench" or m.startswith("lattnbench.")]:
        del sys.modules[name]
    parent = types.ModuleType("lattnbench")
    parent.__path__ = [str(root / "lattnbench")]
    sys.modules["lattnbench"] = parent
    spec = importlib.util.spec_from_file_location("lattnbench.kernels", root / "kernels" / "__init__.py",
                                                  submodule_search_locations=[str(root / "kernels")])
    pkg = importlib.util.module_from_spec(spec)
    sys.modules["lattnbench.kernels"] = pkg
    spec.loader.exec_module(pkg)
    return importlib.import_module("lattnbench.kernels.lightning.triton.kernels")


def interp_config(K):
    """(BT, BV, num_warps, num_stages) of the interpreter's fixed launch (TR 0)."""
    mod = K
    if not hasattr(K, "INTERP_CONFIG"):
        mod = importlib.import_module("lattnbench.kernels.lightning.triton.configs")
    return tuple(mod.INTERP_CONFIG)


def _name(kind, role) -> str:
    return "fwd" if kind == "fwd" else f"bwd-{('dq', 'dk', 'dv')[role]}"


def jobs(K):
    """(kind, role, meta, num_warps, num_stages, variant) of every kernel to compile."""
    out = []
    interp = interp_config(K)
    for kind, tuned, roles in (("fwd", K.lightning_fwd, (None,)), ("bwd", K.lightning_bwd, (0, 1, 2))):
        cfgs = [(dict(c.kwargs), c.num_warps, c.num_stages, "") for c in tuned.configs]
        bt, bv, w, s = interp
        cfgs.append(({"BT": bt, "BV": bv, "TR": 0}, w, s, "interp"))
        for role in roles:
            for meta, w, s, tag in cfgs:
                for variant in VARIANTS:
                    out.append((kind, role, meta, w, s, variant + ("/" + tag if tag else "")))
    return out


def _types(kind, varlen):
    cu = I32 if varlen else F32  # without cu_seqlens the launch passes g (fp32) in its place
    t = dict(q=BF, k=BF, v=BF, h0=F32, g=F32, cu=cu, T="i32", H="i32", HKV="i32", scale="fp32",
             SHAPE_BUCKET="i32")
    if kind == "fwd":
        t.update(o=BF, ht=F32)
    else:
        t.update(do=BF, dht=F32, dx=BF, dh0=F32)
    return t


def normalise(ptx: str, multiset: bool) -> tuple[str, str]:
    """(instruction stream, the same without the entry's name and parameter list)."""
    text = ptx.split(".section\t.debug")[0]
    lines = [ln for ln in text.splitlines() if not re.match(r"\s*(\.loc|//|\.file|\$L__tmp\d+:)", ln)]
    lines = [re.sub(r"\$L__tmp\d+", "TMP", ln) for ln in lines]
    if multiset:
        lines = sorted(re.sub(r"%(r|rd|f|p|rs|hh|h|fd)[0-9]+", r"%\1", ln) for ln in lines)
    full = "\n".join(lines)
    start = next((i for i, ln in enumerate(lines) if ln.strip() == "{"), 0)
    body = "\n".join(ln for ln in lines[start:] if "_param_" not in ln)
    return full, body


_LOADED: dict = {}


def compile_one(args):
    """One AOT compile; returns its line of the report."""
    root, job, multiset = args
    kind, role, meta, w, s, variant = job
    if root not in _LOADED:  # one import per worker process
        _LOADED[root] = load_kernels(Path(root))
    K = _LOADED[root]
    fn = K.lightning_fwd_kernel if kind == "fwd" else K.lightning_bwd_kernel
    flags = dict(VARIANTS[variant.split("/")[0]])
    consts = dict(KD=D, VD=E, DOT_PREC="tf32", **flags, **meta)
    if kind == "fwd":
        consts.update(BK=D, STORE_HT=True)
    else:
        consts.update(BKD=D, BVD=E, ROLE=role, HAS_DHT=True)
    # 16-aligned tensors; T, H, HKV multiples of 16
    src = triton_aot.source(fn, _types(kind, flags["IS_VARLEN"]), consts, aligned=("T", "H", "HKV"))
    ck, _ = triton_aot.compile_sm90(src, num_warps=w, num_stages=s)
    full, body = normalise(ck.asm["ptx"], multiset)
    h = hashlib.sha1(full.encode()).hexdigest()[:12]
    hb = hashlib.sha1(body.encode()).hexdigest()[:12]
    cfg = f"BT={meta['BT']} BV={meta['BV']} TR={meta['TR']} w{w} s{s}"
    return f"{_name(kind, role):7s} {cfg:26s} {variant:20s} ptx={h} body={hb} shared={ck.metadata.shared}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1],
                    help="checkout whose kernels/ to compile (default: this one)")
    ap.add_argument("--multiset", action="store_true", help="hash sorted instructions, registers erased")
    ap.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1, help="parallel compiles")
    ap.add_argument("--list", action="store_true", help="print the kernels it would compile, compile nothing")
    args = ap.parse_args(argv)
    root = args.root.resolve()
    todo = jobs(load_kernels(root))
    if args.list:
        for kind, role, meta, w, s, variant in todo:
            print(f"{_name(kind, role):7s} BT={meta['BT']} BV={meta['BV']} TR={meta['TR']} w{w} s{s} {variant}")
        return 0
    with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        lines = list(pool.map(compile_one, [(str(root), j, args.multiset) for j in todo]))
    import triton

    print(f"# triton {triton.__version__}, sm_90, D=E={D} bf16, {len(lines)} kernels")
    for line in sorted(lines):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
