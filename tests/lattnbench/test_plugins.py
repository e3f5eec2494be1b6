"""Plugins: ``--kernel package.module:function``, the ``lattnbench.kernels`` entry points, the
``lattnbench_*`` attributes, and the example package under examples/my_kernel (docs/plugins.md)."""
from __future__ import annotations

import json
import sys
import tomllib
import types
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lattnbench import registry
from lattnbench.registry import entry
from lattnbench.cli import app
from lattnbench.registry import ALL_FEATURES, PLUGIN_ATTRIBUTES, load_plugin, registry_with
from lattnbench.spec import SpecError

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "my_kernel"
runner = CliRunner()

CHUNKED = "my_kernel.lightning:chunked_lightning"
JAXREC = "my_kernel.jax_lightning:recurrent_lightning"


def invoke(*args):
    return runner.invoke(app, list(args), catch_exceptions=False)


def _clear():
    entry._importable.cache_clear()
    entry._load.cache_clear()
    registry.default_registry.cache_clear()


@pytest.fixture
def example(monkeypatch):
    """The example package importable (PYTHONPATH=examples/my_kernel), caches fresh."""
    monkeypatch.syspath_prepend(str(EXAMPLE))
    _clear()
    yield monkeypatch
    _clear()


def rows_of(path: Path) -> list[dict]:
    return json.loads(path.read_text())["rows"]


# ---- the example package through the CLI ------------------------------------------------------

def test_example_plugins_pass_check_grad(example, tmp_path):
    out = tmp_path / "cg.json"
    res = invoke("check-grad", "--kernel", CHUNKED, "--kernel", JAXREC, "-k", "plugin/*", "--device", "cpu",
                 "--n", "40,100", "--kv-heads", "2", "--dim", "20", "--dim-v", "24", "--out", str(out))
    rows = rows_of(out)
    assert res.exit_code == 0, [(r["kernel"], r["tensor"], r["status"]) for r in rows if r["status"] != "ok"]
    assert {r["kernel"] for r in rows} == {"plugin/my-chunked", "plugin/my-jax-recurrent"}
    assert {r["framework"] for r in rows} == {"torch", "jax"}
    assert all(r["status"] == "ok" and r["median"] <= r["tol"] for r in rows)
    assert {r["tensor"] for r in rows} == {"o", "final_state", "dq", "dk", "dv", "dh0"}


def test_example_jax_plugin_handles_reverse(example, tmp_path):
    out = tmp_path / "cg.json"
    res = invoke("check-grad", "--kernel", JAXREC, "-k", "plugin/my-jax-recurrent", "--device", "cpu",
                 "--n", "70", "--reverse", "--out", str(out))
    assert res.exit_code == 0 and all(r["status"] == "ok" and r["reverse"] for r in rows_of(out))


@pytest.mark.parametrize("flags, needle", [(["--reverse"], "no reverse"), (["--varlen", "17,1,22"], "no varlen")])
def test_a_feature_the_plugin_lacks_is_an_unsupported_row(example, tmp_path, flags, needle):
    out = tmp_path / "cg.json"
    res = invoke("check-grad", "--kernel", CHUNKED, "-k", "plugin/my-chunked", "--device", "cpu", "--n", "40",
                 *flags, "--out", str(out))
    rows = rows_of(out)
    assert res.exit_code == 0, res.output
    assert rows and all(r["status"] == "unsupported" and needle in r["reason"] for r in rows)


def test_example_plugins_benchmark(example, tmp_path):
    out = tmp_path / "s.json"
    res = invoke("speed", "--kernel", CHUNKED, "--kernel", JAXREC, "-k", "plugin/*", "--device", "cpu",
                 "--n", "128", "--mode", "fwd,fwdbwd", "--budget", "0.01", "--out", str(out))  # two blocks
    rows = rows_of(out)
    assert res.exit_code == 0 and len(rows) == 4
    assert all(r["status"] == "ok" and r["median"] > 0 and r["metric"] == "time_ms" for r in rows)


def test_kernel_takes_a_comma_list_like_repeated_options(example):
    items = json.loads(invoke("list", "--json", "--device", "cpu", "--kernel", f"{CHUNKED},{JAXREC}").output)
    names = {i["name"] for i in items if i["origin"] == "plugin"}
    assert names == {"plugin/my-chunked", "plugin/my-jax-recurrent"}


def test_list_shows_a_plugin(example):
    items = json.loads(invoke("list", "--json", "--device", "cpu", "--kernel", CHUNKED).output)
    mine = next(i for i in items if i["name"] == "plugin/my-chunked")
    assert mine["origin"] == "plugin" and mine["available"] and mine["family"] == "lightning"
    assert mine["description"].startswith("Chunked Lightning Attention-2 in PyTorch")


# ---- entry points ---------------------------------------------------------------------------

def _install_dist_info(where: Path, entry_points: dict[str, str], name: str = "lattnbench-example-kernel"):
    """A minimal installed distribution (what pip writes) declaring ``lattnbench.kernels`` entry points."""
    info = where / f"{name.replace('-', '_')}-0.1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1.0\n")
    lines = ["[lattnbench.kernels]", *(f"{k} = {v}" for k, v in entry_points.items())]
    (info / "entry_points.txt").write_text("\n".join(lines) + "\n")


def example_entry_points() -> dict[str, str]:
    doc = tomllib.loads((EXAMPLE / "pyproject.toml").read_text())
    return doc["project"]["entry-points"]["lattnbench.kernels"]


def test_the_example_declares_its_kernels_as_entry_points():
    assert example_entry_points() == {"my-chunked": CHUNKED, "my-jax-recurrent": JAXREC}


def test_installed_entry_points_are_discovered(example, tmp_path):
    _install_dist_info(tmp_path / "site", example_entry_points())
    example.syspath_prepend(str(tmp_path / "site"))
    _clear()
    names = {e.name: e for e in registry.default_registry()}
    assert names["plugin/my-chunked"].origin == "plugin"
    assert names["plugin/my-jax-recurrent"].framework == "jax"
    out = tmp_path / "cg.json"  # no --kernel: found through the entry point alone
    res = invoke("check-grad", "-k", "plugin/my-chunked", "--device", "cpu", "--n", "40",
                 "--initial-state", "on", "--out", str(out))
    assert res.exit_code == 0 and all(r["status"] == "ok" for r in rows_of(out))
    # naming the same function again with --kernel is no clash
    assert "plugin/my-chunked" in registry_with([CHUNKED]).entries


def test_entry_point_name_is_the_default_name(example, tmp_path):
    fake = types.ModuleType("lattnbench_ep_fake")
    fake.plain = lambda q, k, v, scale: q  # noqa: E731
    fake.plain.lattnbench_family = "softmax"
    example.setitem(sys.modules, "lattnbench_ep_fake", fake)
    _install_dist_info(tmp_path / "site", {"plainy": "lattnbench_ep_fake:plain"}, name="plainy")
    example.syspath_prepend(str(tmp_path / "site"))
    _clear()
    entry = registry.default_registry()["plugin/plainy"]
    assert entry.family == "softmax" and entry.features == frozenset({"gqa", "dv", "any_dim"})


def test_broken_or_clashing_entry_points_are_skipped_with_a_warning(example, tmp_path):
    fake = types.ModuleType("lattnbench_ep_clash")

    def triton_impostor(q, k, v, gamma, scale, initial_state, reverse, cu_seqlens):
        return q, None
    triton_impostor.lattnbench_name = "lightning/triton"
    fake.impostor = triton_impostor
    example.setitem(sys.modules, "lattnbench_ep_clash", fake)
    _install_dist_info(tmp_path / "site", {"gone": "no_such_module_xyz:f", "impostor": "lattnbench_ep_clash:impostor",
                                           "ok": CHUNKED})
    example.syspath_prepend(str(tmp_path / "site"))
    _clear()
    with pytest.warns(UserWarning) as seen:
        reg = registry.default_registry()
    text = " ".join(str(w.message) for w in seen)
    assert "'gone'" in text and "no_such_module_xyz" in text
    assert "'impostor'" in text and "taken by the bundled kernel" in text
    assert reg["lightning/triton"].origin == "bundled"  # never replaced
    assert reg["plugin/my-chunked"].origin == "plugin"  # the good one still loads


# ---- the attributes ---------------------------------------------------------------------------

def _module(monkeypatch, **fns) -> str:
    mod = types.ModuleType("lattnbench_attr_fake")
    for name, fn in fns.items():
        setattr(mod, name, fn)
    monkeypatch.setitem(sys.modules, "lattnbench_attr_fake", mod)
    return "lattnbench_attr_fake"


def _lightning(q, k, v, gamma, scale, initial_state, reverse, cu_seqlens):
    from lattnbench.kernels.naive.torch_ref import lightning_naive
    o, s = lightning_naive(q, k, v, gamma, scale, initial_state, reverse, cu_seqlens)
    return o, s


def test_defaults_of_a_bare_function(monkeypatch):
    def bare(q, k, v, gamma, scale, initial_state, reverse, cu_seqlens):
        return _lightning(q, k, v, gamma, scale, initial_state, reverse, cu_seqlens)
    mod = _module(monkeypatch, bare=bare)
    e = load_plugin(f"{mod}:bare")
    assert (e.name, e.family, e.framework, e.devices) == ("plugin/bare", "lightning", "torch", ("cpu", "cuda"))
    assert e.features == ALL_FEATURES and e.dtypes == ("fp32", "bf16", "fp16")
    assert e.fixed_scale is None and e.final_state and e.origin == "plugin" and e.load() is bare


def test_every_attribute_is_honoured(monkeypatch, tmp_path):
    def described(q, k, v, gamma, scale, initial_state, reverse, cu_seqlens):
        return _lightning(q, k, v, gamma, scale, initial_state, reverse, cu_seqlens)[0], None
    described.lattnbench_name = "mine/described"
    described.lattnbench_devices = ("cpu",)
    described.lattnbench_dtypes = ("fp32",)
    described.lattnbench_features = ()
    described.lattnbench_supports = lambda case: "only T=64" if case.seqlen != 64 else None
    described.lattnbench_scale = 1.0
    described.lattnbench_final_state = False
    described.lattnbench_description = "described in full"
    described.lattnbench_sequence_parallel = True  # at world size 1 its shard is the whole sequence
    assert {a for a in dir(described) if a.startswith("lattnbench_")} | {"lattnbench_family", "lattnbench_framework"} \
        == set(PLUGIN_ATTRIBUTES)
    mod = _module(monkeypatch, described=described)
    e = load_plugin(f"{mod}:described")
    assert (e.name, e.devices, e.dtypes, e.features) == ("mine/described", ("cpu",), ("fp32",), frozenset())
    assert e.fixed_scale == 1.0 and not e.final_state and e.description == "described in full"
    assert e.sequence_parallel

    out = tmp_path / "cg.json"
    res = invoke("check-grad", "--kernel", f"{mod}:described", "-k", "mine/described", "--device", "cpu",
                 "--n", "64,65", "--initial-state", "off", "--out", str(out))
    assert res.exit_code == 0, res.output
    by = {(r["seqlen"], r["tensor"]): (r["status"], r.get("reason")) for r in rows_of(out)}
    assert by[(65, "o")] == ("unsupported", "only T=64")  # lattnbench_supports
    assert by[(64, "o")][0] == "ok"  # the reference used scale 1 too (lattnbench_scale)
    assert by[(64, "final_state")] == ("unsupported", "kernel returns no final state")
    res = invoke("check-grad", "--kernel", f"{mod}:described", "-k", "mine/described", "--device", "cpu",
                 "--n", "64", "--dtype", "fp16", "--initial-state", "on", "--out", str(out))
    assert all(r["status"] == "unsupported" and "dtype fp16" in r["reason"] for r in rows_of(out))


def test_without_the_scale_attribute_a_scale_free_kernel_fails(monkeypatch, tmp_path):
    def no_scale(q, k, v, gamma, scale, initial_state, reverse, cu_seqlens):
        return _lightning(q, k, v, gamma, 1.0, initial_state, reverse, cu_seqlens)
    mod = _module(monkeypatch, no_scale=no_scale)
    out = tmp_path / "cg.json"
    res = invoke("check-grad", "--kernel", f"{mod}:no_scale", "-k", "plugin/no_scale", "--device", "cpu",
                 "--n", "40", "--initial-state", "off", "--out", str(out))
    got = {r["tensor"]: r["status"] for r in rows_of(out)}
    assert res.exit_code == 1 and got.pop("final_state") == "ok"  # S_T does not depend on the scale
    assert set(got.values()) == {"fail"}


def test_a_gla_plugin(monkeypatch, tmp_path):
    def my_gla(q, k, v, g, scale, initial_state, reverse, cu_seqlens):
        from lattnbench.kernels.naive.torch_ref import recurrent_naive
        return recurrent_naive(q, k, v, g=g, scale=scale, initial_state=initial_state, reverse=reverse)
    my_gla.lattnbench_family = "gla"
    my_gla.lattnbench_features = ("initial_state", "reverse", "gqa", "dv", "any_dim")
    mod = _module(monkeypatch, my_gla=my_gla)
    out = tmp_path / "cg.json"
    res = invoke("check-grad", "--kernel", f"{mod}:my_gla", "-k", "plugin/my_gla", "--device", "cpu",
                 "--n", "30", "--reverse", "--out", str(out))
    rows = rows_of(out)
    assert res.exit_code == 0 and all(r["status"] == "ok" for r in rows)
    assert "dg" in {r["tensor"] for r in rows}


@pytest.mark.parametrize("attr, value, needle", [
    ("lattnbench_family", "mamba", "bad family mamba"),
    ("lattnbench_framework", "tf", "bad framework tf"),
    ("lattnbench_devices", ("tpu",), "bad device tpu"),
    ("lattnbench_dtypes", ("fp8",), "bad dtype fp8"),
    ("lattnbench_features", ("revers",), "bad feature revers"),
    ("lattnbench_supports", "yes", "must be callable"),
    ("lattnbench_scale", -1, "positive number"),
    ("lattnbench_final_state", "no", "True or False"),
    ("lattnbench_name", "two words", "bad name"),
    ("lattnbench_featurez", ("gqa",), "unknown attribute lattnbench_featurez"),
])
def test_bad_attributes_are_one_line_usage_errors(monkeypatch, tmp_path, attr, value, needle):
    def fn(q, k, v, gamma, scale, initial_state, reverse, cu_seqlens):
        return q, None
    setattr(fn, attr, value)
    mod = _module(monkeypatch, fn=fn)
    with pytest.raises(SpecError, match=needle):
        load_plugin(f"{mod}:fn")
    res = invoke("check-grad", "--kernel", f"{mod}:fn", "--out", str(tmp_path / "x.json"))
    assert res.exit_code == 2 and needle in res.output and len(res.output.strip().splitlines()) == 1


def test_a_plugin_cannot_take_a_registered_name(monkeypatch, tmp_path):
    def fake_triton(q, k, v, gamma, scale, initial_state, reverse, cu_seqlens):
        return q, None
    fake_triton.lattnbench_name = "lightning/triton"
    def other(q, k, v, gamma, scale, initial_state, reverse, cu_seqlens):
        return q, None
    other.lattnbench_name = "plugin/same"
    def another(q, k, v, gamma, scale, initial_state, reverse, cu_seqlens):
        return q, None
    another.lattnbench_name = "plugin/same"
    mod = _module(monkeypatch, fake_triton=fake_triton, other=other, another=another)
    with pytest.raises(SpecError, match="taken by the bundled kernel"):
        registry_with([f"{mod}:fake_triton"])
    with pytest.raises(SpecError, match=f"taken by {mod}:other"):
        registry_with([f"{mod}:other", f"{mod}:another"])
    assert registry_with([f"{mod}:other", f"{mod}:other"])["plugin/same"].origin == "plugin"
    res = invoke("speed", "--kernel", f"{mod}:fake_triton", "--out", str(tmp_path / "x.json"))
    assert res.exit_code == 2 and "set lattnbench_name" in res.output


def test_plugin_module_errors():
    with pytest.raises(SpecError, match="package.module:function"):
        load_plugin("nocolon")
    with pytest.raises(SpecError, match="cannot import"):
        load_plugin("no_such_module_xyz:f")
    with pytest.raises(SpecError, match="has no function"):
        load_plugin("math:no_such_function")


def test_docs_name_every_attribute():
    text = (ROOT / "docs" / "plugins.md").read_text()
    for attr in PLUGIN_ATTRIBUTES:
        assert f"`{attr}`" in text, attr
    for fn in ("fn(q, k, v, gamma, scale, initial_state, reverse, cu_seqlens)",
               "fn(q, k, v, g, scale, initial_state, reverse, cu_seqlens)", "fn(q, k, v, scale)"):
        assert fn in text
    assert CHUNKED in text and "examples/my_kernel" in text
