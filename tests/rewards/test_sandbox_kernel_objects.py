"""Issue 34, finding 5: host kernel objects a program could reach, in both modes.

On the main branch before the fix: AF_VSOCK sockets were allowed (they share the host's vsock
port space), every netlink family was, /dev/ptmx allocated host ptys (host /dev/pts grew), and
``flock(LOCK_EX)`` on a read-only host file (/etc/hostname) held the host's lock. Now socket()
takes an allow-list of families (AF_INET, AF_INET6, AF_NETLINK with NETLINK_ROUTE only), the
view has no /dev/ptmx and no host file but the interpreter's, and flock(2) is refused.
"""

from __future__ import annotations

import json
import os

import pytest

from grpolab.rewards import SandboxLimits, run_sandboxed


@pytest.fixture(params=["root", "unprivileged"])
def runner(request):
    if request.param == "root":
        pool, uid = request.getfixturevalue("isolated")
        return lambda src: run_sandboxed(src, pool=pool, mode="strict", timeout_s=5.0)
    server, uid = request.getfixturevalue("unprivileged_server")
    return lambda src: server.run(src, "", SandboxLimits(timeout_s=5.0))


SOCKETS = r'''
import json, socket
out = {}
for name, fam, typ, proto in (("vsock", 40, socket.SOCK_STREAM, 0),
                              ("netlink_uevent", 16, socket.SOCK_DGRAM, 15),
                              ("netlink_audit", 16, socket.SOCK_RAW, 9),
                              ("netlink_sock_diag", 16, socket.SOCK_DGRAM, 4),
                              ("packet", 17, socket.SOCK_RAW, 0),
                              ("alg", 38, socket.SOCK_SEQPACKET, 0),
                              ("unix", 1, socket.SOCK_STREAM, 0),
                              ("inet", 2, socket.SOCK_STREAM, 0),
                              ("inet6", 10, socket.SOCK_DGRAM, 0),
                              ("netlink_route", 16, socket.SOCK_RAW, 0)):
    try:
        socket.socket(fam, typ, proto).close()
        out[name] = "OK"
    except OSError as e:
        out[name] = e.errno
print(json.dumps(out))
'''


def test_no_socket_of_any_family_can_be_made(runner):
    # issue 42: socket buffers held memory outside the limit, so no family is left (the
    # network namespace had only a downed loopback anyway)
    r = runner(SOCKETS)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    for name in ("vsock", "netlink_uevent", "netlink_audit", "netlink_sock_diag", "packet",
                 "alg", "unix", "inet", "inet6", "netlink_route"):
        assert out[name] == 1, (name, out[name])  # EPERM from the filter


PTY_AND_LOCKS = r'''
import fcntl, json, os
out = {"dev": sorted(os.listdir("/dev"))}
try:
    os.openpty()
    out["openpty"] = "OK"
except OSError as e:
    out["openpty"] = e.errno
for path in (os.__file__, "/etc/ld.so.cache", "/etc/hostname"):
    try:
        with open(path) as f:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        out[path] = "LOCKED"
    except OSError as e:
        out[path] = e.errno
print(json.dumps(out))
'''


def _host_ptys() -> set[str]:
    try:
        return set(os.listdir("/dev/pts"))
    except OSError:
        return set()


def test_no_host_ptys_and_no_locks_on_host_files(runner):
    before = _host_ptys()
    r = runner(PTY_AND_LOCKS)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["dev"] == ["full", "null", "random", "urandom", "zero"]  # no ptmx, pts, shm
    assert out["openpty"] == 2  # ENOENT: there is no /dev/ptmx
    assert _host_ptys() <= before
    assert out["/etc/hostname"] == 2  # not in the view
    for path in [p for p in out if p.startswith("/") and p != "/etc/hostname"]:
        assert out[path] == 1, (path, out[path])  # flock refused on the files that are
