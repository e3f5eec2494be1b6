"""The env block's commit: the checkout's own, or the one a device script passes in."""
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
