"""Adapters for other projects' kernels, registered whether or not their package is installed.

``lattnbench list`` shows each with the reason when its package is missing. Every adapter hands
its kernel exactly the function the reference computes (same decay, same scale, same layout)
so that an agreement check means something, and declares what it cannot do so that such a case
is recorded as ``unsupported`` with the reason rather than crashing.

What each peer supports (read from its source; see ``docs/plugins.md`` and the entries below):

================== ============================ ==============================================
kernel             package, function            supports / does not
================== ============================ ==============================================
lightning/fla-chunk fla-core 0.6.0,             [B,T,H,D]; initial state, final state, varlen
                   ``fla.ops.simple_gla.        (cu_seqlens, LongTensor), dim_v != dim_qk, any
                   chunk_simple_gla`` (g_gamma) dim (even dims in 16-bit: fla asserts it in
                                                chunk_bwd_dv); no reverse (it has no such
                                                argument and would swallow one in ``**kwargs``),
                                                no GQA (its fewer-kv-heads path is GVA, more v
                                                heads than q heads, not ours); CUDA only
lightning/fla-fused- fla-core 0.6.0,             [B,T,H,D]; fla's single-kernel Lightning form;
chunk              ``fla.ops.simple_gla.        initial state, final state, varlen, dim_v !=
                   fused_chunk_simple_gla``     dim_qk, any dim; no reverse, no GQA; CUDA only
                   (g_gamma)
lightning/fla-     fla-core 0.6.0,              takes (layer_idx, num_layers) and derives
lightning          ``fla.ops.lightning_attn.    g_gamma = −(8/H)(1 − l/L)·arange(H) itself: only
                   chunk_lightning_attn``       cases with the seeds' decay (``decay =
                                                "lightning"``, layer 0 of 1); otherwise as
                                                lightning/fla-chunk (it is chunk_simple_gla)
gla/fla-chunk      fla-core 0.6.0,              [B,T,H,D], g [B,T,H,D] natural-log gates;
                   ``fla.ops.gla.chunk_gla``    initial state, final state, varlen, dim_v !=
                                                dim_qk, any dim; no reverse (no such argument),
                                                no GQA (it asserts q, k, g share a shape); CUDA
gla/fla-fused-     fla-core 0.6.0,              as gla/fla-chunk (gk = g) plus reverse; no GQA;
recurrent          ``fla.ops.gla.               CUDA only
                   fused_recurrent_gla``
gdn/fla-chunk      fla-core 0.6.0, ``fla.ops.   [B,T,H,D], g and beta [B,T,H]; k as given
                   gated_delta_rule.            (use_qk_l2norm_in_kernel=False); initial state,
                   chunk_gated_delta_rule``     final state, varlen, dim_v != dim_qk; no reverse
                                                (no such argument), no GQA (its fewer-kv-heads
                                                path is GVA); 16-bit only (it asserts q is not
                                                fp32); CUDA only
gdn/fla-fused-     fla-core 0.6.0, ``fla.ops.   as gdn/fla-chunk, fp32 too; no backward (its
recurrent          gated_delta_rule.fused_      backward raises NotImplementedError): fwd only
                   recurrent_gated_delta_rule``
lightning/opennlplab lightning_attn 0.0.5,      [B,H,N,D], slopes s [H,1,1], decay exp(−s·dist),
                   ``lightning_attn.ops.        no scale (pinned to 1 here, for kernel and
                   lightning_attn_func``        reference alike); returns o only (no final
                                                state); no initial state, reverse, varlen, GQA;
                                                dim_qk a power of two 32..128 (wider ones are
                                                cut in 64-wide slices by the package), dim_v > 16
                                                (padded to a power of two); CUDA only
lightning/ejkernel ejkernel (0.0.80),           [B,T,H,D]; pure JAX/XLA lax.scan recurrence,
gla/ejkernel       ``ejkernel.kernels._xla``    custom VJP; initial state, reverse, varlen, any
                   ``recurrent`` (g_gamma) /    dim; no GQA (documented); dim_v != dim_qk
                   ``recurrent_gla`` (g)        crashes in 0.0.80.3 although the signature
                                                allows it, so it is declared unsupported
softmax/flash-attn flash_attn (FA2) or          [B,T,H,D], causal, fp16/bf16, GQA, head dim
                   flash_attn_interface (FA3)   <= 256, no dim_v != dim_qk; CUDA only
================== ============================ ==============================================

What fla raises itself (an input check, an unimplemented backward, the backward it refuses on
Hopper with Triton < 3.7.1) is recorded for the GDN peers as ``unsupported`` with fla's message:
``_fla_guarded`` runs fla's forward and backward inside one autograd function of ours, so that an
exception of fla's backward, which autograd raises outside any adapter, is still seen by one.
"""
from __future__ import annotations

import importlib.util
from collections.abc import Callable

from lattnbench.errors import Unsupported
from lattnbench.registry.entry import KernelEntry
from lattnbench.spec import Case

# ---- fla (flash-linear-attention) ------------------------------------------------------------

FLA_FEATURES = frozenset({"initial_state", "varlen", "dv", "any_dim"})


def _fla_chunk() -> Callable:
    import torch
    from fla.ops.simple_gla import chunk_simple_gla

    host_cu: dict[tuple[int, int], torch.Tensor] = {}  # cu_seqlens on the host, copied once

    def fn(q, k, v, gamma, scale, initial_state, reverse, cu_seqlens):
        if reverse:  # fla would swallow reverse= in **kwargs and run forward: never pass it
            raise Unsupported("fla chunk_simple_gla has no reverse")
        cu = cu_cpu = None
        if cu_seqlens is not None:
            cu = cu_seqlens.to(torch.long)
            key = (cu_seqlens.data_ptr(), cu_seqlens.numel())
            if key not in host_cu:
                host_cu[key] = cu.cpu()
            cu_cpu = host_cu[key]
        return chunk_simple_gla(q, k, v, g=None, g_gamma=gamma.float(), scale=scale,
                                initial_state=initial_state, output_final_state=True,
                                cu_seqlens=cu, cu_seqlens_cpu=cu_cpu)
    return fn


def _host_cu(cache: dict, cu_seqlens):
    """(cu_seqlens as fla's LongTensor, its host copy made once per buffer), or (None, None)."""
    import torch

    if cu_seqlens is None:
        return None, None
    cu = cu_seqlens.to(torch.long)
    key = (cu_seqlens.data_ptr(), cu_seqlens.numel())
    if key not in cache:
        cache[key] = cu.cpu()
    return cu, cache[key]


def _fla_fused_chunk() -> Callable:
    from fla.ops.simple_gla import fused_chunk_simple_gla

    def fn(q, k, v, gamma, scale, initial_state, reverse, cu_seqlens):
        if reverse:
            raise Unsupported("fla fused_chunk_simple_gla has no reverse")
        cu, _ = _host_cu({}, cu_seqlens)
        return fused_chunk_simple_gla(q, k, v, g=None, g_gamma=gamma.float(), scale=scale,
                                      initial_state=initial_state, output_final_state=True, cu_seqlens=cu)
    return fn


#: the (layer_idx, num_layers) whose fla decay −(8/H)(1 − l/L)·arange(H) is the case's "lightning" decay
FLA_LIGHTNING_LAYER = (0, 1)


def _fla_lightning() -> Callable:
    import torch
    from fla.ops.lightning_attn import chunk_lightning_attn

    from lattnbench.kernels.decay import lightning_decay

    def fn(q, k, v, gamma, scale, initial_state, reverse, cu_seqlens):
        if reverse:
            raise Unsupported("fla chunk_lightning_attn has no reverse")
        want = torch.as_tensor(lightning_decay(q.shape[2], *FLA_LIGHTNING_LAYER), device=gamma.device)
        if not torch.allclose(gamma.float(), want.float(), rtol=0, atol=1e-6):
            raise Unsupported("fla chunk_lightning_attn derives its own decay (the seeds' layer formula)")
        cu, _ = _host_cu({}, cu_seqlens)
        layer_idx, num_layers = FLA_LIGHTNING_LAYER
        return chunk_lightning_attn(q, k, v, layer_idx=layer_idx, num_layers=num_layers, scale=scale,
                                    initial_state=initial_state, output_final_state=True, cu_seqlens=cu)
    return fn


def _fla_lightning_case(case: Case) -> str | None:
    if case.decay != "lightning":
        return (f"decay {case.decay!r}: fla chunk_lightning_attn derives its decay from (layer_idx, num_layers); "
                "only the seeds' 'lightning' decay (layer 0 of 1) matches it")
    return _fla_case(case)


def _fla_gla(fused_recurrent: bool) -> Callable[[], Callable]:
    def loader() -> Callable:
        from fla.ops import gla as fla_gla

        host_cu: dict = {}

        def fn(q, k, v, g, scale, initial_state, reverse, cu_seqlens):
            cu, cu_cpu = _host_cu(host_cu, cu_seqlens)
            if fused_recurrent:
                return fla_gla.fused_recurrent_gla(q, k, v, gk=g, scale=scale, initial_state=initial_state,
                                                   output_final_state=True, reverse=bool(reverse), cu_seqlens=cu)
            if reverse:
                raise Unsupported("fla chunk_gla has no reverse")
            return fla_gla.chunk_gla(q, k, v, g, scale=scale, initial_state=initial_state, output_final_state=True,
                                     cu_seqlens=cu, cu_seqlens_cpu=cu_cpu)
        return fn
    return loader


def _raised_by_fla(exc: BaseException) -> bool:
    """Whether ``exc`` was raised in fla's own code (its innermost frame is in a ``fla`` module),
    not by something fla calls (a Triton compile error stays an error)."""
    tb = exc.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    module = tb.tb_frame.f_globals.get("__name__", "")
    return module == "fla" or module.startswith("fla.")


def _fla_reason(exc: BaseException) -> BaseException:
    """fla's own refusal as ``Unsupported`` with its message; anything else (out of memory, a
    compiler's error, a crash below fla) unchanged."""
    if isinstance(exc, Unsupported) or not _raised_by_fla(exc) or "out of memory" in str(exc).lower():
        return exc
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return Unsupported(f"fla: {type(exc).__name__}: {lines[0] if lines else ''}"[:300])


def _fla_guarded(call: Callable) -> Callable:
    """``call(*tensors) -> (o, S_T)`` (fla's function) with fla's own exceptions, forward and
    backward, turned into ``Unsupported``: the forward runs fla's on leaves of its own graph, the
    backward differentiates that graph inside a ``try``."""
    import torch

    class Guarded(torch.autograd.Function):
        @staticmethod
        def forward(ctx, *xs):
            with torch.enable_grad():
                leaves = [None if x is None else x.detach().requires_grad_(need)
                          for x, need in zip(xs, ctx.needs_input_grad)]
                try:
                    outs = tuple(call(*leaves))
                except Exception as exc:  # noqa: BLE001 - fla's refusal becomes a reason
                    raise _fla_reason(exc) from exc
            ctx.leaves, ctx.outs = leaves, outs
            return tuple(o.detach() for o in outs)

        @staticmethod
        def backward(ctx, *grads):
            pairs = [(o, g) for o, g in zip(ctx.outs, grads) if o.requires_grad]
            wanted = [i for i, x in enumerate(ctx.leaves) if x is not None and x.requires_grad]
            try:
                # the graph is kept: the bwd timer calls this backward again on the same forward
                got = torch.autograd.grad([o for o, _ in pairs], [ctx.leaves[i] for i in wanted],
                                          [g for _, g in pairs], retain_graph=True, allow_unused=True)
            except Exception as exc:  # noqa: BLE001
                raise _fla_reason(exc) from exc
            out = [None] * len(ctx.leaves)
            for i, g in zip(wanted, got):
                out[i] = g
            return tuple(out)

    def run(*xs):
        return Guarded.apply(*xs)
    return run


def _fla_gdn(fused_recurrent: bool) -> Callable[[], Callable]:
    def loader() -> Callable:
        from fla.ops import gated_delta_rule as fla_gdn

        name = "fused_recurrent_gated_delta_rule" if fused_recurrent else "chunk_gated_delta_rule"
        kernel = getattr(fla_gdn, name)
        host_cu: dict = {}

        def fn(q, k, v, g, beta, scale, initial_state, reverse, cu_seqlens):
            if reverse:  # neither takes reverse=: never pass it
                raise Unsupported(f"fla {name} has no reverse")
            cu, _ = _host_cu(host_cu, cu_seqlens)

            def call(q, k, v, g, beta, h0):
                # keywords only past (q, k, v): 0.6.0 and later releases order the rest differently
                return kernel(q, k, v, g=g, beta=beta, scale=scale, initial_state=h0, output_final_state=True,
                              use_qk_l2norm_in_kernel=False, cu_seqlens=cu)
            return _fla_guarded(call)(q, k, v, g, beta, initial_state)
        return fn
    return loader


def _fla_case(case: Case) -> str | None:
    if case.dtype in ("bf16", "fp16") and (case.dim_qk % 2 or case.dim_v % 2):
        return f"fla's chunk_bwd_dv needs even head dims in {case.dtype} (got {case.dim_qk}/{case.dim_v})"
    return None


# ---- the official lightning_attn (OpenNLPLab) ------------------------------------------------

OFFICIAL_SCALE = 1.0  # lightning_attn_func takes no scale: the reference is pinned to it too


def _opennlplab() -> Callable:
    import torch
    from lightning_attn.ops import lightning_attn_func

    def fn(q, k, v, gamma, scale, initial_state, reverse, cu_seqlens):
        if scale != OFFICIAL_SCALE:
            raise Unsupported(f"the official kernel has no scale argument (it computes scale 1, asked {scale})")
        if initial_state is not None or reverse or cu_seqlens is not None:
            raise Unsupported("the official kernel has no initial state, reverse or varlen")
        # the contract's decay is exp(γ·distance), γ ≤ 0; the package's is exp(−s·distance): s = −γ
        slopes = (-gamma).to(torch.float32).reshape(-1, 1, 1).contiguous()
        o = lightning_attn_func(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), slopes)
        return o.transpose(1, 2), None  # [B, H, N, E] → [B, N, H, E]; no final state
    return fn


def _official_dim_problem(case: Case) -> str | None:
    """Head dims the package's Triton kernels take (from lightning_attn 0.0.5's source).

    ``is_support(d) = 16 % d`` refuses 1, 2, 4, 8, 16; ``tl.arange(0, d)`` needs a power of two;
    dims above 128 are cut in 64-wide slices (the README's d = 192); v is padded to a power of two.
    """
    d, e = case.dim_qk, case.dim_v
    if d <= 128:
        ok = d >= 32 and not d & (d - 1)
    else:
        rest = d % 64
        ok = rest == 0 or (rest >= 16 and not rest & (rest - 1))
    if not ok:
        return (f"head dim {d}: the official kernel needs dim_qk a power of two in 32..128 "
                "(or above 128 in 64-wide power-of-two slices)")
    if e <= 16:
        return f"dim_v {e}: the official kernel needs dim_v > 16 (its is_support refuses divisors of 16)"
    return None


# ---- ejKernel (JAX/XLA) ----------------------------------------------------------------------

#: the XLA implementations the seeds describe; ``ejkernel.kernels._xla`` exports both
EJKERNEL_RECURRENT = "ejkernel.kernels._xla.recurrent"
EJKERNEL_GLA = "ejkernel.kernels._xla.gla"
EJKERNEL_FEATURES = frozenset({"initial_state", "reverse", "varlen", "any_dim"})


def _ejkernel_cu(cu_seqlens):
    import jax.numpy as jnp
    return None if cu_seqlens is None else jnp.asarray(cu_seqlens, dtype=jnp.int32)


def _ejkernel_lightning() -> Callable:
    import jax.numpy as jnp
    from ejkernel.kernels._xla.recurrent import recurrent

    def fn(q, k, v, gamma, scale, initial_state, reverse, cu_seqlens):
        return recurrent(q, k, v, g_gamma=jnp.asarray(gamma, jnp.float32), softmax_scale=float(scale),
                         initial_state=initial_state, reverse=bool(reverse), cu_seqlens=_ejkernel_cu(cu_seqlens))
    return fn


def _ejkernel_gla() -> Callable:
    from ejkernel.kernels._xla.gla import recurrent_gla

    def fn(q, k, v, g, scale, initial_state, reverse, cu_seqlens):
        return recurrent_gla(q, k, v, g=g, softmax_scale=float(scale), initial_state=initial_state,
                             reverse=bool(reverse), cu_seqlens=_ejkernel_cu(cu_seqlens))
    return fn


def _ejkernel_case(case: Case) -> str | None:
    if case.dim_v != case.dim_qk:
        return ("ejKernel's XLA recurrent fails for dim_v != dim_qk (its default gv is zeros_like(query), "
                "shape [.., dim_qk]; seen with 0.0.80.3) although its signature allows v_head_dim")
    return None


# ---- flash-attn (FlashAttention-2 / -3) ------------------------------------------------------

def _flash_attn_module() -> str:
    """FA3's ``flash_attn_interface`` when installed (Hopper build), else FA2's ``flash_attn``."""
    try:
        if importlib.util.find_spec("flash_attn_interface") is not None:
            return "flash_attn_interface"
    except (ImportError, ValueError):
        pass
    return "flash_attn"


def _flash_attn(module: str) -> Callable[[], Callable]:
    def loader() -> Callable:
        flash_attn_func = importlib.import_module(module).flash_attn_func

        def fn(q, k, v, scale):
            o = flash_attn_func(q, k, v, softmax_scale=scale, causal=True)
            return o[0] if isinstance(o, tuple) else o  # some FA3 releases return (o, lse)
        return fn
    return loader


def _flash_attn_case(case: Case) -> str | None:
    if max(case.dim_qk, case.dim_v) > 256:
        return f"head dim {max(case.dim_qk, case.dim_v)}: flash_attn takes head dims up to 256"
    return None


def entries() -> list[KernelEntry]:
    fa = _flash_attn_module()
    return [
        KernelEntry("lightning/fla-chunk", "lightning", "torch", _fla_chunk, devices=("cuda",),
                    requires=("fla",), origin="peer", features=FLA_FEATURES, case_check=_fla_case,
                    description="fla-core chunk_simple_gla with g_gamma (no reverse, no GQA)"),
        KernelEntry("lightning/fla-fused-chunk", "lightning", "torch", _fla_fused_chunk, devices=("cuda",),
                    requires=("fla",), origin="peer", features=FLA_FEATURES,
                    description="fla-core fused_chunk_simple_gla with g_gamma, one kernel (no reverse, no GQA)"),
        KernelEntry("lightning/fla-lightning", "lightning", "torch", _fla_lightning, devices=("cuda",),
                    requires=("fla",), origin="peer", features=FLA_FEATURES, case_check=_fla_lightning_case,
                    description="fla-core chunk_lightning_attn, its own layer decay (decay 'lightning' only)"),
        KernelEntry("gla/fla-chunk", "gla", "torch", _fla_gla(False), devices=("cuda",),
                    requires=("fla",), origin="peer", features=FLA_FEATURES,
                    description="fla-core chunk_gla (no reverse, no GQA)"),
        KernelEntry("gla/fla-fused-recurrent", "gla", "torch", _fla_gla(True), devices=("cuda",),
                    requires=("fla",), origin="peer", features=FLA_FEATURES | {"reverse"},
                    description="fla-core fused_recurrent_gla, gk = g (no GQA)"),
        KernelEntry("gdn/fla-chunk", "gdn", "torch", _fla_gdn(False), devices=("cuda",),
                    requires=("fla",), origin="peer", features=FLA_FEATURES,
                    description="fla-core chunk_gated_delta_rule, k as given (no reverse, no GQA)"),
        KernelEntry("gdn/fla-fused-recurrent", "gdn", "torch", _fla_gdn(True), devices=("cuda",),
                    requires=("fla",), origin="peer", features=FLA_FEATURES,
                    description="fla-core fused_recurrent_gated_delta_rule, forward only (no backward in fla)"),
        KernelEntry("lightning/opennlplab", "lightning", "torch", _opennlplab, devices=("cuda",),
                    requires=("lightning_attn",), origin="peer", fixed_scale=OFFICIAL_SCALE,
                    final_state=False, features=frozenset({"dv", "any_dim"}),
                    case_check=_official_dim_problem,
                    description="official lightning_attn lightning_attn_func, ALiBi-style slopes, "
                    "scale 1, no state"),
        KernelEntry("lightning/ejkernel", "lightning", "jax", _ejkernel_lightning,
                    requires=("ejkernel",), origin="peer", features=EJKERNEL_FEATURES,
                    case_check=_ejkernel_case,
                    description="ejKernel XLA recurrent with g_gamma (lax.scan, custom VJP)"),
        KernelEntry("gla/ejkernel", "gla", "jax", _ejkernel_gla,
                    requires=("ejkernel",), origin="peer", features=EJKERNEL_FEATURES,
                    case_check=_ejkernel_case,
                    description="ejKernel XLA recurrent_gla (lax.scan, custom VJP)"),
        KernelEntry("softmax/flash-attn", "softmax", "torch", _flash_attn(fa), devices=("cuda",),
                    requires=(fa,), origin="peer", dtypes=("bf16", "fp16"),
                    features=frozenset({"gqa", "any_dim"}), case_check=_flash_attn_case,
                    description=f"flash_attn_func ({'FlashAttention-3' if fa != 'flash_attn' else 'FlashAttention-2'})"),
    ]
