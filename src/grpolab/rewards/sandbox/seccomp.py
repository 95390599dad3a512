"""The seccomp filter every sandboxed program runs under (x86_64), handed to bubblewrap as
``--seccomp FD`` (a classic-BPF ``struct sock_filter[]``, assembled here with labels).

What it refuses and why (docs/sandbox.md has the threat model):

* **new processes**: ``fork``, ``vfork``, and ``clone`` without ``CLONE_THREAD`` (threads stay
  allowed); ``clone3`` answers ENOSYS so the C library falls back to ``clone``, whose flags a
  filter can read. A program is then ONE process: its CPU time is that process's CPU time
  (no reaped children vanish from the total, no fork trees), and RLIMIT_AS bounds all of it.
* **memory outside the address-space limit**: ``socket``/``socketpair`` (socket buffers,
  SCM_RIGHTS cycles that keep files alive), SysV IPC (semaphores, message queues, shared
  memory), ``memfd_create``/``memfd_secret``, ``pipe``/``pipe2`` (pipe buffers, the caller's
  pipe quota), ``inotify_init*``/``fanotify_init`` (the caller's inotify quota),
  ``userfaultfd``, ``io_uring_*``.
* **reaching other processes or the kernel's state**: ``ptrace``, ``process_vm_*``,
  ``pidfd_getfd``, ``kcmp``, keyrings, ``bpf``, ``perf_event_open``, modules, ``kexec``,
  ``reboot``, ``swapon``, ``acct``, ``syslog``, ``quotactl``, file handles.
* **changing the view**: ``mount`` and the new mount API, ``umount2``, ``pivot_root``,
  ``chroot``, ``unshare``, ``setns``, ``listmount``/``statmount`` (host mount sources).
* ``prctl(PR_SET_PDEATHSIG)``: the parent-death signal bubblewrap set stays; ``personality``.
* ``fcntl`` byte-range locks, leases and ``F_NOTIFY`` (:data:`DENIED_FCNTL`; ``flock`` too): a
  lock on a read-only host file of the view would block the host's writers.

Denied calls return EPERM; another architecture's calls (i386, x32) kill the process.
"""

from __future__ import annotations

import platform
import struct

__all__ = ["DENIED", "DENIED_FCNTL", "filter_bytes", "supported"]

AUDIT_ARCH_X86_64 = 0xC000003E
#: x86_64 numbers (arch/x86/entry/syscalls/syscall_64.tbl) of the calls refused outright.
DENIED: dict[str, int] = {
    # processes (clone is checked by its flags below)
    "fork": 57, "vfork": 58,
    # memory a program could hold outside RLIMIT_AS
    "socket": 41, "socketpair": 53, "pipe": 22, "pipe2": 293,
    "shmget": 29, "shmat": 30, "shmctl": 31, "shmdt": 67, "semget": 64, "semop": 65,
    "semctl": 66, "semtimedop": 220, "msgget": 68, "msgsnd": 69, "msgrcv": 70, "msgctl": 71,
    "memfd_create": 319, "memfd_secret": 447, "userfaultfd": 323,
    "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
    "inotify_init": 253, "inotify_init1": 294, "fanotify_init": 300,
    "mq_open": 240, "mq_unlink": 241, "mq_timedsend": 242, "mq_timedreceive": 243,
    "mq_notify": 244, "mq_getsetattr": 245,
    # other processes and the kernel
    "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311, "pidfd_getfd": 438,
    "pidfd_open": 434, "kcmp": 312, "keyctl": 250, "add_key": 248, "request_key": 249,
    "bpf": 321, "perf_event_open": 298, "kexec_load": 246, "kexec_file_load": 320,
    "init_module": 175, "finit_module": 313, "delete_module": 176, "swapon": 167,
    "swapoff": 168, "reboot": 169, "acct": 163, "syslog": 103, "quotactl": 179,
    "name_to_handle_at": 303, "open_by_handle_at": 304, "sethostname": 170,
    "setdomainname": 171, "vhangup": 153, "personality": 135, "lookup_dcookie": 212,
    "iopl": 172, "ioperm": 173, "settimeofday": 164, "clock_settime": 227, "adjtimex": 159,
    "clock_adjtime": 305,
    # the view
    "mount": 165, "umount2": 166, "pivot_root": 155, "chroot": 161, "unshare": 272,
    "setns": 308, "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431,
    "fsmount": 432, "fspick": 433, "mount_setattr": 442, "open_tree_attr": 467,
    "statmount": 457, "listmount": 458,
    # flock(2) on a read-only host file of the view would hold the host's lock
    "flock": 73,
}
NR_CLONE, NR_CLONE3, NR_PRCTL, NR_FCNTL = 56, 435, 157, 72
#: fcntl commands refused: byte-range locks (classic and open-file-description) and leases on
#: the view's read-only host files would block the host's writers; F_NOTIFY (dnotify) would
#: hold kernel state outside every limit. F_GETLK / F_OFD_GETLK stay (they only ask).
DENIED_FCNTL = {"F_SETLK": 6, "F_SETLKW": 7, "F_OFD_SETLK": 37, "F_OFD_SETLKW": 38,
                "F_SETLEASE": 1024, "F_NOTIFY": 1026}
CLONE_THREAD = 0x00010000
PR_SET_PDEATHSIG = 1
RET_KILL_PROCESS = 0x80000000
RET_ERRNO = 0x00050000
RET_ALLOW = 0x7FFF0000
EPERM, ENOSYS = 1, 38


def supported() -> bool:
    """Whether this machine's architecture has a table here (x86_64 only)."""
    return platform.machine() in ("x86_64", "AMD64")


def filter_bytes() -> bytes:
    """The filter as bytes for ``bwrap --seccomp FD`` (see the module docstring)."""
    LD, JEQ, JGE, JSET, RET = 0x20, 0x15, 0x35, 0x45, 0x06
    prog: list[tuple] = []  # (code, jt, jf, k); jt/jf are labels (str) or 0

    def ins(code, k=0, jt=0, jf=0):
        prog.append((code, jt, jf, k))

    ins(LD, 4)  # seccomp_data.arch
    ins(JEQ, AUDIT_ARCH_X86_64, 0, "kill")
    ins(LD, 0)  # seccomp_data.nr
    ins(JGE, 0x40000000, "deny", 0)  # x32 system calls
    for nr in sorted(set(DENIED.values())):
        ins(JEQ, nr, "deny", 0)
    ins(JEQ, NR_CLONE3, "nosys", 0)
    ins(JEQ, NR_CLONE, "clone", 0)
    ins(JEQ, NR_PRCTL, "prctl", 0)
    ins(JEQ, NR_FCNTL, "fcntl", 0)
    ins(RET, RET_ALLOW)
    labels = {"fcntl": len(prog)}
    ins(LD, 24)  # args[1] low half: the fcntl command
    for cmd in sorted(DENIED_FCNTL.values()):
        ins(JEQ, cmd, "deny", 0)
    ins(RET, RET_ALLOW)
    labels["clone"] = len(prog)
    ins(LD, 16)  # args[0] low half: clone flags (x86_64)
    ins(JSET, CLONE_THREAD, "allow", "deny")
    labels["prctl"] = len(prog)
    ins(LD, 16)  # args[0]: the prctl option
    ins(JEQ, PR_SET_PDEATHSIG, "deny", "allow")
    labels["allow"] = len(prog)
    ins(RET, RET_ALLOW)
    labels["deny"] = len(prog)
    ins(RET, RET_ERRNO | EPERM)
    labels["nosys"] = len(prog)
    ins(RET, RET_ERRNO | ENOSYS)
    labels["kill"] = len(prog)
    ins(RET, RET_KILL_PROCESS)
    return _assemble(prog, labels)


def _assemble(prog: list[tuple], labels: dict[str, int]) -> bytes:
    out = bytearray()
    for pc, (code, jt, jf, k) in enumerate(prog):
        offs = []
        for j in (jt, jf):
            if isinstance(j, str):
                j = labels[j] - pc - 1
                if not 0 <= j < 256:
                    raise ValueError("seccomp jump out of range")
            offs.append(j)
        out += struct.pack("=HBBI", code, offs[0], offs[1], k)
    return bytes(out)
