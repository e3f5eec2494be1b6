"""The results file: round trip, atomic incremental writes, resume keys, clear errors."""
import json
import math
import random

import pytest

from lattnbench.results import SCHEMA, ResultsError, ResultsWriter, load, row_key, to_frame, write_csv


def make_row(rng, **kw):
    row = {"kernel": rng.choice(["lightning/triton", "softmax/sdpa-flash"]), "family": "lightning",
           "framework": "torch", "device": "cuda", "batch": 4, "seqlen": rng.choice([512, 1024]),
           "heads": 32, "kv_heads": 32, "dim_qk": 128, "dim_v": 128, "dtype": "bf16", "mode": "fwd",
           "metric": "time_ms", "median": rng.uniform(0.1, 9), "p20": 0.1, "p80": 9.0, "samples": 10,
           "status": "ok", "reason": None}
    row.update(kw)
    return row


def test_round_trip_keeps_every_row_and_special_floats(tmp_path):
    rng = random.Random()
    path = tmp_path / "r.json"
    w = ResultsWriter(path, "suite-x", {"gpu": "H200"}, {"copy_gbps": 4200.0})
    rows = [make_row(rng) for _ in range(5)] + [make_row(rng, metric="err_ratio", median=math.nan, tensor="dq")]
    for r in rows:
        w.add(r)
        assert len(load(path)["rows"]) == rows.index(r) + 1  # written as it goes
    doc = load(path)
    assert doc["schema"] == SCHEMA and doc["suite"] == "suite-x" and doc["env"] == {"gpu": "H200"}
    assert [r["median"] for r in doc["rows"][:5]] == [r["median"] for r in rows[:5]]
    assert math.isnan(doc["rows"][-1]["median"])
    json.loads(path.read_text())  # standard JSON (no bare NaN)
    frame = to_frame(doc)
    assert len(frame) == 6 and set(frame["kernel"]) <= {"lightning/triton", "softmax/sdpa-flash"}
    write_csv(doc, tmp_path / "r.csv")
    assert (tmp_path / "r.csv").read_text().count("\n") == 7


def test_resume_keeps_old_rows_and_keys(tmp_path):
    rng = random.Random()
    path = tmp_path / "r.json"
    w = ResultsWriter(path, "s", {})
    first = make_row(rng, seqlen=512)
    w.add(first)
    w2 = ResultsWriter(path, "s", {}, resume=True)
    assert row_key(first) in w2.done_keys() and len(w2.rows) == 1
    assert row_key(make_row(rng, seqlen=4096)) not in w2.done_keys()
    assert ResultsWriter(path, "s", {}).rows == []  # without resume a run starts afresh


def test_resume_keeps_the_first_env_and_records_each_resumed_call(tmp_path):
    path = tmp_path / "r.json"
    ResultsWriter(path, "s", {"time": "t0", "host": "a", "gpu_uuid": "GPU-1", "cpu": "x"}).add(
        make_row(random.Random(), seqlen=512))
    ResultsWriter(path, "s", {"time": "t1", "host": "b", "gpu_uuid": "GPU-2", "cpu": "y"}, resume=True)
    ResultsWriter(path, "s", {"time": "t2", "host": "b", "gpu_uuid": "GPU-2"}, resume=True)
    doc = json.loads(path.read_text())
    assert doc["env"]["host"] == "a" and doc["env"]["gpu_uuid"] == "GPU-1"
    assert [(c["time"], c["host"], c["gpu_uuid"]) for c in doc["resumed"]] == [("t1", "b", "GPU-2"), ("t2", "b", "GPU-2")]
    assert "cpu" not in doc["resumed"][0]


@pytest.mark.parametrize("content, message", [
    ("{not json", "not valid JSON"),
    ('{"schema": "other/1", "rows": []}', "not a lattnbench results file"),
    ("[1, 2]", "not a lattnbench results file"),
    ('{"schema": "lattnbench.results/1", "rows": {}}', "'rows' must be a list"),
    ('{"schema": "lattnbench.results/1", "rows": [{"kernel": "x"}]}', "row 0 lacks"),
])
def test_bad_files_give_one_line_errors(tmp_path, content, message):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(ResultsError, match=message) as info:
        load(path)
    assert "\n" not in str(info.value)


def test_missing_file_and_unwritable_path(tmp_path):
    with pytest.raises(ResultsError, match="no such results file"):
        load(tmp_path / "nope.json")
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(ResultsError, match="cannot"):
        ResultsWriter(blocker / "sub" / "r.json", "s", {})


def test_gzip_compressed_files_read_as_the_plain_ones(tmp_path):
    """``X.json.gz`` (how large committed files are stored) loads as ``X.json``; ``X.json`` that is
    missing is read from ``X.json.gz`` beside it; the default suite name is ``X`` either way."""
    import gzip

    from lattnbench.results import display_name, results_stem

    rng = random.Random(1)
    plain = tmp_path / "plain" / "r.json"
    w = ResultsWriter(plain, "suite-x", {"gpu": "H200"})
    w.add([make_row(rng), make_row(rng, metric="err_ratio", median=math.inf, tensor="dq")])
    packed = tmp_path / "packed" / "r.json.gz"
    packed.parent.mkdir()
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    want = json.dumps(load(plain), sort_keys=True)
    assert json.dumps(load(packed), sort_keys=True) == want
    assert json.dumps(load(tmp_path / "packed" / "r.json"), sort_keys=True) == want  # resolved to .gz
    assert display_name(packed) == "r.json" and results_stem(packed) == "r" and display_name(plain) == "r.json"
    # a document without a suite is named after the file, not after "r.json"
    doc = json.loads(plain.read_text())
    del doc["suite"]
    packed.write_bytes(gzip.compress(json.dumps(doc).encode()))
    assert load(packed)["suite"] == "r"
    # a plain file wins over a compressed one of the same name (no guessing when both exist)
    (tmp_path / "packed" / "r.json").write_text(plain.read_text())
    assert load(tmp_path / "packed" / "r.json")["suite"] == "suite-x"


@pytest.mark.parametrize("content", [b"\x1f\x8b\x08\x00garbage", b"\x1f\x8b"])
def test_corrupt_gzip_is_a_one_line_error(tmp_path, content):
    path = tmp_path / "bad.json.gz"
    path.write_bytes(content)
    with pytest.raises(ResultsError, match="cannot read") as info:
        load(path)
    assert "\n" not in str(info.value) and "bad.json.gz" in str(info.value)
