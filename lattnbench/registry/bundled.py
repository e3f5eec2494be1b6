"""Registry entries for the bundled kernels and the FlashAttention baselines.

Each loader imports its kernel lazily and returns the family's uniform signature (see
``lattnbench.registry``). Adding a bundled kernel means adding one entry here.
"""
from __future__ import annotations

from collections.abc import Callable

from lattnbench.registry.entry import KernelEntry

LINEAR_FEATURES = frozenset({"initial_state", "reverse", "varlen", "gqa", "dv", "any_dim"})
#: quadratic references stop here (B·H·T² scores, fp64: 2^31 scores ≈ 16 GiB)
QUADRATIC_LIMIT = 2**28


# ---- lightning -------------------------------------------------------------------------------

def _lightning_naive_torch() -> Callable:
    from lattnbench.kernels.naive.torch_ref import lightning_naive

    def fn(q, k, v, gamma, scale, initial_state, reverse, cu_seqlens):
        return lightning_naive(q, k, v, gamma, scale, initial_state, reverse, cu_seqlens)
    return fn


def _lightning_triton() -> Callable:
    from lattnbench.kernels.lightning.triton import lightning_attn_triton

    def fn(q, k, v, gamma, scale, initial_state, reverse, cu_seqlens):
        return lightning_attn_triton(q, k, v, gamma=gamma, scale=scale, initial_state=initial_state,
                                     output_final_state=True, reverse=reverse, cu_seqlens=cu_seqlens)
    return fn


def _lightning_gluon() -> Callable:
    from lattnbench.kernels.lightning.gluon import lightning_attn_gluon

    def fn(q, k, v, gamma, scale, initial_state, reverse, cu_seqlens):
        return lightning_attn_gluon(q, k, v, gamma=gamma, scale=scale, initial_state=initial_state,
                                    output_final_state=True, reverse=reverse, cu_seqlens=cu_seqlens)
    return fn


def _gluon_device(device: str) -> str | None:
    """Why ``lightning/gluon`` cannot run on ``device`` (no Gluon, not an sm_90 GPU), or None."""
    import torch

    from lattnbench.kernels.lightning.gluon import device_reason

    if device == "cuda" and not torch.cuda.is_available():
        return "no CUDA device visible"
    return device_reason(torch.device(device))


#: torch.compile specializes per shape and grad mode; a sweep in one worker makes more graphs than
#: Dynamo's default limit of 8, past which it would run the function eagerly without a word
COMPILE_RECOMPILE_LIMIT = 256


def _dynamo_config():
    """Dynamo's config with the recompile limit raised for a sweep (``COMPILE_RECOMPILE_LIMIT``)."""
    import torch._dynamo

    config = torch._dynamo.config
    for knob in ("recompile_limit", "cache_size_limit"):
        if hasattr(config, knob):
            setattr(config, knob, max(getattr(config, knob), COMPILE_RECOMPILE_LIMIT))
    return config


def _lightning_triton_compiled(mode: str | None) -> Callable[[], Callable]:
    """``lightning/triton`` under ``torch.compile(fullgraph=True, dynamic=False)``: Dynamo traces the
    checks, the kernels are one custom op per direction (``lattnbench::lightning_fwd`` / ``_bwd``)."""
    def loader() -> Callable:
        import torch

        _dynamo_config()
        return torch.compile(_lightning_triton(), fullgraph=True, dynamic=False, mode=mode)
    return loader


def compiled_step(run: Callable, mode: str | None = "reduce-overhead", backend: str = "inductor") -> Callable:
    """A training step's fwd+bwd as one compiled graph: ``run`` (the forward, then autograd.grad)
    under ``torch.compile(fullgraph=True)`` with Dynamo tracing ``autograd.grad``, so that with
    ``mode="reduce-overhead"`` one CUDA graph replays the whole step. Its inputs are marked static
    (fixed addresses, as activations made inside a compiled model's graph are), so the graph copies
    none of them in. Needs a torch whose Dynamo has ``trace_autograd_ops``."""
    import torch

    from lattnbench.errors import Unsupported

    config = _dynamo_config()
    if not hasattr(config, "trace_autograd_ops"):
        raise Unsupported(f"torch {torch.__version__}'s Dynamo cannot trace autograd.grad (no trace_autograd_ops)")
    config.trace_autograd_ops = True  # the worker's process: only a compiled region calling autograd.grad sees it
    compiled = torch.compile(run, fullgraph=True, dynamic=False, mode=mode, backend=backend)
    marked: set[int] = set()

    def step(*args):
        fresh = [a for a in args if isinstance(a, torch.Tensor) and id(a) not in marked]
        for a in fresh:
            torch._dynamo.mark_static_address(a)
            marked.add(id(a))
        return compiled(*args)
    return step


def _lightning_sp(comm: str) -> Callable[[], Callable]:
    """This rank's shard through the sequence-parallel step over the default process group."""
    def loader() -> Callable:
        from lattnbench.kernels.lightning.parallel.lightning_sp import lightning_attn_sp

        def fn(q, k, v, gamma, scale, initial_state, reverse, cu_seqlens):
            return lightning_attn_sp(q, k, v, gamma, scale, initial_state, reverse, cu_seqlens, comm=comm)
        return fn
    return loader


def _lightning_jax_sp() -> Callable:
    from lattnbench.kernels.lightning.parallel.jax_sp import lightning_attn_shard_map

    def fn(q, k, v, gamma, scale, initial_state, reverse, cu_seqlens):
        if cu_seqlens is not None:
            raise ValueError("lightning/jax-sp takes no packed varlen (one SPMD program per shard layout)")
        return lightning_attn_shard_map(q, k, v, gamma, scale, initial_state, reverse)
    return fn


def _jax_lightning(impl: str) -> Callable[[], Callable]:
    def loader() -> Callable:
        from lattnbench.kernels.jax import recurrent

        def fn(q, k, v, gamma, scale, initial_state, reverse, cu_seqlens):
            return recurrent(q, k, v, g_gamma=gamma, softmax_scale=scale, initial_state=initial_state,
                             reverse=reverse, cu_seqlens=cu_seqlens, impl=impl)
        return fn
    return loader


# ---- gla -------------------------------------------------------------------------------------

def _gla_naive_torch() -> Callable:
    from lattnbench.kernels.naive.torch_ref import recurrent_naive

    def fn(q, k, v, g, scale, initial_state, reverse, cu_seqlens):
        return recurrent_naive(q, k, v, g=g, scale=scale, initial_state=initial_state,
                               reverse=reverse, cu_seqlens=cu_seqlens)
    return fn


def _jax_gla(impl: str) -> Callable[[], Callable]:
    def loader() -> Callable:
        from lattnbench.kernels.jax import recurrent_gla

        def fn(q, k, v, g, scale, initial_state, reverse, cu_seqlens):
            return recurrent_gla(q, k, v, g=g, softmax_scale=scale, initial_state=initial_state,
                                 reverse=reverse, cu_seqlens=cu_seqlens, impl=impl)
        return fn
    return loader


def _gla_triton() -> Callable:
    from lattnbench.kernels.gla.triton import gla_triton

    def fn(q, k, v, g, scale, initial_state, reverse, cu_seqlens):
        return gla_triton(q, k, v, g, scale=scale, initial_state=initial_state, output_final_state=True,
                          reverse=reverse, cu_seqlens=cu_seqlens)
    return fn


def _gla_jax_triton() -> Callable:
    from lattnbench.kernels.gla.triton.jax_bridge import gla_jax_triton

    def fn(q, k, v, g, scale, initial_state, reverse, cu_seqlens):
        return gla_jax_triton(q, k, v, g, scale=scale, initial_state=initial_state, reverse=reverse,
                              cu_seqlens=cu_seqlens)
    return fn


# ---- gdn (gated delta rule) ------------------------------------------------------------------

#: what the GDN kernels handle: no reverse (none of them, nor the reference, has one)
GDN_FEATURES = LINEAR_FEATURES - {"reverse"}


def _no_reverse(name: str, reverse) -> None:
    if reverse:
        from lattnbench.errors import Unsupported

        raise Unsupported(f"{name} has no reverse")


def _gdn_naive_torch() -> Callable:
    from lattnbench.kernels.gdn.naive import gdn_naive

    def fn(q, k, v, g, beta, scale, initial_state, reverse, cu_seqlens):
        _no_reverse("gdn_naive", reverse)
        cu = None if cu_seqlens is None else [int(c) for c in cu_seqlens]
        return gdn_naive(q, k, v, g, beta, scale=scale, initial_state=initial_state, output_final_state=True,
                         cu_seqlens=cu)
    return fn


def _jax_gdn(impl: str) -> Callable[[], Callable]:
    """``gdn_chunked`` / ``gdn_recurrent`` at chunk 64; cu_seqlens stays a host array (they lay
    packed sequences out chunk-aligned, which needs the offsets concrete)."""
    def loader() -> Callable:
        import numpy as np

        if impl == "chunked":
            from lattnbench.kernels.gdn.jax.gdn_chunked import gdn_chunked as kernel
        else:
            from lattnbench.kernels.gdn.jax.gdn_recurrent import gdn_recurrent as kernel

        def fn(q, k, v, g, beta, scale, initial_state, reverse, cu_seqlens):
            _no_reverse(f"gdn_{impl}", reverse)
            cu = None if cu_seqlens is None else np.asarray(cu_seqlens)
            return kernel(q, k, v, g, beta, scale=scale, initial_state=initial_state, output_final_state=True,
                          cu_seqlens=cu)
        return fn
    return loader


def _gdn_triton() -> Callable:
    from lattnbench.kernels.gdn.triton import gdn_triton

    def fn(q, k, v, g, beta, scale, initial_state, reverse, cu_seqlens):
        _no_reverse("gdn/triton", reverse)
        return gdn_triton(q, k, v, g, beta, scale=scale, initial_state=initial_state, output_final_state=True,
                          cu_seqlens=cu_seqlens)
    return fn


# ---- softmax baselines (causal) --------------------------------------------------------------

def _softmax_naive_torch() -> Callable:
    from lattnbench.kernels.naive.torch_ref import softmax_naive

    def fn(q, k, v, scale):
        return softmax_naive(q, k, v, scale, causal=True)
    return fn


def _sdpa(backend: str) -> Callable[[], Callable]:
    """PyTorch SDPA pinned to one backend (FlashAttention-2, cuDNN, memory-efficient)."""
    def loader() -> Callable:
        import torch
        from torch.nn.attention import SDPBackend, sdpa_kernel

        chosen = getattr(SDPBackend, backend)
        attend = torch.nn.functional.scaled_dot_product_attention

        def fn(q, k, v, scale):
            gqa = k.shape[2] != q.shape[2]
            with sdpa_kernel(chosen):
                o = attend(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                           is_causal=True, scale=scale, enable_gqa=gqa)
            return o.transpose(1, 2)
        return fn
    return loader


def _jax_dpa(implementation: str) -> Callable[[], Callable]:
    def loader() -> Callable:
        import jax

        def fn(q, k, v, scale):
            return jax.nn.dot_product_attention(q, k, v, scale=scale, is_causal=True,
                                                implementation=implementation)
        return fn
    return loader


#: FlashAttention's longest n in the plain GPU run: its quadratic cost makes longer points dominate the main job
MAIN_JOB_FLASH_N = 8192


def entries() -> list[KernelEntry]:
    """Every bundled kernel, in the order ``lattnbench list`` shows them.

    A plain ``speed`` / ``memory`` run times the bundled kernels with ``timed_by_default`` for its
    device: on a GPU the Gluon and Triton kernels beside FlashAttention-2 up to n = 8192, so the
    main job stays within two minutes on a fresh machine (JAX's start-up and FlashAttention's
    quadratic points at 16k and 32k took most of its time); on a CPU the pure-JAX kernels and XLA
    attention (the Triton kernel runs in the interpreter there, for correctness only).
    """
    half = ("bf16", "fp16")
    return [
        KernelEntry("lightning/naive-torch", "lightning", "torch", _lightning_naive_torch,
                    dtypes=("fp64", "fp32", "bf16", "fp16"), reference=True, max_scores=QUADRATIC_LIMIT,
                    description="quadratic form ((QKᵀ)⊙M)V in PyTorch; the fp64 reference"),
        KernelEntry("lightning/naive-jax", "lightning", "jax", _naive_jax_lightning,
                    dtypes=("fp64", "fp32", "bf16", "fp16"), reference=True, max_scores=QUADRATIC_LIMIT,
                    description="quadratic form in JAX"),
        KernelEntry("lightning/triton", "lightning", "torch", _lightning_triton, requires=("triton",),
                    interpreted_on_cpu=True,
                    description="bundled fused chunked Triton kernel (Lightning Attention-2), own backward"),
        KernelEntry("lightning/gluon", "lightning", "torch", _lightning_gluon, requires=("triton", "torch"),
                    devices=("cuda",), dtypes=half, device_check=_gluon_device, timed_by_default=("cuda",),
                    description="Gluon sm_90 forward (TMA ring, async wgmma, a load warp, a state warpgroup, "
                                "an output warpgroup); backward: a Gluon dq pass and one Gluon dk / dv kernel (bf16, no GQA, "
                                "from B·T·H = 4·4096·32 rows), else the Triton kernel's. fp32 is refused; packed "
                                "varlen and D or E other than 64/128 run the Triton kernel whole"),
        KernelEntry("lightning/triton-compile", "lightning", "torch", _lightning_triton_compiled(None),
                    requires=("triton",), devices=("cuda",), timed_by_default=(),
                    description="lightning/triton under torch.compile(fullgraph=True): custom ops, no graph break"),
        KernelEntry("lightning/triton-compile-cg", "lightning", "torch", _lightning_triton_compiled("reduce-overhead"),
                    requires=("triton",), devices=("cuda",), timed_by_default=(),
                    description="lightning/triton under torch.compile(mode='reduce-overhead'): Inductor's CUDA graphs"),
        KernelEntry("lightning/triton-step", "lightning", "torch", _lightning_triton, requires=("triton",),
                    devices=("cuda",), timed_by_default=(), step=compiled_step,
                    description="lightning/triton in a training step compiled whole: fwd, autograd.grad and bwd "
                                "in one torch.compile(mode='reduce-overhead') graph, one CUDA graph per step"),
        KernelEntry("lightning/jax-triton", "lightning", "jax", _jax_lightning("triton"), devices=("cuda",),
                    requires=("jax_triton", "triton"), timed_by_default=(),
                    features=LINEAR_FEATURES - {"varlen"},
                    description="the bundled Triton kernel called from JAX through jax-triton, custom VJP"),
        KernelEntry("lightning/triton-sp", "lightning", "torch", _lightning_sp("allgather"), requires=("triton",),
                    interpreted_on_cpu=True, sequence_parallel=True, timed_by_default=(),
                    description="the Triton kernel sequence parallel over torch.distributed: one all-gather "
                                "of the states (LASP-2)"),
        KernelEntry("lightning/triton-sp-ring", "lightning", "torch", _lightning_sp("ring"), requires=("triton",),
                    interpreted_on_cpu=True, sequence_parallel=True, timed_by_default=(),
                    description="the same with the state passed rank to rank by send/recv (LASP-1 ring)"),
        KernelEntry("lightning/jax-sp", "lightning", "jax", _lightning_jax_sp, sequence_parallel=True,
                    timed_by_default=(), features=LINEAR_FEATURES - {"varlen"},
                    description="shard_map over a mesh axis: all-gather of the states, local chunked kernel"),
        KernelEntry("lightning/jax-chunked", "lightning", "jax", _jax_lightning("chunked"),
                    timed_by_default=("cpu",),
                    description="block-parallel Lightning-2 form in pure JAX/XLA"),
        KernelEntry("lightning/jax-recurrent", "lightning", "jax", _jax_lightning("recurrent"),
                    timed_by_default=("cpu",),
                    description="lax.scan recurrence with a checkpointing custom VJP"),
        KernelEntry("gla/naive-torch", "gla", "torch", _gla_naive_torch,
                    dtypes=("fp64", "fp32", "bf16", "fp16"), reference=True, max_scores=2**22,
                    description="token-by-token GLA recurrence in PyTorch; the fp64 reference"),
        KernelEntry("gla/naive-jax", "gla", "jax", _naive_jax_gla,
                    dtypes=("fp64", "fp32", "bf16", "fp16"), reference=True, max_scores=2**22,
                    description="token-by-token GLA recurrence in JAX"),
        KernelEntry("gla/triton", "gla", "torch", _gla_triton, requires=("triton",), interpreted_on_cpu=True,
                    description="bundled fused chunked Triton GLA kernel, own backward (dg included)"),
        KernelEntry("gla/jax-triton", "gla", "jax", _gla_jax_triton, devices=("cuda",),
                    requires=("jax_triton", "triton"), features=LINEAR_FEATURES - {"varlen"},
                    description="the bundled Triton GLA kernels called from JAX through jax-triton, custom VJP"),
        KernelEntry("gla/jax-chunked", "gla", "jax", _jax_gla("chunked"),
                    timed_by_default=("cpu",),
                    description="chunked GLA in pure JAX/XLA"),
        KernelEntry("gla/jax-recurrent", "gla", "jax", _jax_gla("recurrent"),
                    timed_by_default=("cpu",),
                    description="lax.scan GLA recurrence with a checkpointing custom VJP"),
        KernelEntry("gdn/naive-torch", "gdn", "torch", _gdn_naive_torch,
                    dtypes=("fp64", "fp32", "bf16", "fp16"), reference=True, max_scores=2**22,
                    features=GDN_FEATURES,
                    description="token-by-token gated delta rule in PyTorch (gdn_naive); the fp64 reference"),
        KernelEntry("gdn/jax-chunked", "gdn", "jax", _jax_gdn("chunked"), features=GDN_FEATURES,
                    timed_by_default=("cpu",),
                    description="chunked WY (UT-transform) gated delta rule in pure JAX/XLA, chunk 64"),
        KernelEntry("gdn/jax-recurrent", "gdn", "jax", _jax_gdn("recurrent"), features=GDN_FEATURES,
                    timed_by_default=("cpu",),
                    description="lax.scan gated delta rule token recurrence, checkpointed per chunk of 64"),
        KernelEntry("gdn/triton", "gdn", "torch", _gdn_triton, requires=("triton",), interpreted_on_cpu=True,
                    features=GDN_FEATURES,
                    description="bundled fused chunked Triton gated delta rule (WY form) and its backward"),
        KernelEntry("softmax/naive-torch", "softmax", "torch", _softmax_naive_torch,
                    dtypes=("fp64", "fp32", "bf16", "fp16"), reference=True, max_scores=2**31,
                    features=frozenset({"gqa", "dv", "any_dim"}),
                    description="causal softmax attention materialising the scores"),
        KernelEntry("softmax/sdpa-flash", "softmax", "torch", _sdpa("FLASH_ATTENTION"), devices=("cuda",),
                    dtypes=half, features=frozenset({"gqa", "any_dim"}), main_job_max_n=(("cuda", MAIN_JOB_FLASH_N),),
                    description="FlashAttention-2 through torch SDPA"),
        KernelEntry("softmax/sdpa-cudnn", "softmax", "torch", _sdpa("CUDNN_ATTENTION"), devices=("cuda",),
                    timed_by_default=(),
                    dtypes=half, features=frozenset({"any_dim"}),
                    description="cuDNN attention through torch SDPA"),
        KernelEntry("softmax/sdpa-efficient", "softmax", "torch", _sdpa("EFFICIENT_ATTENTION"),
                    timed_by_default=(),
                    devices=("cuda",), features=frozenset({"gqa", "dv", "any_dim"}),
                    description="memory-efficient (xformers-style) attention through torch SDPA"),
        KernelEntry("softmax/jax-cudnn", "softmax", "jax", _jax_dpa("cudnn"), devices=("cuda",),
                    timed_by_default=(),
                    dtypes=half, features=frozenset({"gqa", "any_dim"}),
                    description="jax.nn.dot_product_attention, cuDNN implementation"),
        KernelEntry("softmax/jax-xla", "softmax", "jax", _jax_dpa("xla"),
                    timed_by_default=("cpu",),
                    dtypes=("fp32", "bf16", "fp16"), features=frozenset({"gqa", "any_dim"}),
                    max_scores=2**31,
                    description="jax.nn.dot_product_attention, XLA implementation"),
    ]


def _naive_jax_lightning() -> Callable:
    from lattnbench.kernels.jax import naive

    def fn(q, k, v, gamma, scale, initial_state, reverse, cu_seqlens):
        return naive.lightning_naive(q, k, v, gamma, scale, initial_state, reverse, cu_seqlens)
    return fn


def _naive_jax_gla() -> Callable:
    from lattnbench.kernels.jax import naive

    def fn(q, k, v, g, scale, initial_state, reverse, cu_seqlens):
        return naive.recurrent_naive(q, k, v, g=g, scale=scale, initial_state=initial_state,
                                     reverse=reverse, cu_seqlens=cu_seqlens)
    return fn
