"""``python -m grpolab.integrations.verl.cpu {main_ppo|verl_main} [options] [Hydra overrides...]``.

Runs ``python -m verl.trainer.main_ppo`` (``main_ppo``) or ``python -m
grpolab.integrations.verl.main`` (``verl_main``: the same plus grpolab's RLSD / GEAR) on the CPU
backend: :data:`~grpolab.integrations.verl.cpu.CPU_OVERRIDES` before the caller's overrides (a
key the caller sets is not repeated) and :func:`~grpolab.integrations.verl.cpu.cpu_env` as the
environment.

Ray 2.60 opens its gRPC, dashboard-agent and runtime-env servers on every interface (``*``) or on
the machine's address even when told ``_node_ip_address=127.0.0.1``, and TransferQueue binds to
the address Ray reports. So by default the run goes into its own network namespace whose only
interface is the loopback (``unshare --net``, as root; else inside a user namespace, ``unshare
--user --map-root-user --net``): whatever Ray listens on is reachable from this machine's
loopback only, and the run cannot reach any other host (the model and data must be local files).
``--share-network`` runs in the machine's namespace instead (then Ray's listeners are visible on
the network); where no namespace can be made the launcher says so and stops, unless
``--share-network`` is given.

Options: ``--print`` prints the command instead of running it; ``--share-network`` as above.
A verl outside ``>=0.9.1,<0.10`` stops it with one ``error:`` line and exit code 2.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys

from grpolab.integrations.verl.cpu import VerlVersionError, _check_version, cpu_env, cpu_overrides

TARGETS = {"main_ppo": "verl.trainer.main_ppo", "verl_main": "grpolab.integrations.verl.main"}
USAGE = ("usage: python -m grpolab.integrations.verl.cpu {main_ppo|verl_main} [--print] [--share-network] "
         "[hydra overrides...]")
_INSIDE = "GRPOLAB_VERL_CPU_NETNS"


def command(target: str, overrides: list[str]) -> list[str]:
    """The argv of the run (``sys.executable -m <module> <CPU overrides> <overrides>``)."""
    if target not in TARGETS:
        raise ValueError(f"unknown target {target!r}; choose main_ppo (verl's trainer) or verl_main "
                         "(verl's trainer with grpolab's RLSD / GEAR)")
    return [sys.executable, "-m", TARGETS[target], *cpu_overrides(overrides)]


def netns_prefix() -> list[str] | None:
    """The ``unshare`` command that gives a process a new network namespace, or None where none can be made."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return None
    for prefix in ([unshare, "--net"], [unshare, "--user", "--map-root-user", "--net"]):
        try:
            ok = subprocess.run([*prefix, "true"], capture_output=True, timeout=10).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            ok = False
        if ok:
            return prefix
    return None


def loopback_up() -> list[str]:
    """Bring ``lo`` up in this network namespace; return the namespace's interface names."""
    import fcntl
    import socket
    import struct

    siocgifflags, siocsifflags, iff_up = 0x8913, 0x8914, 0x1
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        req = struct.pack("16sh", b"lo", 0)
        flags = struct.unpack("16sh", fcntl.ioctl(s, siocgifflags, req))[1]
        fcntl.ioctl(s, siocsifflags, struct.pack("16sh", b"lo", flags | iff_up))
    return sorted(name for _, name in socket.if_nameindex())


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if argv else 2
    show, share = "--print" in argv, "--share-network" in argv
    args = [a for a in argv if a not in ("--print", "--share-network")]
    try:
        _check_version()
        cmd = command(args[0], args[1:])
    except (VerlVersionError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    env = cpu_env()
    if os.environ.get(_INSIDE) == "1":  # the re-executed launcher, inside the new namespace
        names = loopback_up()
        if names != ["lo"]:
            print(f"error: the run's network namespace has interfaces {names}, not only lo", file=sys.stderr)
            return 2
        env.pop(_INSIDE, None)
        sys.stdout.flush()
        os.execve(sys.executable, cmd, env)
    if show:
        print(shlex.join(cmd))
        return 0
    if not share:
        prefix = netns_prefix()
        if prefix is None:
            print("error: cannot create a loopback-only network namespace here (unshare --net, as root or in "
                  "a user namespace); pass --share-network to run in this machine's network namespace "
                  "(Ray then listens on all interfaces)", file=sys.stderr)
            return 2
        env[_INSIDE] = "1"
        sys.stdout.flush()
        os.execve(prefix[0], [*prefix, sys.executable, "-m", "grpolab.integrations.verl.cpu", *argv], env)
    sys.stdout.flush()
    os.execve(sys.executable, cmd, env)
    return 0  # not reached


if __name__ == "__main__":
    raise SystemExit(main())
