"""Calls of jitted helpers in Triton's interpreter without patching the language again.

Why: the interpreter patches triton.language's builtins for a launch (an ``inspect.getmembers``
sweep over ``tl``, ``tl.tensor``, ``tl.math`` and ``tl.core``) and restores them when it ends, but it
also runs that sweep on every call of a ``@triton.jit`` helper inside the launch, while the
launch's patch is still in place. A kernel that calls its helpers per chunk, level and slice (the
GLA and gated delta rule kernels) spends about a third of its interpreted time there. ``install``
lets a helper call whose language modules the running launch has patched skip the sweep; every
other call patches as before. The harness installs it beside ``interpreter_bf16``.
"""
from __future__ import annotations

import inspect
import threading

_INSTALLED = False
_PATCHED = threading.local()  # the language modules the running launch patched (ids), or None


def install() -> bool:
    """Wrap the interpreter's language patch (once a process); False where this Triton's
    interpreter has another form (its own behaviour is kept)."""
    global _INSTALLED
    if _INSTALLED:
        return True
    try:
        from triton import language as tl
        from triton.runtime import interpreter as interp
        original = interp._patch_lang
        scope_type = interp._LangPatchScope
    except (ImportError, AttributeError):
        return False
    if not callable(getattr(scope_type, "restore", None)):
        return False

    class _Kept:
        """The scope of a call that patched nothing: nothing to restore."""

        def restore(self) -> None:
            pass

    def patch_lang(fn):
        langs = frozenset(id(v) for v in fn.__globals__.values() if inspect.ismodule(v) and v in (tl, tl.core))
        patched = getattr(_PATCHED, "langs", None)
        if patched is not None and langs and langs <= patched:
            return _Kept()
        scope = original(fn)
        _PATCHED.langs = langs | (patched or frozenset())
        restore = scope.restore

        def restore_and_forget() -> None:
            restore()
            _PATCHED.langs = patched
        scope.restore = restore_and_forget
        return scope

    interp._patch_lang = patch_lang
    _INSTALLED = True
    return True
