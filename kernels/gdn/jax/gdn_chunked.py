"""Gated delta rule (GDN), chunked in pure JAX: the WY / UT-transform form (fla's ``chunk``).

Per state head, ``S_t = α_t (I − β_t k_t k_tᵀ) S_{t−1} + β_t k_t v_tᵀ``, ``α_t = exp(g_t)``,
``o_t = scale · S_tᵀ q_t``. Inside a chunk of C tokens entered with state S, and with the chunk's
log gates summed from its start (``G_i = Σ_{l≤i} g_l``), every state of the chunk is

    S_i = e^{G_i} S + Σ_{j≤i} e^{G_i − G_j} k_j ν_jᵀ

for pseudo-values ν (fla's ``v_new``). Putting this into the recurrence gives ν as the solution of
one unit lower-triangular system per chunk:

    (I + A) ν = β ⊙ V − (β e^G ⊙ K) S,        A[i, j] = β_i (k_iᵀ k_j) e^{G_i − G_j}  (j < i)

so with ``u = (I + A)^{-1} (β ⊙ V)`` and ``w = (I + A)^{-1} (β e^G ⊙ K)`` (state-free, every chunk
at once), ``ν = u − w S``, and

    O   = scale · [(e^G ⊙ Q) S + ((Q Kᵀ) ⊙ M) ν],      M[i, j] = e^{G_i − G_j}  (j ≤ i)
    S'  = e^{G_C} S + (e^{G_C − G} ⊙ K)ᵀ ν.

Three steps, one job each: ``_prep`` (the gates' sums, A, one triangular solve for u and w;
parallel over chunks), ``_state_scan`` (the only sequential part: a ``lax.scan`` over chunks of
``ν = u − w S`` and the state update), ``_outputs`` (O for all chunks at once). Every exponent
is ≤ 0, and each is a sum of its own gates (a prefix, a suffix or a segment sum), never the
difference of two cumulative sums: with strong gates G reaches −10³ in a chunk, where the
difference of two fp32 cumsums would lose the few nats between neighbours.

Gradients by autodiff; all three steps run under ``jax.checkpoint``, so the backward recomputes
the chunk-local [C, C] tensors (A, the decay mask, the scores) instead of keeping them. What it
keeps: the inputs, u, w and the decayed keys (T·(2D + E) per head), ν (T·E) and the state
entering each chunk (T/C · D·E): O(T) memory, never a state per token.

Inputs fp32 / bf16 / fp16 run in fp32 (``Precision.HIGHEST``, no TF32), fp64 in fp64 (with x64);
o comes back in the input dtype, the final state in fp32 (fp64 for fp64 inputs). k is used as
given: L2-normalise it first (see ``lattnbench.kernels.gdn.naive``). g and beta ``[B, T, H]``
belong to the state, one per query head (fla's per-state-head gates; GQA shares k and v only).
Packed varlen: sequences are laid out chunk-aligned (each starts a chunk; padding tokens have
g = 0 and β = 0, which leave the state as it is), states restart per sequence. ``cu_seqlens``
must be concrete.
"""
from __future__ import annotations

from functools import partial
from typing import NamedTuple

import numpy as np

import jax
import jax.numpy as jnp
from jax import lax

from ...common.jax_helpers import HIGHEST, check_inputs, concrete_cu, default_scale, expand_kv, varlen_layout

F32 = jnp.float32
Array = jax.Array


def _ein(spec: str, *ops: Array) -> Array:
    return jnp.einsum(spec, *ops, precision=HIGHEST)


# ----------------------------------------------------------------------------------------------
# inputs: checks, compute dtype, the chunk-aligned token layout (shared with gdn_recurrent)
# ----------------------------------------------------------------------------------------------

class Layout(NamedTuple):
    """Where the tokens sit once padded to whole chunks of ``c``.

    dst: the padded position of each token (None: dense, tokens stay in place, the tail padded);
    flag / seq: per chunk, whether it starts a sequence and which sequence it belongs to;
    last: per sequence, its last chunk (-1 when it has no tokens). Varlen only, else None.
    """
    c: int
    dst: np.ndarray | None
    flag: np.ndarray | None
    seq: np.ndarray | None
    last: np.ndarray | None


def compute_dtype(x: Array):
    """fp64 stays fp64 (references under x64); everything else computes in fp32."""
    return jnp.float64 if x.dtype == jnp.float64 else F32


def check_gates(q: Array, g: Array, beta: Array) -> None:
    want = tuple(q.shape[:3])
    for name, x in (("g", g), ("beta", beta)):
        if tuple(x.shape) != want:
            raise ValueError(f"{name} must be [B, T, H] = {want}, got {tuple(x.shape)}")


def prepare(q: Array, k: Array, v: Array, g: Array, beta: Array, initial_state: Array | None, cu_seqlens,
            chunk: int) -> tuple[list[Array], Array, Layout]:
    """Checks, GQA expansion, casts to the compute dtype and the padded layout.

    Returns (tokens (q, k, v, g, beta) as [B, Tp, H, ...] with Tp a multiple of the chunk,
    h0 [N, H, D, E], layout). Padding tokens are zeros: g = 0, β = 0 make them identities.
    """
    b, t, h, d = q.shape
    e = v.shape[3]
    n = check_inputs(q, k, v, initial_state, cu_seqlens)
    check_gates(q, g, beta)
    cdt = compute_dtype(q)
    k, v = expand_kv(k, h), expand_kv(v, h)
    toks = [x.astype(cdt) for x in (q, k, v, g, beta)]
    h0 = jnp.zeros((n, h, d, e), cdt) if initial_state is None else initial_state.astype(cdt)
    c = max(1, min(int(chunk), t))
    if cu_seqlens is None:
        pad = -t % c
        if pad:
            toks = [jnp.pad(x, [(0, 0), (0, pad)] + [(0, 0)] * (x.ndim - 2)) for x in toks]
        return toks, h0, Layout(c, None, None, None, None)
    cu = concrete_cu(cu_seqlens, "the GDN kernels")
    src, dst, flag, seq, last = varlen_layout(cu, t, c)
    toks = [jnp.concatenate([x, jnp.zeros((1, 1) + x.shape[2:], x.dtype)], axis=1)[:, src] for x in toks]
    return toks, h0, Layout(c, dst, flag, seq, last)


def to_chunks(x: Array, c: int) -> Array:
    """[B, Tp, H, ...] -> [B, H, NC, C, ...]."""
    b, tp, h = x.shape[:3]
    return jnp.moveaxis(x.reshape((b, tp // c, c, h) + x.shape[3:]), 3, 1)


def from_chunks(x: Array) -> Array:
    """[B, H, NC, C, ...] -> [B, NC·C, H, ...]."""
    b, h, nc, c = x.shape[:4]
    return jnp.moveaxis(x, 1, 3).reshape((b, nc * c, h) + x.shape[4:])


def unlayout(o: Array, t: int, lay: Layout) -> Array:
    """Padded outputs [B, Tp, H, E] back to the tokens' own positions [B, T, H, E]."""
    return o[:, :t] if lay.dst is None else o[:, lay.dst]


# ----------------------------------------------------------------------------------------------
# the three steps
# ----------------------------------------------------------------------------------------------

def gate_sums(g: Array) -> tuple[Array, Array, Array]:
    """Log decays inside each chunk from the gates g [..., C] (each ≤ 0, each a sum of its own terms).

    Returns (prefix [..., C]: Σ_{l≤i} g_l, the decay from the chunk start through token i;
    suffix [..., C]: Σ_{l>i} g_l, from token i to the chunk end;
    segment [..., C, C]: Σ_{j<l≤i} g_l for i > j, 0 elsewhere, the decay from token j to token i).
    """
    c = g.shape[-1]
    prefix = jnp.cumsum(g, axis=-1)
    from_i = jnp.flip(jnp.cumsum(jnp.flip(g, -1), -1), -1)                  # Σ_{l≥i}
    suffix = jnp.concatenate([from_i[..., 1:], jnp.zeros_like(from_i[..., :1])], axis=-1)
    after_j = jnp.tril(jnp.ones((c, c), bool), -1)                           # [l, j]: l > j
    segment = jnp.cumsum(jnp.where(after_j, g[..., :, None], 0.0), axis=-2)  # [i, j]: Σ_{l≤i, l>j}
    return prefix, suffix, segment


def _decay_mask(segment: Array) -> Array:
    """M[i, j] = e^{G_i − G_j} for j ≤ i, else 0, from the segment sums [..., C, C]."""
    c = segment.shape[-1]
    return jnp.where(jnp.tril(jnp.ones((c, c), bool)), jnp.exp(segment), 0.0)


def _wy(k: Array, v: Array, beta: Array, prefix: Array, decay: Array) -> tuple[Array, Array]:
    """u = (I + A)^{-1} (β ⊙ V), w = (I + A)^{-1} (β e^G ⊙ K) for every chunk at once.

    k [B, H, NC, C, D], v [.., C, E], beta / prefix [.., C], decay [.., C, C] = M (lower, with
    its diagonal). One triangular solve on [u | w]'s right-hand sides together.
    """
    c, e = k.shape[-2], v.shape[-1]
    strict = jnp.tril(jnp.ones((c, c), bool), -1)
    a = jnp.where(strict, beta[..., :, None] * _ein("...id,...jd->...ij", k, k) * decay, 0.0)
    rhs = jnp.concatenate([beta[..., None] * v, (beta * jnp.exp(prefix))[..., None] * k], axis=-1)
    eye = jnp.eye(c, dtype=a.dtype)
    x = lax.linalg.triangular_solve(eye + a, rhs, left_side=True, lower=True, unit_diagonal=True)
    return x[..., :e], x[..., e:]


@jax.checkpoint
def _prep(k: Array, v: Array, g: Array, beta: Array) -> tuple[Array, Array, Array, Array]:
    """Everything the scan needs that does not depend on the state, for all chunks at once:
    (u, w, kd = e^{G_C − G} ⊙ k, lam = e^{G_C} [B, H, NC]). Checkpointed: the backward recomputes
    the [C, C] tensors instead of keeping them."""
    prefix, suffix, segment = gate_sums(g)
    u, w = _wy(k, v, beta, prefix, _decay_mask(segment))
    return u, w, k * jnp.exp(suffix)[..., None], jnp.exp(prefix[..., -1])


def _state_scan(w: Array, u: Array, kd: Array, lam: Array, h0: Array, lay: Layout) -> tuple[Array, Array, Array]:
    """The sequential part: ν = u − w S and S' = λ S + kdᵀ ν, chunk after chunk.

    w [B, H, NC, C, D], u [.., C, E], kd = e^{G_C − G} ⊙ k [.., C, D], lam = e^{G_C} [B, H, NC];
    h0 [N, H, D, E]. Returns (S entering each chunk [B, H, NC, D, E], ν [B, H, NC, C, E], final
    states [N, H, D, E]). The body is checkpointed: the backward keeps only the entering states.
    """
    varlen = lay.dst is not None
    xs = tuple(jnp.moveaxis(x, 2, 0) for x in (w, u, kd, lam))
    if varlen:
        xs = xs + (jnp.asarray(lay.flag), jnp.asarray(lay.seq))

    @jax.checkpoint
    def step(s, x):
        w_n, u_n, kd_n, lam_n = x[:4]
        if varlen:
            s = jnp.where(x[4], h0[x[5]][None], s)                              # a sequence starts
        nu = u_n - _ein("bhcd,bhde->bhce", w_n, s)
        s_next = lam_n[..., None, None] * s + _ein("bhcd,bhce->bhde", kd_n, nu)
        return s_next, (s, nu)

    s0 = jnp.zeros((1,) + h0.shape[1:], h0.dtype) if varlen else h0
    s_end, (s_in, nu) = lax.scan(step, s0, xs)
    s_in, nu = jnp.moveaxis(s_in, 0, 2), jnp.moveaxis(nu, 0, 2)
    if not varlen:
        return s_in, nu, s_end
    # each sequence's final state: its last chunk's update once more (sequences without tokens: h0)
    last = np.maximum(lay.last, 0)
    per_chunk = lambda x: jnp.moveaxis(x[0], 1, 0)[last]  # noqa: E731 - [B=1, H, NC, ...] -> [N, H, ...]
    s_last = per_chunk(lam)[..., None, None] * per_chunk(s_in) + _ein(
        "nhcd,nhce->nhde", per_chunk(kd), per_chunk(nu))
    final = jnp.where(jnp.asarray(lay.last >= 0)[:, None, None, None], s_last, h0)
    return s_in, nu, final


def _outputs(q: Array, k: Array, g: Array, s_in: Array, nu: Array, scale: float) -> Array:
    """O = scale·[(e^G ⊙ Q) S + ((Q Kᵀ) ⊙ M) ν] for every chunk at once: [B, H, NC, C, E]."""
    prefix, _, segment = gate_sums(g)
    inter = _ein("bhncd,bhnde->bhnce", q * jnp.exp(prefix)[..., None], s_in)
    scores = _ein("...id,...jd->...ij", q, k) * _decay_mask(segment)
    return scale * (inter + _ein("...ij,...je->...ie", scores, nu))


def _chunk_forward(q: Array, k: Array, v: Array, g: Array, beta: Array, h0: Array, scale: float,
                   lay: Layout) -> tuple[Array, Array]:
    """Padded tokens [B, Tp, H, ...] -> (o [B, Tp, H, E], final [N, H, D, E])."""
    qc, kc, vc, gc, bc = (to_chunks(x, lay.c) for x in (q, k, v, g, beta))
    u, w, kd, lam = _prep(kc, vc, gc, bc)
    s_in, nu, final = _state_scan(w, u, kd, lam, h0, lay)
    # checkpointed too: the scores and decay mask are recomputed in the backward, not kept
    o = jax.checkpoint(partial(_outputs, scale=scale))(qc, kc, gc, s_in, nu)
    return from_chunks(o), final


def gdn_chunked(q: Array, k: Array, v: Array, g: Array, beta: Array, scale: float | None = None,
                initial_state: Array | None = None, output_final_state: bool = True, cu_seqlens=None,
                chunk: int = 64) -> tuple[Array, Array | None]:
    """Gated delta rule, chunked (WY form); returns (o [B, T, H, E] in q's dtype, S_T or None).

    q [B, T, H, D]; k [B, T, H_kv, D] (L2-normalised by the caller); v [B, T, H_kv, E];
    g [B, T, H] log gates ≤ 0 and beta [B, T, H] in (0, 1), per query head; initial_state
    [N, H, D, E]; cu_seqlens [N + 1] (B = 1, concrete). S_T [N, H, D, E] in fp32 (fp64 for fp64
    inputs). Gradients for q, k, v, g, beta and initial_state by autodiff.
    """
    return run_in_layout(_chunk_forward, q, k, v, g, beta, scale, initial_state, output_final_state, cu_seqlens,
                         chunk)


def run_in_layout(core, q: Array, k: Array, v: Array, g: Array, beta: Array, scale: float | None,
                  initial_state: Array | None, output_final_state: bool, cu_seqlens, chunk: int
                  ) -> tuple[Array, Array | None]:
    """The public call around a core ``core(q, k, v, g, beta, h0, scale, layout) -> (o, S_T)`` on the
    chunked layout: checks and layout in, the output back in [B, T, H, E] and the input dtype."""
    b, t, h, d = q.shape
    scale = float(default_scale(scale, d))
    toks, h0, lay = prepare(q, k, v, g, beta, initial_state, cu_seqlens, chunk)
    if t == 0:
        return jnp.zeros((b, 0, h, v.shape[3]), q.dtype), (h0 if output_final_state else None)
    o, final = core(*toks, h0, scale, lay)
    o = unlayout(o, t, lay).astype(q.dtype)
    return o, (final if output_final_state else None)
