"""bf16 in Triton's interpreter as the GPU computes it, for Triton kernels run on a CPU.

Why: the interpreter keeps a bf16 tensor as its uint16 bit patterns and hands those bits to numpy
as they are, so a bf16 dot multiplies integers (triton#11584), bf16 arithmetic adds integers, and
its fp32 → bf16 cast truncates where the GPU rounds to nearest even. ``install`` wraps the
interpreter's builder so that every float operation on bf16 operands runs on their fp32 values and
rounds its result to bf16 (to nearest even, NaN kept), a bf16 dot multiplies the fp32 values, and
the fp32 → bf16 cast rounds. Bit-level operations (loads, stores, selects, bit casts) keep the bits.
The harness installs it before a Triton kernel's first CPU point; the tests, once the interpreter
is chosen.
"""
from __future__ import annotations

import numpy as np

_INSTALLED = False


def to_f32(bits: np.ndarray) -> np.ndarray:
    """bf16 bit patterns (uint16) as fp32 values (exact)."""
    return (np.asarray(bits).astype(np.uint32) << 16).view(np.float32)


def from_f32(x: np.ndarray) -> np.ndarray:
    """fp32 values rounded to bf16 (to nearest, ties to even; NaN stays NaN) as uint16 bits."""
    b = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rounded = ((b + np.uint32(0x7FFF) + ((b >> 16) & np.uint32(1))) >> 16).astype(np.uint16)
    nan = np.isnan(np.asarray(x, dtype=np.float32))
    return np.where(nan, ((b >> 16) | np.uint32(0x40)).astype(np.uint16), rounded)


def install() -> bool:
    """Wrap the interpreter's builder (once a process); False where this Triton's interpreter has
    another form (its own behaviour is kept)."""
    global _INSTALLED
    if _INSTALLED:
        return True
    try:
        from triton import language as tl
        from triton.runtime import interpreter as interp
        builder = interp.InterpreterBuilder
        handle = interp.TensorHandle
        originals = {name: getattr(builder, name) for name in
                     ("binary_op", "unary_op", "create_fma", "create_dot", "cast_impl")}
    except (ImportError, AttributeError):
        return False

    def is_bf16(h) -> bool:
        return getattr(h, "dtype", None) is not None and h.dtype.scalar == tl.bfloat16

    def as_f32(h):
        return handle(to_f32(h.data), tl.float32) if is_bf16(h) else h

    def back(out):
        """An fp32 result of bf16 operands rounded back to bf16."""
        if out.dtype.scalar == tl.float32:
            return handle(from_f32(out.data), tl.bfloat16)
        return out

    def binary_op(self, lhs, rhs, op):
        if is_bf16(lhs) or is_bf16(rhs):
            raw = op(as_f32(lhs).data, as_f32(rhs).data)
            if raw.dtype == np.bool_:  # a comparison: typed as the interpreter types a bf16 one
                return handle(raw.astype(np.uint16), tl.bfloat16)
            return handle(from_f32(raw.astype(np.float32)), tl.bfloat16)
        return originals["binary_op"](self, lhs, rhs, op)

    def unary_op(self, arg, op):
        if is_bf16(arg):
            return back(originals["unary_op"](self, as_f32(arg), op))
        return originals["unary_op"](self, arg, op)

    def create_fma(self, x, y, z):
        if any(is_bf16(h) for h in (x, y, z)):
            return back(originals["create_fma"](self, as_f32(x), as_f32(y), as_f32(z)))
        return originals["create_fma"](self, x, y, z)

    def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
        return originals["create_dot"](self, as_f32(a), as_f32(b), d, input_precision, max_num_imprecise_acc)

    def cast_impl(self, src, dst_type):
        if src.dtype.scalar == tl.float32 and dst_type.scalar == tl.bfloat16:
            return handle(from_f32(src.data), tl.bfloat16)
        return originals["cast_impl"](self, src, dst_type)

    for name, fn in (("binary_op", binary_op), ("unary_op", unary_op), ("create_fma", create_fma),
                     ("create_dot", create_dot), ("cast_impl", cast_impl)):
        setattr(builder, name, fn)
    _INSTALLED = True
    return True
