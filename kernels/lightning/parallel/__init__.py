"""Sequence-parallel Lightning Attention: contiguous shards over ranks (torch.distributed) or a
mesh axis (JAX ``shard_map``), states combined by one all-gather (LASP-2) or a ring (LASP-1).

Public API::

    lightning_attn_sp(q_shard, k_shard, v_shard, gamma=None, scale=None, initial_state=None,
                      reverse=False, cu_seqlens=None, *, group=None, comm="allgather",
                      local="triton") -> (o_shard, S_T)
    shard_bounds(seqlen, world) -> [start of every shard..., seqlen]

The JAX form is ``lattnbench.kernels.lightning.parallel.jax_sp.lightning_attn_shard_map``.
"""
from .shards import ShardPlan, plan_shard, shard_bounds

__all__ = ["ShardPlan", "lightning_attn_sp", "plan_shard", "shard_bounds"]


def __getattr__(name: str):
    if name == "lightning_attn_sp":  # torch is imported only when the torch form is asked for
        from .lightning_sp import lightning_attn_sp

        return lightning_attn_sp
    raise AttributeError(name)
