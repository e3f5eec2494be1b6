"""Sequence-parallel Lightning Attention over torch.distributed (LASP-2, with a LASP-1 ring beside it).

Each rank holds a contiguous shard of the sequence. Forward:

1. the local kernel on the shard with zero carried state gives ``o⁰`` and the shard's final
   states ``F`` (packed sequences that start in the shard get their ``h0`` here);
2. the shard's exit state ``b = F[exit]`` and decay ``a = λ^{T_r}`` (0 when the shard holds a
   sequence boundary) go through the scan ``carry(p+1) = a_p·carry(p) + b_p`` (``comm``);
3. the entry piece, if it continues a sequence from an earlier rank, gets the correction
   ``o_t += scale·λ^{t−t₀+1}·carryᵀ q_t`` (a [T_r,D]×[D,E] matmul per head).

Backward mirrors it: the correction's state gradient ``d = scale·Σ_t λ^{…} q_t do_tᵀ`` goes
through the reverse scan, the exit piece's ``dS_T`` becomes the gradient arriving from later
ranks, then the local backward runs once, and dq gets the correction's term. Final states and
``dh0`` are replicated on every rank (an all-reduce when packed sequences end inside shards).
"""
from __future__ import annotations

from collections.abc import Callable

import torch

from .comm import STRATEGIES
from .local import AutogradLocal, TritonLocal, state_dtype
from .shards import ShardPlan, plan_shard

Tensor = torch.Tensor


def _decay_weights(g: Tensor, lo: int, hi: int, reverse: bool, dtype) -> Tensor:
    """λ^(distance from where the carried state enters, +1) for local tokens [lo, hi): [len, H]."""
    steps = torch.arange(hi - lo, device=g.device, dtype=dtype)
    steps = (hi - lo - steps) if reverse else (steps + 1)
    return torch.exp(steps[:, None] * g.to(dtype)[None, :])


def _local_h0(h0: Tensor | None, plan: ShardPlan, n_local: int) -> Tensor | None:
    """Initial states of the local pieces: h0 for pieces that start their sequence, else zero."""
    if h0 is None or not any(plan.starts):
        return None
    if plan.seq_ids is None:
        return h0
    rows = [h0[s] if plan.starts[p] else torch.zeros_like(h0[0]) for p, s in enumerate(plan.seq_ids)]
    return torch.stack(rows)


class SequenceParallelLightning(torch.autograd.Function):
    """Autograd of one rank's part; q, k, v are the rank's shard, h0 and S_T replicated."""

    @staticmethod
    def forward(ctx, q, k, v, h0, g, scale, plan: ShardPlan, comm, local, num_seqs):
        sdt = state_dtype(q)
        dense = plan.seq_ids is None
        n_local = q.shape[0] if dense else plan.pieces
        h0_loc = _local_h0(h0, plan, n_local)
        o, f = local.fwd(q, k, v, g, scale, h0_loc, plan.reverse, plan.local_cu, n_local)
        f = f.to(sdt)
        b = f if dense else f[plan.exit:plan.exit + 1]
        a = torch.exp(g.to(sdt) * plan.length) if plan.passes_through else torch.zeros_like(g, dtype=sdt)
        carry, total = comm.scan(a, b, plan, need_total=dense)
        lo, hi = plan.piece_span(plan.entry)
        w = _decay_weights(g, lo, hi, plan.reverse, sdt) if plan.carried else None
        if plan.carried:
            fix = torch.einsum("th,bthd,bhde->bthe", w, q[:, lo:hi].to(sdt), carry)
            o[:, lo:hi] += (scale * fix).to(o.dtype)
        if dense:
            final = total
        else:
            final = torch.zeros(num_seqs, *f.shape[1:], dtype=sdt, device=q.device)
            for p, s in enumerate(plan.seq_ids):
                if plan.ends[p]:
                    final[s] = f[p]
                    if p == plan.entry and plan.carried:
                        final[s] += torch.exp(g.to(sdt) * (hi - lo))[:, None, None] * carry[0]
            comm.all_reduce(final)
        ctx.save_for_backward(q, k, v, g, h0_loc, carry, a, w)
        ctx.scale, ctx.plan, ctx.comm, ctx.local = scale, plan, comm, local
        ctx.num_seqs, ctx.h0_shape = num_seqs, None if h0 is None else (h0.shape, h0.dtype)
        ctx.set_materialize_grads(False)
        return o, final

    @staticmethod
    def backward(ctx, do, dfinal):
        q, k, v, g, h0_loc, carry, a, w = ctx.saved_tensors
        plan, scale = ctx.plan, ctx.scale
        sdt = carry.dtype
        dense = plan.seq_ids is None
        n_local = q.shape[0] if dense else plan.pieces
        if do is None:
            do = torch.zeros(*q.shape[:3], v.shape[3], dtype=q.dtype, device=q.device)
        do = do.to(q.dtype)
        if dfinal is None:
            dfinal = torch.zeros(ctx.num_seqs, *carry.shape[1:], dtype=sdt, device=q.device)
        dfinal = dfinal.to(sdt)
        lo, hi = plan.piece_span(plan.entry)
        d = torch.zeros_like(carry)
        if plan.carried:
            d += scale * torch.einsum("th,bthd,bthe->bhde", w, q[:, lo:hi].to(sdt), do[:, lo:hi].to(sdt))
            if plan.ends[plan.entry]:
                ends_here = dfinal if dense else dfinal[plan.seq_ids[plan.entry]][None]
                d += torch.exp(g.to(sdt) * (hi - lo))[None, :, None, None] * ends_here
        g_out = ctx.comm.reverse_scan(a, d, plan)
        if dense:
            dht = dfinal if plan.ends[0] else g_out
        else:
            dht = torch.zeros(n_local, *carry.shape[1:], dtype=sdt, device=q.device)
            for p, s in enumerate(plan.seq_ids):
                if plan.ends[p]:
                    dht[p] = dfinal[s]
            dht[plan.exit] += g_out[0]
        dq, dk, dv, dh0_loc = ctx.local.bwd(q, k, v, do, g, scale, h0_loc, dht, plan.reverse, plan.local_cu,
                                            n_local)
        if plan.carried:
            dq[:, lo:hi] += (scale * torch.einsum("th,bthe,bhde->bthd", w, do[:, lo:hi].to(sdt), carry)).to(dq.dtype)
        dh0 = None
        if ctx.h0_shape is not None:
            shape, dtype = ctx.h0_shape
            dh0 = torch.zeros(shape, dtype=sdt, device=q.device)
            if dh0_loc is not None:
                if dense:
                    dh0 += dh0_loc.to(sdt)
                else:
                    for p, s in enumerate(plan.seq_ids):
                        if plan.starts[p]:
                            dh0[s] += dh0_loc[p].to(sdt)
            ctx.comm.all_reduce(dh0)
            dh0 = dh0.to(dtype)
        return dq, dk, dv, dh0, None, None, None, None, None, None


def _gamma(gamma, h: int, device) -> Tensor:
    if gamma is None:
        return torch.zeros(h, dtype=torch.float32, device=device)
    g = torch.as_tensor(gamma, device=device).detach().to(torch.float32).reshape(-1)
    if g.numel() != h:
        raise ValueError(f"gamma must have one value per query head ({h}), got {g.numel()}")
    if bool((g > 0).any()):
        raise ValueError("gamma must be <= 0 (a decay)")
    return g.contiguous()


def lightning_attn_sp(
    q: Tensor, k: Tensor, v: Tensor, gamma=None, scale: float | None = None,
    initial_state: Tensor | None = None, reverse: bool = False, cu_seqlens=None, *,
    group=None, comm: str = "allgather", local: str | Callable = "triton",
) -> tuple[Tensor, Tensor]:
    """This rank's part of sequence-parallel Lightning Attention; layout [B, T_r, H, D].

    q, k, v: this rank's contiguous shard (rank r of ``group`` holds ``shard_bounds(T, P)[r:r+2]``
    when packed; dense shards may have any lengths). ``initial_state`` [N, H, D, E] and
    ``cu_seqlens`` (global edges, B = 1) are the same on every rank. Returns ``(o_shard, S_T)``,
    S_T fp32 [N, H, D, E] on every rank. ``comm``: ``allgather`` (LASP-2) or ``ring`` (LASP-1);
    ``local``: ``triton`` or a differentiable function of the uniform signature.
    """
    import torch.distributed as dist

    if comm not in STRATEGIES:
        raise ValueError(f"comm must be one of {', '.join(STRATEGIES)}, got {comm!r}")
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not isinstance(x, torch.Tensor) or x.dim() != 4:
            raise ValueError(f"{name} must be a [B, T, H, D] torch.Tensor")
    b, t, h, d = q.shape
    world, rank = (dist.get_world_size(group), dist.get_rank(group)) if dist.is_initialized() else (1, 0)
    if cu_seqlens is None:
        plan = ShardPlan(rank, world, 0, t, bool(reverse), (rank == (world - 1 if reverse else 0),),
                         (rank == (0 if reverse else world - 1),))
        num_seqs = b
    else:
        cu = [int(x) for x in (cu_seqlens.tolist() if hasattr(cu_seqlens, "tolist") else cu_seqlens)]
        if b != 1:
            raise ValueError(f"with cu_seqlens the batch size must be 1, got {b}")
        plan = plan_shard(cu[-1], world, rank, cu, bool(reverse))
        if plan.length != t:
            raise ValueError(f"rank {rank} holds {t} tokens, but its shard of T={cu[-1]} over {world} ranks "
                             f"is [{plan.start}, {plan.stop})")
        num_seqs = len(cu) - 1
    if t == 0:
        raise ValueError(f"rank {rank} holds no tokens: give every rank a non-empty shard")
    if initial_state is not None and tuple(initial_state.shape) != (num_seqs, h, d, v.shape[3]):
        raise ValueError(f"initial_state must be [N, H, D, E] = {(num_seqs, h, d, v.shape[3])}, "
                         f"got {tuple(initial_state.shape)}")
    scale = d**-0.5 if scale is None else float(scale)
    runner = TritonLocal() if local == "triton" else AutogradLocal(local)
    return SequenceParallelLightning.apply(q, k, v, initial_state, _gamma(gamma, h, q.device), scale, plan,
                                           STRATEGIES[comm](group), runner, num_seqs)
