"""PyTorch adapter: inputs on the device, fwd / fwd+bwd / bwd-alone callables, grads, peak memory."""
from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from lattnbench.adapters.base import Problem
from lattnbench.errors import Unsupported
from lattnbench.operators.inputs import UNIT_EPS
from lattnbench.registry.entry import KernelEntry
from lattnbench.spec import Case

DTYPES = {"fp64": torch.float64, "fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


class TorchProblem(Problem):
    """torch tensors on the device; gradients from torch.autograd."""

    def __init__(self, entry: KernelEntry, case: Case, device: str, seed: int = 0,
                 arrays: dict[str, np.ndarray] | None = None, tensors: dict[str, torch.Tensor] | None = None) -> None:
        super().__init__(entry, case, device, seed)
        self.device = torch.device(device)
        self.tensors = tensors if tensors is not None else self._build(arrays, seed)
        self.gamma = torch.as_tensor(self.const.gamma, device=self.device)
        self.cu = (None if self.const.cu_seqlens is None
                   else torch.as_tensor(self.const.cu_seqlens, device=self.device))
        self.diff = self.differentiable(self.tensors)
        self._prepared: tuple | None = None
        self._cots: list | None = None
        self._step: tuple | None = None

    def inputs(self) -> dict[str, torch.Tensor]:
        return self.tensors

    def _build(self, arrays, seed) -> dict[str, torch.Tensor]:
        out = {}
        if arrays is None:  # draw on the device: no host round trip for gigabyte inputs
            gen = torch.Generator(device=self.device).manual_seed(seed)
            for name, shape in self.fam.shapes(self.case).items():
                x = torch.randn(shape, generator=gen, device=self.device, dtype=torch.float32)
                out[name] = draw(x, self.fam.draw(name), self.case).to(DTYPES[self.stored_dtype(name)])
        else:
            for name, x in arrays.items():
                want = DTYPES[self.stored_dtype(name)]
                out[name] = torch.from_numpy(x).to(self.device, want)
        return out

    # -- calls ---------------------------------------------------------------------------------
    def _call(self, t: dict[str, torch.Tensor]):
        return self.call(self.fn, t, self.gamma, self.cu)

    def fwd(self):
        with torch.no_grad():
            return self._call(self.tensors)

    def _graph(self):
        """One forward with autograd recording. The leaves and cotangents are made once and reused
        (autograd.grad does not accumulate), so the harness's own tensor preparation stays out of
        the timed fwd+bwd: at n ≤ 1024 those few torch calls were a visible share of it."""
        if self._prepared is None:
            leaves = {n: (x.detach().requires_grad_(True) if n in self.diff else x)
                      for n, x in self.tensors.items()}
            self._prepared = (leaves, [leaves[n] for n in self.diff])
        leaves, diff_leaves = self._prepared
        outs = self._call(leaves)
        if self._cots is None:  # the kernel's outputs (how many, which dtype) are fixed per point
            self._cots = [self.tensors["do"].to(outs[0].dtype)] + ([self.tensors["dS"]] if len(outs) > 1 else [])
        cots = self._cots
        return outs, diff_leaves, cots

    def fwdbwd(self):
        if self.entry.step is not None:
            return self._whole_step()
        outs, leaves, cots = self._graph()
        grads = torch.autograd.grad(outs, leaves, cots, allow_unused=True)
        return outs, grads

    def _whole_step(self):
        """fwd+bwd through the entry's step function, made once from the eager forward and
        ``autograd.grad``, on the same prepared leaves and cotangents every call."""
        if self._step is None:
            _, _, cots = self._graph()  # one eager call fixes the cotangents
            leaves = self._prepared[0]
            names, diff = list(leaves), list(self.diff)

            def run(*args):
                t = dict(zip(names, args[:len(names)]))
                outs = self._call(t)
                grads = torch.autograd.grad(outs, [t[n] for n in diff], args[len(names):], allow_unused=True)
                return tuple(o.detach() for o in outs), grads
            self._step = (self.entry.step(run), (*leaves.values(), *cots))
        step, args = self._step
        return step(*args)

    def bwd_callable(self) -> Callable[[], object]:
        """Backward alone: the graph is built once, untimed; each call re-runs only the backward."""
        if self.entry.step is not None:
            raise Unsupported("a whole-step kernel runs fwd and bwd as one function: no backward alone")
        outs, leaves, cots = self._graph()
        return lambda: torch.autograd.grad(outs, leaves, cots, retain_graph=True, allow_unused=True)

    def sync(self, _result=None) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    # -- check-grad ----------------------------------------------------------------------------
    def results(self) -> dict[str, torch.Tensor | None]:
        """Outputs and gradients by tensor name (o, final_state, dq, dk, dv, dh0, dg). A whole
        step's are copied out: replayed from a CUDA graph, its next call overwrites them."""
        outs, grads = self.fwdbwd()
        if self.entry.step is not None:
            outs, grads = ([None if x is None else x.clone() for x in xs] for xs in (outs, grads))
        return self.named(outs, grads)

    # -- memory --------------------------------------------------------------------------------
    def peak_mb(self, mode: str) -> tuple[float, str]:
        """Peak bytes allocated above the live inputs during one call of ``mode``, in MB."""
        if self.device.type != "cuda":
            raise Unsupported("torch peak memory needs a CUDA device (the CPU allocator keeps no peak)")
        run = self.fwd if mode == "fwd" else self.fwdbwd
        run()  # warm: autotuning and compilation allocate too
        self.sync()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(self.device)
        base = torch.cuda.memory_allocated(self.device)
        result = run()
        self.sync()
        peak = torch.cuda.max_memory_allocated(self.device) - base
        del result
        return peak / 2**20, "torch.cuda.max_memory_allocated"


def draw(x: torch.Tensor, how: str, case: Case) -> torch.Tensor:
    """A standard-normal fp32 draw made into an input: a gate ``logsigmoid(x) / gate_norm``, q, k, v
    times ``input_scale``, a unit vector over the last axis, or σ(x) (the family's ``draw`` names which)."""
    if how == "gate":
        return torch.nn.functional.logsigmoid(x) / case.gate_norm
    if how == "unit":
        return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + UNIT_EPS)
    if how == "sigmoid":
        return torch.sigmoid(x)
    return x * case.input_scale if how == "scaled" else x


def is_oom(exc: BaseException) -> bool:
    return isinstance(exc, torch.OutOfMemoryError) or "out of memory" in str(exc).lower()
