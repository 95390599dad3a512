"""grpolab.bench: the benchmark toolkit's records, counts, timing order and atomic write."""

import json
import os

import pytest
import torch

from grpolab import bench


def test_machine_record_names_the_machine_and_the_versions():
    m = bench.machine(threads=1)
    assert m["cpu_count"] == os.cpu_count() and m["torch_threads"] == torch.get_num_threads()
    assert m["versions"]["torch"].split("+")[0] == torch.__version__.split("+")[0]
    assert "grpolab" in m["versions"] and m["threads"] == 1
    assert len(m["loadavg"]) == 3
    json.dumps(m)  # a results file can carry it as it is


def test_parameter_counts_count_tied_weights_once_and_linear_weights_as_matmuls():
    class Tied(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = torch.nn.Embedding(10, 4)
            self.proj = torch.nn.Linear(4, 3, bias=True)
            self.head = torch.nn.Linear(4, 10, bias=False)
            self.head.weight = self.embed.weight

    m = Tied()
    assert bench.param_count(m) == 10 * 4 + 4 * 3 + 3        # the tied head is the embedding: once
    assert bench.linear_param_count(m) == 4 * 3 + 10 * 4      # weights that multiply activations


def test_interleaved_alternates_the_order_of_the_contenders():
    calls, rounds_done = [], []
    out = bench.interleaved({"a": lambda r: calls.append(("a", r)), "b": lambda r: calls.append(("b", r)),
                             "c": lambda r: 0.25 * (r + 1)}, rounds=3, after_round=rounds_done.append)
    assert calls == [("a", 0), ("b", 0), ("b", 1), ("a", 1), ("a", 2), ("b", 2)]   # c: r=0 last, r=1 first
    assert rounds_done == [0, 1, 2]
    assert out["c"] == [0.25, 0.5, 0.75]                   # a call that times itself reports its own seconds
    assert all(t >= 0 for t in out["a"] + out["b"]) and len(out["a"]) == 3


def test_matmul_rate_is_positive_and_counts_its_flops(monkeypatch):
    ticks = iter([0.0, 2.0])  # one product timed over 2 s: 2*m*k*n / 2 / 1e9
    monkeypatch.setattr(bench.time, "perf_counter", lambda: next(ticks))
    assert bench.matmul_gflops(100, 200, 300, reps=1, warmup=0) == pytest.approx(2 * 100 * 200 * 300 / 2 / 1e9)
    monkeypatch.undo()
    assert bench.matmul_gflops(64, 64, 64, reps=2) > 0


def test_write_json_is_atomic_and_makes_the_folder(tmp_path):
    out = bench.write_json(tmp_path / "a" / "r.json", {"x": torch.tensor([1.5])})
    assert json.loads(out.read_text()) == {"x": [1.5]}
    assert [p.name for p in out.parent.iterdir()] == ["r.json"]  # no temp file left


def test_others_cores_is_the_machines_busy_time_less_this_process_over_the_wall_time():
    # (wall, machine busy CPU-s, this process's CPU-s): 2 s of wall, 3 CPU-s busy of which 1 was ours
    assert bench.others_cores((10.0, 100.0, 5.0), (12.0, 103.0, 6.0)) == pytest.approx(1.0)
    assert bench.others_cores((10.0, 100.0, 5.0), (12.0, 100.5, 6.0)) == 0.0  # counters' jitter: not below 0
    assert bench.others_cores(None, (12.0, 103.0, 6.0)) is None
    assert bench.others_cores((12.0, 100.0, 5.0), (12.0, 103.0, 6.0)) is None  # no time passed
    now = bench.cpu_counters()
    assert now is None or (len(now) == 3 and now[1] >= 0 and now[2] >= 0)
