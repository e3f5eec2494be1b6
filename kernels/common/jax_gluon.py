"""jax-triton launching Gluon kernels: ``compile_gluon`` and ``install``.

Why: jax-triton (0.3.1) compiles a kernel as TTIR -> TTGIR -> LLIR -> PTX through the backend's
stages (``triton_lib.get_or_create_triton_kernel``). A Gluon kernel's frontend makes TTGIR itself
(``GluonASTSource.make_ir``) and takes the backend's ``gluon_to_ttgir`` stage in place of the
first two, so jax-triton cannot compile one. ``compile_gluon`` compiles it from what jax-triton's
lowering has (the argument dtypes, the scalar arguments, the constexprs); ``install`` has
jax-triton take it for Gluon kernels, and leaves every other kernel to jax-triton's own compile.
The PTX has jax-triton's own kernels' parameters: the arguments, then the two scratch pointers.
"""
from __future__ import annotations

import types
from dataclasses import dataclass


@dataclass(frozen=True)
class GluonBinary:
    """A compiled Gluon kernel: what jax-triton's ``TritonKernel`` is made of, and the arguments'
    specialization attributes its lowering passes on."""

    name: str
    num_warps: int  # warps a program launches: a warp-specialized kernel's partitions' together
    shared: int     # bytes of shared memory a program takes
    ptx: str
    ttgir: str
    attrs: dict


def specialization(backend, arg_dtypes: list[str], scalar_args) -> dict:
    """The arguments' specialization attributes as jax-triton makes them: arrays 16-byte aligned,
    scalars not specialized on alignment."""
    from triton._C.libtriton import native_specialize_impl

    scalar_idx = {i for i, _, _ in scalar_args}
    spec = [native_specialize_impl(backend, types.SimpleNamespace(data_ptr=lambda a=a: a, dtype=dt.removeprefix("*")),
                                   False, True, a > 0)
            for dt, a in ((dt, 0 if i in scalar_idx else 16) for i, dt in enumerate(arg_dtypes))]
    return {(i,): backend.parse_attr(attr) for i, (_, attr) in enumerate(spec)}


def compile_gluon(fn, backend, arg_dtypes: list[str], scalar_args, constants: dict, *, num_warps: int,
                  num_stages: int, num_ctas: int, capability: int, enable_fp_fusion: bool = True) -> GluonBinary:
    """Compile the Gluon kernel ``fn`` for ``backend`` (a CUDA backend of ``capability``) with
    jax-triton's argument list: ``arg_dtypes`` ("*bf16", "i32", ...) of every runtime argument in
    order, ``scalar_args`` ((index, dtype, value) of the scalars), ``constants`` the constexprs."""
    from triton._C.libtriton import ir
    from triton.experimental.gluon._runtime import GluonASTSource

    signature = {fn.arg_names[i]: v for i, v in enumerate(arg_dtypes)}
    attrs = specialization(backend, arg_dtypes, scalar_args)
    constants = dict(constants)
    constants.update({fn.arg_names[i]: 1 for i, _, v in scalar_args if v == 1})  # as jax-triton does
    for c in constants:
        signature[c] = "constexpr"
    options = backend.parse_options({"num_warps": num_warps, "num_stages": num_stages, "num_ctas": num_ctas,
                                     "enable_fp_fusion": enable_fp_fusion})
    context = ir.context()
    ir.load_dialects(context)
    backend.load_dialects(context)
    src = GluonASTSource(fn, signature, constexprs=constants, attrs=attrs)
    module = src.make_ir(backend.target, options, backend.get_codegen_implementation(options),
                         backend.get_module_map(), context)
    metadata: dict = {}
    ttgir = backend.gluon_to_ttgir(module, metadata, options, capability)
    text = str(ttgir)
    llir = backend.make_llir(ttgir, metadata, options, capability)
    ptx = backend.make_ptx(llir, metadata, options, capability)
    # the compile sets num_warps to the program's total, worker partitions included
    return GluonBinary(metadata["name"], int(metadata.get("num_warps", num_warps)), int(metadata["shared"]), ptx,
                       text, attrs)


def install(triton_lib) -> None:
    """Wrap ``triton_lib.get_or_create_triton_kernel`` (jax-triton's) once: Gluon kernels compile
    through ``compile_gluon`` into a ``TritonKernel``, cached as jax-triton caches its own."""
    if getattr(triton_lib, "_lattnbench_gluon", False):
        return
    from triton.experimental.gluon._runtime import GluonJITFunction

    original = triton_lib.get_or_create_triton_kernel

    def get_or_create_triton_kernel(backend_init_func, platform, fn, arg_dtypes, scalar_args, *, num_warps,
                                    num_stages, num_ctas, compute_capability, enable_fp_fusion, metaparams, dump):
        if not isinstance(fn, GluonJITFunction):
            return original(backend_init_func, platform, fn, arg_dtypes, scalar_args, num_warps=num_warps,
                            num_stages=num_stages, num_ctas=num_ctas, compute_capability=compute_capability,
                            enable_fp_fusion=enable_fp_fusion, metaparams=metaparams, dump=dump)
        if platform != "cuda":
            raise ValueError(f"Gluon kernels run on CUDA here, not {platform}")
        num_warps = 4 if num_warps is None else num_warps
        num_stages = 3 if num_stages is None else num_stages
        if compute_capability is None:
            compute_capability = triton_lib.triton_kernel_call_lib.get_compute_capability(0)
        constants = dict(metaparams)
        key = ("gluon", fn, tuple(arg_dtypes), tuple((i, d) for i, d, _ in scalar_args),
               tuple(v == 1 for _, _, v in scalar_args), tuple(sorted(constants.items())), num_warps, num_stages,
               num_ctas, compute_capability, enable_fp_fusion)
        hit = triton_lib._COMPILED_KERNEL_CACHE.get(key)
        if hit is None:
            binary = compile_gluon(fn, backend_init_func(0, compute_capability), list(arg_dtypes), scalar_args,
                                   constants, num_warps=num_warps, num_stages=num_stages, num_ctas=num_ctas,
                                   capability=compute_capability, enable_fp_fusion=enable_fp_fusion)
            kernel = triton_lib.triton_kernel_call_lib.TritonKernel(
                binary.name, binary.num_warps, num_ctas, binary.shared, binary.ptx, binary.ttgir, compute_capability)
            hit = triton_lib._COMPILED_KERNEL_CACHE[key] = (kernel, binary.attrs)
        return hit

    triton_lib.get_or_create_triton_kernel = get_or_create_triton_kernel
    triton_lib._lattnbench_gluon = True
