"""TRL adapter across 2 CPU processes (torchrun + gloo): gathered BA weights make the averaged
gradient equal the single-process full-batch gradient, with a prompt group split across processes."""

import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("trl")
WORKER = Path(__file__).with_name("trl_ddp_worker.py")


@pytest.mark.slow
def test_two_processes_reproduce_the_full_batch_gradient():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
           "--master_port", str(port), str(WORKER)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, (out.stdout + out.stderr)[-3000:]
    assert "max |grad diff|" in out.stdout
