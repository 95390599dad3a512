"""grpolab.utils.heap: the fixed mmap threshold really gives freed tensor memory back (in a child
process, so the test process's allocator is untouched), the settings are honoured, a bad value
is a clear error."""

import json
import subprocess
import sys

import pytest

from grpolab.config import ConfigError
from grpolab.utils import heap

pytestmark = pytest.mark.skipif(heap._libc() is None, reason="glibc only")

# Free 1 MiB blocks stay inside glibc's heap under the dynamic threshold when a live block sits
# above them (the heap is only trimmed from the top): the pattern of activations saved for the
# backward among short-lived temporaries.
CHILD = r"""
import json, os, sys
import torch
from grpolab.utils.heap import bound_heap
def rss_mib():
    return int(next(l for l in open("/proc/self/status") if l.startswith("VmRSS")).split()[1]) / 1024
torch.set_num_threads(1)
if sys.argv[1] == "bound":
    assert bound_heap() == 131072
big = torch.ones(4 << 20)             # 16 MiB through mmap ...
del big                               # ... freed: glibc raises its threshold to 16 MiB
before = rss_mib()
blocks = [torch.ones(1 << 18) for _ in range(300)]   # 300 x 1 MiB
pin = torch.ones(1 << 17)             # 512 KiB above them in the heap: no hole the freed blocks
                                      # left below is big enough for it (a 4 KiB pin often fell into
                                      # one, the heap was trimmed from the top: the test was flaky)
del blocks
print(json.dumps({"held_mib": rss_mib() - before}))
"""


def _held(mode: str, env=None) -> float:
    import os

    out = subprocess.run([sys.executable, "-c", CHILD, mode], capture_output=True, text=True, check=True,
                         env={**os.environ, **(env or {})})
    return json.loads(out.stdout.strip().splitlines()[-1])["held_mib"]


def test_bound_heap_gives_freed_blocks_back():
    dynamic, bound = _held("dynamic"), _held("bound")
    assert dynamic > 250  # glibc's dynamic threshold keeps the 300 freed MiB resident
    assert bound < 30  # the fixed threshold unmapped them on free


def test_zero_keeps_the_dynamic_threshold_and_user_setting_wins(monkeypatch):
    monkeypatch.setenv(heap.ENV, "0")
    assert heap.bound_heap() is None
    monkeypatch.delenv(heap.ENV)
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "65536")
    assert heap.bound_heap() is None  # glibc already took the user's own threshold
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_")
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.mmap_threshold=65536")
    assert heap.bound_heap() is None


def test_several_threads_keep_glibc_unless_asked(monkeypatch):
    monkeypatch.delenv(heap.ENV, raising=False)
    monkeypatch.setattr(heap, "_threads", lambda: 2)
    assert heap.bound_heap() is None  # unmapping under two threads costs more than it saves
    monkeypatch.setenv(heap.ENV, "131072")
    assert heap.bound_heap() == 131072


def test_bad_threshold_is_a_clear_error(monkeypatch):
    monkeypatch.setenv(heap.ENV, "lots")
    with pytest.raises(ConfigError, match="GRPOLAB_MMAP_THRESHOLD='lots'.*0 keeps glibc's dynamic"):
        heap.bound_heap()


def test_release_heap_runs():
    assert heap.release_heap() is True
