"""AOT-compile the Lightning kernels for sm_90 (no GPU needed) and print a hash of each PTX
instruction stream (debug labels and line info stripped) with its shared memory, to show that a
refactor leaves the generated code unchanged: run before and after, diff the outputs.
AOT_MULTISET=1 compares the multiset of instructions instead (register numbers and order ignored).

    TRITON_DEFAULT_FP_FUSION=1 python3 bench/triton_aot_ptx.py > before.txt
"""
import hashlib
import os
import re

os.environ.pop("TRITON_INTERPRET", None)
import triton  # noqa: E402
from triton.compiler import ASTSource
from triton.backends.compiler import GPUTarget
from lattnbench.kernels.triton.lightning import kernels as K
from lattnbench.kernels.triton.lightning import lookback as L

tgt = GPUTarget("cuda", 90, 32)

def comp(fn, types, consts, opts):
    names = fn.arg_names
    for name, default in (("TR", 0), ("TMA", False), ("PROBE", 0)):  # constexprs added later, at their defaults
        if name in names and name not in consts:
            consts = dict(consts, **{name: default})
    sig = dict(types)
    for k in consts: sig[k] = "constexpr"
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n, t in types.items() if t.startswith("*")}
    src = ASTSource(fn, sig, constexprs={(names.index(k),): v for k, v in consts.items()}, attrs=attrs)
    ck = triton.compile(src, target=tgt, options=opts)
    ptx = ck.asm["ptx"]
    body = ptx.split(".section\t.debug")[0]
    lines = [l for l in body.splitlines() if not re.match(r"\s*(\.loc|//|\.file|\$L__tmp\d+:)", l)]
    body = "\n".join(re.sub(r"\$L__tmp\d+", "TMP", l) for l in lines)
    if os.environ.get("AOT_MULTISET"):  # register numbers and instruction order ignored
        body = "\n".join(sorted(re.sub(r"%(r|rd|f|p|rs|hh|h)[0-9]+", r"%\1", l) for l in body.splitlines()))
    h = hashlib.sha1(body.encode()).hexdigest()[:12]
    return h, ck.metadata.shared

bf = "*bf16"; f32 = "*fp32"; i32 = "*i32"
common = dict(KD=128, VD=128, REVERSE=False, HAS_H0=True, IS_VARLEN=False, DOT_PREC="tf32")
fwd_types = dict(q=bf, k=bf, v=bf, h0=f32, g=f32, cu=i32, T="i32", H="i32", HKV="i32", scale="fp32", SHAPE_BUCKET="i32", o=bf, ht=f32)
for rev in (False, True):
    for var in (False, True):
        c = dict(common, BK=128, STORE_HT=True, BT=64, BV=64, PROBE=0, REVERSE=rev, IS_VARLEN=var)
        print("fwd", rev, var, comp(K.lightning_fwd_kernel, fwd_types, c, dict(num_warps=4, num_stages=2)))
bwd_types = dict(q=bf, k=bf, v=bf, do=bf, h0=f32, dht=f32, g=f32, cu=i32, T="i32", H="i32", HKV="i32", scale="fp32", SHAPE_BUCKET="i32", dx=bf, dh0=f32)
for role in (0, 1, 2):
    c = dict(common, BKD=128, BVD=128, ROLE=role, HAS_DHT=True, BT=64, BV=64, REVERSE=True)
    print("bwd", role, comp(K.lightning_bwd_kernel, bwd_types, c, dict(num_warps=4, num_stages=2)))
one_types = dict(q=bf, k=bf, v=bf, do=bf, h0=f32, dht=f32, g=f32, cu=i32, T="i32", H="i32", HKV="i32", scale="fp32", SHAPE_BUCKET="i32", dq=bf, dk=bf, dv=bf, dh0=f32)
c = dict(common, BKD=128, BVD=128, ROLE=3, HAS_DHT=True, BT=64, BV=64, REVERSE=True)
print("bwd one", comp(K.lightning_bwd_one_kernel, one_types, c, dict(num_warps=4, num_stages=2)))
dkdv_types = dict(q=bf, k=bf, v=bf, do=bf, dht=f32, g=f32, cu=i32, T="i32", H="i32", HKV="i32", scale="fp32", SHAPE_BUCKET="i32", DK_STRIDE="i32", dk=bf, dv=bf, dh0=f32)
c = dict(common, BKD=128, HAS_DHT=True, BV=128, BT=64, TRANS=False, IS_VARLEN=True)
print("dkdv", comp(K.lightning_bwd_dkdv_kernel, dkdv_types, c, dict(num_warps=8, num_stages=2)))
lb_types = dict(q_ptr=bf, k_ptr=bf, v_ptr=bf, h0_ptr=f32, g_ptr=f32, T="i32", H="i32", HKV="i32", scale="fp32", NH="i32", N_SEG="i32", N_V="i32", o_ptr=bf, ht_ptr=f32, p_ptr=f32, flag_ptr=i32)
for rev in (False, True):
    c = dict(KD=128, VD=128, BK=128, BV=64, BT=64, NSUB=4, REVERSE=rev, HAS_H0=True, STORE_HT=True, DOT_PREC="tf32", RING=2)
    print("lookback", rev, comp(L._lookback_fwd_kernel, lb_types, c, dict(num_warps=4, num_stages=2)))
