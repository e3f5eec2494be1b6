"""The env block's commit (the checkout's own, or the one a device script passes in) and knobs."""
import secrets

from lattnbench import env


def test_commit_override_wins(monkeypatch):
    sha = secrets.token_hex(6)
    monkeypatch.setenv("LATTNBENCH_COMMIT", sha)
    assert env.commit() == sha


def test_commit_from_the_checkout(monkeypatch):
    monkeypatch.delenv("LATTNBENCH_COMMIT", raising=False)
    got = env.commit()
    head = env._run(["git", "rev-parse", "--short=12", "HEAD"], cwd=str(env.Path(env.__file__).resolve().parent))
    assert got is not None and head is not None and got.split("-")[0] == head


def test_knobs_record_the_kernel_switches_that_are_set(monkeypatch):
    value = secrets.token_hex(3)
    monkeypatch.setenv("LIGHTNING_TRITON_TMA", value)
    monkeypatch.setenv("GLA_JAX_GLUON_PREP", value[::-1])  # every kernel switch, the JAX bridge's too
    monkeypatch.setenv("LIGHTNING_OTHER_THING", "x")  # not a knob prefix
    monkeypatch.delenv("LIGHTNING_TRITON_FAST_LAUNCH", raising=False)
    block = env.collect(with_gpu=False)
    assert block["knobs"]["LIGHTNING_TRITON_TMA"] == value
    assert block["knobs"]["GLA_JAX_GLUON_PREP"] == value[::-1]
    assert "LIGHTNING_TRITON_FAST_LAUNCH" not in block["knobs"] and "LIGHTNING_OTHER_THING" not in block["knobs"]
    assert list(block["knobs"]) == sorted(block["knobs"])
