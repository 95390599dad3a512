"""Shared test fixtures."""

import ipaddress
import socket

import pytest

# Nothing leaves the machine: no Hub lookups or telemetry from the Hugging Face libraries (set before
# any test module imports them)
import grpolab.utils.offline  # noqa: F401

# ... and this process resolves no other host than loopback: a lookup of anything else is refused and
# recorded, and the test during which it happened fails (sandboxed programs and browsers run in their
# own processes; their isolation is tested where they are).
_real_getaddrinfo = socket.getaddrinfo
_OFF_MACHINE: list[str] = []


def _loopback(host) -> bool:
    if host in (None, "", "localhost") or (isinstance(host, (str, bytes)) and str(host).endswith(".localhost")):
        return True
    try:
        return ipaddress.ip_address(host.decode() if isinstance(host, bytes) else host).is_loopback
    except ValueError:
        return False


def _guarded_getaddrinfo(host, *args, **kwargs):
    if not _loopback(host):
        _OFF_MACHINE.append(str(host))
        raise OSError(f"tests may not reach {host!r}: only loopback (tests/conftest.py)")
    return _real_getaddrinfo(host, *args, **kwargs)


socket.getaddrinfo = _guarded_getaddrinfo


@pytest.fixture(autouse=True)
def _no_off_machine_lookups():
    before = len(_OFF_MACHINE)
    yield
    assert _OFF_MACHINE[before:] == [], f"this test looked up hosts off the machine: {_OFF_MACHINE[before:]}"


@pytest.fixture
def kill_during_step(monkeypatch):
    """``kill_during_step(n, run)``: call ``run()`` with the training loop killed during step ``n``.

    The kill is a KeyboardInterrupt raised from the ``n``-th call of the loop's per-step metrics,
    i.e. after step ``n``'s update and before its checkpoint, as a Ctrl-C or a scheduler would.
    The loop is restored afterwards.
    """
    from grpolab.train import loop

    def kill(n: int, run) -> None:
        real, calls = loop.step_metrics, {"n": 0}

        def crash(*a, **k):
            calls["n"] += 1
            if calls["n"] == n:
                raise KeyboardInterrupt("simulated kill")
            return real(*a, **k)

        monkeypatch.setattr(loop, "step_metrics", crash)
        try:
            with pytest.raises(KeyboardInterrupt):
                run()
        finally:
            monkeypatch.setattr(loop, "step_metrics", real)
        assert calls["n"] == n, "the run ended before the step that was to be killed"

    return kill


class SFTSteps:
    """The supervised warm start's steps, counted: ``taken`` calls of ``sft_batch`` (one per step).

    With ``kill_at = n`` the n-th call raises KeyboardInterrupt before that step's update, as a
    Ctrl-C or a scheduler would: steps 1..n-1 and their checkpoints are done. ``reset()`` starts
    a new count and disarms the kill.
    """

    def __init__(self) -> None:
        self.taken, self.kill_at = 0, None

    def reset(self) -> None:
        self.taken, self.kill_at = 0, None


@pytest.fixture
def sft_steps(monkeypatch):
    from grpolab.train import sft

    steps, real = SFTSteps(), sft.sft_batch

    def counted(*a, **k):
        steps.taken += 1
        if steps.taken == steps.kill_at:
            raise KeyboardInterrupt("simulated kill")
        return real(*a, **k)

    monkeypatch.setattr(sft, "sft_batch", counted)
    return steps
