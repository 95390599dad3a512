"""The sandbox fork server: a standalone script (no grpolab imports) run as its own process.

Started by :mod:`grpolab.rewards.sandbox` as ``python -I _sandbox_server.py DISK_MB
[--preload=PATH]... [--packages=NAME,...]``. At start it isolates *itself* once (as root, or as an
ordinary user inside a new user namespace): a new network namespace, so it and every child see
only a downed loopback; a new mount namespace whose root is a **minimal view** (:func:`view_spec`,
``Server._mounts``): the interpreter, its standard library, the shared libraries they load, the
allow-listed third-party packages under ``/sandbox/packages``, five device nodes, two /etc files,
empty /proc and /sys, all read-only, and a size-capped tmpfs under /tmp; the host's tree is
detached (pivot_root), so nothing else of the host can even be named; last, a seccomp filter
(:func:`_seccomp_program`) that it and every child live under. Then it serves requests one at a
time over its stdin/stdout: 4-byte big-endian length + a JSON object each way (a request's
``private_len`` raw bytes follow its JSON and are read only after the child is forked).

Per request it forks ONE child into a fresh PID namespace (the child is PID 1 there, so when it
exits the kernel kills everything it left behind). Before running the untrusted source with
``exec`` the child applies: a new session, rlimits (CPU, address space, file size, open files,
process count, no core files), its own IPC namespace, its own mount namespace with a fresh
size-capped tmpfs on /tmp as working directory, an empty capability bounding/ambient set,
an unprivileged uid/gid of its own (root only; this is what makes RLIMIT_NPROC bite and the
other users' files unreachable), cleared capability sets, no_new_privs, a scrubbed environment
and closed inherited file descriptors. The server supervises: wall-clock deadline, output caps,
SIGKILL of the whole namespace, reaping.

Nothing here trusts the child: its output is only counted and decoded.
"""

from __future__ import annotations

import os
import sys

# Python < 3.11 puts this script's folder first on sys.path, where grpolab.rewards' own modules
# (math.py, code.py, ...) would shadow the standard library's. Drop it before importing more.
if sys.path and os.path.abspath(sys.path[0] or ".") == os.path.dirname(os.path.abspath(__file__)):
    del sys.path[0]

import builtins
import ctypes
import gc
import json
import math
import resource
import select
import shutil
import signal
import struct
import tempfile
import time
import traceback

# Modules pre-imported so that trivial programs do not pay for them in every child.
import collections  # noqa: F401
import functools  # noqa: F401
import heapq  # noqa: F401
import itertools  # noqa: F401
import re  # noqa: F401
import random  # noqa: F401
import string  # noqa: F401

CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REC = 0x4000
MS_PRIVATE = 1 << 18
MS_BIND = 4096
MS_MOVE = 8192
MNT_DETACH = 2
SYS_pivot_root = 155  # x86_64 (aarch64: 41; the seccomp table is x86_64-only as well)
MOUNT_ATTR_RDONLY = 1
AT_FDCWD = -100
AT_RECURSIVE = 0x8000
SYS_mount_setattr = 442  # x86_64 and aarch64 share the new syscall numbers
PR_SET_NO_NEW_PRIVS = 38
PR_SET_PDEATHSIG = 1
PR_CAPBSET_DROP = 24
PR_SET_SECUREBITS = 28
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
SECBIT_NOROOT_AND_LOCKED = 0x03  # exec never grants capabilities to uid 0, locked
LINUX_CAPABILITY_VERSION_3 = 0x20080522
F_SETPIPE_SZ = 1031
#: fd on which a program receives its private input (only when the request has one).
PRIVATE_FD = 3

# ------------------------------------------------------------------------------ seccomp
# One filter, installed in the server once it has isolated itself (so every program inherits it
# at no cost per program). It refuses system calls neither the server nor a program needs and
# that would let a program reach host objects past the mount layout (UNIX sockets, file
# handles, io_uring, which creates sockets behind seccomp's back), make a user namespace (the
# one way to regain capabilities), change its root, or touch other processes and kernel state
# (ptrace, keyrings shared per uid, bpf, perf, modules). mount, umount2, setns and unshare
# without CLONE_NEWUSER stay allowed because the server uses them per program; a program has
# no capabilities left by then (_drop_bounding_capabilities, _clear_capabilities), so the
# kernel refuses them to it (EPERM).
# Numbers: x86_64 (arch/x86/entry/syscalls/syscall_64.tbl).
AUDIT_ARCH_X86_64 = 0xC000003E
SECCOMP_TABLES = {
    "x86_64": {
        "arch": AUDIT_ARCH_X86_64,
        "deny": {
            "pivot_root": 155, "chroot": 161, "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431,
            "fsmount": 432, "fspick": 433, "mount_setattr": 442, "open_tree_attr": 467,
            "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
            "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311,
            "pidfd_getfd": 438, "keyctl": 250, "add_key": 248, "request_key": 249, "bpf": 321,
            "perf_event_open": 298, "userfaultfd": 323, "kexec_load": 246,
            "kexec_file_load": 320, "init_module": 175, "finit_module": 313,
            "delete_module": 176, "swapon": 167, "swapoff": 168, "reboot": 169, "acct": 163,
            "name_to_handle_at": 303, "open_by_handle_at": 304, "sethostname": 170,
            "setdomainname": 171, "fanotify_init": 300, "syslog": 103, "vhangup": 153,
            "quotactl": 179,
            # flock(2) on any file of the view (read-only host files) would hold the host's lock
            "flock": 73,
        },
        "socket": 41, "socketpair": 53, "clone": 56, "clone3": 435, "unshare": 272,
        "memfd_create": 319,
    },
}
AF_UNIX = 1
AF_INET = 2
AF_INET6 = 10
AF_NETLINK = 16
NETLINK_ROUTE = 0
SOCK_DGRAM = 2
#: clone() flags that make new namespaces (NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID,
#: NEWNET): refused, like unshare and setns.
CLONE_NS_FLAGS = 0x7E020000
CLONE_NEWUSER_FLAG = 0x10000000
SECCOMP_RET_KILL_PROCESS = 0x80000000
SECCOMP_RET_ERRNO = 0x00050000
SECCOMP_RET_ALLOW = 0x7FFF0000
EPERM = 1
ENOSYS = 38


def _seccomp_program(table: dict, extra_deny=()) -> bytes:
    """The classic-BPF filter (struct sock_filter[]) for ``table``, assembled with labels.

    Denied calls return EPERM; clone3 returns ENOSYS (its flags live in memory a filter cannot
    read, so the C library falls back to clone, whose flags it can); another architecture's
    calls (i386, x32) kill the process.
    """
    LD, JEQ, JGE, JSET, AND, RET = 0x20, 0x15, 0x35, 0x45, 0x54, 0x06
    prog: list[tuple] = []  # (code, jt_label_or_0, jf_label_or_0, k)

    def ins(code, k=0, jt=0, jf=0):
        prog.append((code, jt, jf, k))

    ins(LD, 4)  # seccomp_data.arch
    ins(JEQ, table["arch"], 0, "kill")
    ins(LD, 0)  # seccomp_data.nr
    ins(JGE, 0x40000000, "deny", 0)  # x32 system calls
    for nr in sorted({*table["deny"].values(), *extra_deny}):
        ins(JEQ, nr, "deny", 0)
    ins(JEQ, table["clone3"], "nosys", 0)
    ins(JEQ, table["socket"], "socket", 0)
    ins(JEQ, table["socketpair"], "socketpair", 0)
    ins(JEQ, table["clone"], "clone", 0)
    ins(JEQ, table["unshare"], "unshare", 0)
    ins(RET, SECCOMP_RET_ALLOW)
    labels = {}
    labels["unshare"] = len(prog)  # unshare(CLONE_NEWUSER): capabilities in a new namespace
    ins(LD, 16)
    ins(JSET, CLONE_NEWUSER_FLAG, "deny", 0)
    ins(RET, SECCOMP_RET_ALLOW)
    # socket(): an allow-list of families. AF_INET/AF_INET6 (only a downed loopback in the
    # network namespace) and AF_NETLINK with NETLINK_ROUTE only (if_nameindex, getaddrinfo);
    # never AF_UNIX (host sockets by path), AF_VSOCK (the host's vsock port space), other
    # netlink families (uevents, audit, sock_diag...), AF_PACKET, AF_ALG or anything else.
    labels["socket"] = len(prog)
    ins(LD, 16)  # args[0] (low 32 bits): the family
    ins(JEQ, AF_INET, "allow", 0)
    ins(JEQ, AF_INET6, "allow", 0)
    ins(JEQ, AF_NETLINK, 0, "deny")
    ins(LD, 32)  # args[2]: the netlink protocol
    ins(JEQ, NETLINK_ROUTE, "allow", "deny")
    labels["socketpair"] = len(prog)  # AF_UNIX stream/seqpacket pairs only: a datagram pair
    ins(LD, 16)                       # could still sendto() a host path
    ins(JEQ, AF_UNIX, 0, "deny")
    ins(LD, 24)  # args[1]: type, without SOCK_NONBLOCK / SOCK_CLOEXEC
    ins(AND, 0xF)
    ins(JEQ, SOCK_DGRAM, "deny", 0)
    labels["allow"] = len(prog)
    ins(RET, SECCOMP_RET_ALLOW)
    labels["clone"] = len(prog)
    ins(LD, 16)  # flags (x86_64 and arm64: first argument)
    ins(JSET, CLONE_NS_FLAGS, "deny", 0)
    ins(RET, SECCOMP_RET_ALLOW)
    labels["deny"] = len(prog)
    ins(RET, SECCOMP_RET_ERRNO | EPERM)
    labels["nosys"] = len(prog)
    ins(RET, SECCOMP_RET_ERRNO | ENOSYS)
    labels["kill"] = len(prog)
    ins(RET, SECCOMP_RET_KILL_PROCESS)
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


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

# uids handed to sandboxed children: UID_BASE + the server's pid (unique among live servers).
UID_BASE = 1_500_000
SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"

_libc = ctypes.CDLL(None, use_errno=True)
for _fn in ("prctl", "capset", "unshare", "setns", "mount", "umount2", "syscall", "socket"):
    getattr(_libc, _fn)  # resolved once here: forked children find them cached


def _check(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _unshare(flags: int) -> None:
    _check(_libc.unshare(ctypes.c_int(flags)), f"unshare({flags:#x})")


def _setns(fd: int, nstype: int) -> None:
    _check(_libc.setns(ctypes.c_int(fd), ctypes.c_int(nstype)), "setns")


def _mount(source, target, fstype, flags, data) -> None:
    enc = lambda s: s.encode() if s is not None else None  # noqa: E731
    _check(
        _libc.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)),
        f"mount {target}",
    )


# ------------------------------------------------------------------------------ protocol

def _read_exact(fd: int, n: int) -> bytes:
    chunks = []
    while n:
        b = os.read(fd, n)
        if not b:
            raise EOFError
        chunks.append(b)
        n -= len(b)
    return b"".join(chunks)


def _recv(fd: int) -> dict:
    (n,) = struct.unpack(">I", _read_exact(fd, 4))
    return json.loads(_read_exact(fd, n))


def _send(fd: int, obj: dict) -> None:
    data = json.dumps(obj).encode()
    data = struct.pack(">I", len(data)) + data
    while data:
        data = data[os.write(fd, data):]


# ------------------------------------------------------------------------------ isolation

def _blocked_ancestors(also: tuple[str, ...] = ()) -> dict[str, set[str]]:
    """``{ancestor: {child names}}``: for each folder the child's interpreter needs (stdlib,
    site-packages, ...), its first ancestor that other users cannot traverse (or one of
    ``also``), with the name of the next path component below it."""
    needed = set()
    for p in [sys.prefix, sys.base_prefix, sys.exec_prefix, *sys.path]:
        if p and os.path.exists(p):
            needed.add(os.path.realpath(p))
    targets: dict[str, set[str]] = {}
    for p in sorted(needed):
        parts = p.strip("/").split("/")
        for i in range(len(parts)):
            anc = "/" + "/".join(parts[:i])
            if anc in also or (anc != "/" and not os.stat(anc).st_mode & 0o001):
                targets.setdefault(anc, set()).add(parts[i])
                break
    return targets


#: Where the allow-listed third-party packages appear inside the view (read-only).
PACKAGES_DIR = "/sandbox/packages"
#: Device nodes the view keeps (no /dev/ptmx, no /dev/pts, no /dev/shm).
VIEW_DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")
#: Host files the view keeps besides the interpreter (for the dynamic loader and local time).
VIEW_ETC = ("/etc/ld.so.cache", "/etc/localtime")
#: Literal paths of the dynamic loader the interpreter may be exec'd through.
VIEW_LOADERS = ("/lib64/ld-linux-x86-64.so.2", "/lib/ld-linux-aarch64.so.1")


def _stdlib_dirs() -> list[str]:
    """The standard library's folders as ``sys.path`` spells them: the one holding ``os.py``
    and the extension-module folder (lib-dynload); never a virtual environment's."""
    osfile = getattr(os, "__file__", None)
    if osfile:
        out = [os.path.dirname(osfile)]
    else:  # a frozen os without a file: the base installation's stdlib
        import sysconfig

        out = [sysconfig.get_paths(vars={"installed_base": sys.base_prefix,
                                         "base": sys.base_prefix})["stdlib"]]
    for p in sys.path:
        if p and os.path.basename(os.path.normpath(p)) == "lib-dynload" and os.path.isdir(p):
            if os.path.normpath(p) not in out:
                out.append(os.path.normpath(p))
    return out


def _package_paths(names) -> list[tuple[str, str]]:
    """``(host path, name in PACKAGES_DIR)`` for each allow-listed top-level package or module
    that this interpreter can import, plus its vendored-library sibling (``numpy.libs``)."""
    import importlib.util

    out = []
    for name in names:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            spec = None
        if spec is None or spec.origin in (None, "built-in", "frozen"):
            continue
        if spec.submodule_search_locations:
            path = os.path.realpath(list(spec.submodule_search_locations)[0])
        else:
            path = os.path.realpath(spec.origin)
        out.append((path, os.path.basename(path)))
        libs = os.path.join(os.path.dirname(path), name + ".libs")
        if os.path.isdir(libs):
            out.append((os.path.realpath(libs), name + ".libs"))
    return out


def _elf_needed(path: str) -> tuple[list[str], list[str]]:
    """``(DT_NEEDED sonames, DT_RUNPATH/DT_RPATH entries)`` of a 64-bit little-endian ELF file
    (empty lists for anything else); reads the headers, the dynamic section and the string
    table only."""
    try:
        f = open(path, "rb")
    except OSError:
        return [], []
    with f:
        def read(off: int, n: int) -> bytes:
            f.seek(off)
            return f.read(n)

        head = read(0, 64)
        if head[:6] != b"\x7fELF\x02\x01" or len(head) < 64:
            return [], []
        phoff, = struct.unpack_from("<Q", head, 0x20)
        phentsize, phnum = struct.unpack_from("<HH", head, 0x36)
        ph = read(phoff, phentsize * phnum)
        loads, dyn = [], None
        for i in range(phnum):
            if (i + 1) * phentsize > len(ph):
                break
            p_type, _flags, off, vaddr, _pa, filesz, _memsz, _al = struct.unpack_from(
                "<IIQQQQQQ", ph, i * phentsize)
            if p_type == 1:
                loads.append((vaddr, off, filesz))
            elif p_type == 2:
                dyn = (off, filesz)
        if dyn is None:
            return [], []
        data = read(dyn[0], min(dyn[1], 1 << 20))
        entries = []
        for k in range(len(data) // 16):
            tag, val = struct.unpack_from("<qQ", data, 16 * k)
            if tag == 0:
                break
            entries.append((tag, val))
        strtab = next((v for t, v in entries if t == 5), None)
        strsz = next((v for t, v in entries if t == 10), 0)
        off = None
        for vaddr, foff, size in loads:
            if strtab is not None and vaddr <= strtab < vaddr + size:
                off = strtab - vaddr + foff
        if off is None:
            return [], []
        table = read(off, min(strsz, 1 << 22))

        def string(o: int) -> str:
            end = table.find(b"\0", o)
            return table[o:end if end >= 0 else len(table)].decode(errors="replace")

        needed = [string(v) for t, v in entries if t == 1]
        runpath = [p for t, v in entries if t in (15, 29) for p in string(v).split(":") if p]
        return needed, runpath


#: Where the dynamic loader looks for a library by default (multiarch and plain layouts).
LIB_DIRS = ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib/aarch64-linux-gnu",
            "/usr/lib/aarch64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib",
            "/usr/local/lib")


def _shared_libraries(objects) -> list[tuple[str, str]]:
    """``(real path, path the loader finds it at)`` of every shared library ``objects`` (ELF
    files) need, transitively, looked up as the dynamic loader would (RUNPATH with $ORIGIN,
    then the usual system folders)."""
    dirs = LIB_DIRS
    seen: set[str] = set()
    names: set[str] = set()
    out: list[tuple[str, str]] = []
    todo = [os.path.realpath(o) for o in objects]
    while todo:
        obj = todo.pop()
        if obj in seen:
            continue
        seen.add(obj)
        needed, runpath = _elf_needed(obj)
        origin = os.path.dirname(obj)
        search = [p.replace("$ORIGIN", origin).replace("${ORIGIN}", origin) for p in runpath]
        for soname in needed:
            for d in (*search, *dirs):
                cand = os.path.join(d, soname)
                if os.path.isfile(cand):
                    real = os.path.realpath(cand)
                    if cand not in names:
                        names.add(cand)
                        out.append((real, cand))
                    todo.append(real)
                    break
    return out


#: Extension modules left out of the view's library scan (no display in a sandbox).
SKIP_EXTENSIONS = ("_tkinter",)


def _extension_modules(dirs) -> list[str]:
    """Every ``*.so`` under ``dirs`` (extension modules and the libraries vendored beside them)."""
    out = []
    for d in dirs:
        if os.path.isfile(d):
            if d.endswith(".so"):
                out.append(d)
            continue
        for root, _subdirs, files in os.walk(d):
            out += [os.path.join(root, n) for n in files
                    if ".so" in n and not n.startswith(SKIP_EXTENSIONS)]
    return out


def _mapped_files() -> list[str]:
    """Regular files this process has mapped (the interpreter, its shared libraries)."""
    found = []
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split(None, 5)
            if len(parts) == 6 and parts[5].startswith("/"):
                path = parts[5].rstrip("\n")
                if path.endswith(" (deleted)") or path.startswith(("/proc/", "/dev/", "/sys/")):
                    continue
                if os.path.isfile(path) and path not in found:
                    found.append(path)
    return found


def view_spec(packages=()) -> dict:
    """What the programs' filesystem view holds (computed on the host, before isolating):
    ``binds`` [(host path, path in the view)], ``hide`` (site-packages folders inside the
    standard library, covered by an empty tmpfs), ``stdlib`` and ``sys_path`` (the programs'
    import path: the standard library, then :data:`PACKAGES_DIR` when a package is allowed)."""
    stdlib = _stdlib_dirs()
    pkgs = _package_paths(packages)
    binds: list[tuple[str, str]] = []
    covered: list[str] = []
    taken: set[str] = set()

    def add(src: str, dst: str) -> None:
        if (dst in taken or not os.path.exists(src)
                or any(dst.startswith(c + "/") for c in covered)):
            return
        taken.add(dst)
        binds.append((os.path.realpath(src), dst))
        if os.path.isdir(src):
            covered.append(dst)

    for d in sorted(stdlib, key=len):
        add(d, d)
    hide = []
    for d in stdlib:
        for sub in ("site-packages", "dist-packages"):
            if os.path.isdir(os.path.join(d, sub)):
                hide.append(os.path.join(d, sub))
    exe = os.path.realpath(sys.executable)
    add(exe, exe)
    mapped = [(m, m) for m in _mapped_files()]
    libs = _shared_libraries(
        [exe, *_extension_modules(stdlib[1:]), *_extension_modules([p for p, _ in pkgs])])
    for src, dst in [*mapped, *libs]:
        if not any(src.startswith(p + "/") for p, _ in pkgs):  # those: under PACKAGES_DIR
            add(src, dst)
    for path in (*VIEW_LOADERS, *VIEW_ETC):
        if os.path.exists(path):
            add(path, path)
    for src, name in pkgs:
        binds.append((src, PACKAGES_DIR + "/" + name))
    sys_path = list(stdlib) + ([PACKAGES_DIR] if pkgs else [])
    return {"binds": binds, "hide": hide, "stdlib": stdlib, "sys_path": sys_path,
            "executable": exe, "packages": sorted(n for _, n in pkgs if not n.endswith(".libs"))}


def _cap_last_cap() -> int:
    try:
        with open("/proc/sys/kernel/cap_last_cap") as f:
            return int(f.read())
    except (OSError, ValueError):
        return 63  # dropping an unknown capability number fails harmlessly (EINVAL)


def _drop_bounding_capabilities(last_cap: int) -> None:
    """Empty the bounding and ambient sets and lock 'uid 0 gets no capabilities on exec' (needs
    CAP_SETPCAP: before a uid switch)."""
    for cap in range(last_cap + 1):
        if _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 and ctypes.get_errno() != 22:
            _check(-1, f"PR_CAPBSET_DROP {cap}")
    _check(_libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0), "clear ambient caps")
    if _libc.prctl(PR_SET_SECUREBITS, SECBIT_NOROOT_AND_LOCKED, 0, 0, 0) != 0:
        # Already without CAP_SETPCAP (a non-root uid): nothing to lock, exec cannot add any.
        pass


def _clear_capabilities() -> None:
    """Clear the effective, permitted and inheritable sets (capset)."""
    header = (ctypes.c_uint32 * 2)(LINUX_CAPABILITY_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)()  # two {effective, permitted, inheritable} words, all 0
    _check(_libc.capset(ctypes.byref(header), ctypes.byref(data)), "capset")


def _install_seccomp(prog: bytes) -> None:
    """Install the filter (needs no_new_privs first); ``prog`` stays alive in the caller."""
    buf = ctypes.create_string_buffer(prog, len(prog))
    fprog = _SockFprog(len(prog) // 8, ctypes.cast(buf, ctypes.c_void_p))
    _check(_libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0), "seccomp")


def _in_child(fn):
    """``fn()``'s JSON-able result, computed in a forked child: whatever it allocates (here:
    whole ELF files read, package trees walked) never inflates this process, whose memory every
    program's fork copies."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            data = json.dumps({"ok": fn()}).encode()
        except BaseException as exc:  # noqa: BLE001
            data = json.dumps({"error": f"{type(exc).__name__}: {exc}"}).encode()
        while data:
            data = data[os.write(w, data):]
        os._exit(0)
    os.close(w)
    chunks = []
    while True:
        b = os.read(r, 1 << 16)
        if not b:
            break
        chunks.append(b)
    os.close(r)
    os.waitpid(pid, 0)
    out = json.loads(b"".join(chunks) or b'{"error": "the child died"}')
    if "error" in out:
        raise OSError(out["error"])
    return out["ok"]


def _works_in_child(fn) -> bool:
    """Whether ``fn()`` runs without raising in a forked throwaway child (exit status 0)."""
    pid = os.fork()
    if pid == 0:
        try:
            fn()
            os._exit(0)
        except BaseException:  # noqa: BLE001
            os._exit(1)
    _, st = os.waitpid(pid, 0)
    return os.WIFEXITED(st) and os.WEXITSTATUS(st) == 0


# ------------------------------------------------------------------------------ per-program limits
# rlimits are per process; these limits hold for a program's processes together: memory
# (processes + shared memory + files in its /tmp), process count and CPU time.
#
# * "cgroup2": one cgroup v2 per server (programs run one at a time), created at start where
#   the machine allows it (root with the memory and pids controllers at the cgroup2 root, or a
#   delegated cgroup we may enable them in). memory.max / memory.swap.max / pids.max are
#   enforced by the kernel (a program over memory.max is OOM-killed: reason "memory"); CPU
#   time is cpu.stat's usage, sampled, the program killed past cpu_s.
# * "sampled" (no usable cgroup v2): the server samples the program's process tree in the
#   host's /proc (an fd kept from before the view) every SAMPLE_S: Pss_Anon + Pss_Shmem of every
#   process (proportional: pages still shared after a fork count once) and their CPU time (with their reaped children's), killing the program past
#   memory_mb or cpu_s. memfd_create is refused by seccomp (a memfd's pages belong to no
#   process) and SysV shared memory is capped at memory_mb in the program's IPC namespace.

SAMPLE_S = 0.02
#: The first sample comes later: most programs end before it and pay nothing.
SAMPLE_FIRST_S = 0.05
CLK_TCK = os.sysconf("SC_CLK_TCK")


def _cgroup2_root() -> str | None:
    try:
        with open("/proc/self/mountinfo") as f:
            for line in f:
                left, _, right = line.partition(" - ")
                if right.split()[:1] == ["cgroup2"]:
                    return left.split()[4]
    except OSError:
        pass
    return None


class CgroupLimits:
    """Per-program limits through one cgroup v2 (see above)."""

    kind = "cgroup2"

    def __init__(self) -> None:
        root = _cgroup2_root()
        if root is None:
            raise OSError("no cgroup2 file system mounted")
        own = "/"
        with open("/proc/self/cgroup") as f:
            for line in f:
                if line.startswith("0::"):
                    own = line[3:].strip()
        errors = []
        for parent in (root, os.path.join(root, own.lstrip("/"))):
            try:
                self._make(parent)
                return
            except OSError as exc:
                errors.append(f"{parent}: {exc.strerror or exc}")
        raise OSError("; ".join(errors))

    def _make(self, parent: str) -> None:
        with open(os.path.join(parent, "cgroup.controllers")) as f:
            have = f.read().split()
        if not {"memory", "pids"} <= set(have):
            raise OSError(0, f"controllers memory+pids not available (have {have})")
        with open(os.path.join(parent, "cgroup.subtree_control")) as f:
            enabled = f.read().split()
        for c in ("memory", "pids", "cpu"):
            if c not in enabled and c in have:
                try:
                    with open(os.path.join(parent, "cgroup.subtree_control"), "w") as f:
                        f.write("+" + c)
                except OSError:
                    if c != "cpu":
                        raise
        name = f"grpolab-sandbox-{os.getpid()}"
        path = os.path.join(parent, name)
        os.mkdir(path)
        try:
            self.parent_fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            self.fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            self.name = name
            self.procs_fd = os.open("cgroup.procs", os.O_WRONLY | os.O_CLOEXEC, dir_fd=self.fd)
            self._set("memory.max", "max")
            self._set("pids.max", "max")
            self.swap = os.path.exists(os.path.join(path, "memory.swap.max"))
        except BaseException:
            os.rmdir(path)
            raise
        self.path = path
        self.current: dict[str, str] = {}

    def _set(self, name: str, value: str) -> None:
        fd = os.open(name, os.O_WRONLY | os.O_TRUNC | os.O_CLOEXEC, dir_fd=self.fd)
        try:
            os.write(fd, value.encode())
        finally:
            os.close(fd)

    def _read(self, name: str) -> dict[str, int]:
        fd = os.open(name, os.O_RDONLY | os.O_CLOEXEC, dir_fd=self.fd)
        try:
            text = os.read(fd, 4096).decode()
        finally:
            os.close(fd)
        out = {}
        for line in text.splitlines():
            k, _, v = line.partition(" ")
            if v.strip().isdigit():
                out[k] = int(v)
        return out

    def prepare(self, req: dict) -> None:
        want = {"memory.max": str(int(req["memory_mb"]) << 20),
                "pids.max": str(int(req["max_processes"]))}
        if self.swap:
            want["memory.swap.max"] = "0"
        for k, v in want.items():
            if self.current.get(k) != v:
                self._set(k, v)
                self.current[k] = v
        self.cpu0 = self._read("cpu.stat").get("usage_usec", 0)
        self.oom0 = self._read("memory.events").get("oom_kill", 0)

    def enter(self) -> None:
        """In the forked child, first thing: join the cgroup."""
        os.write(self.procs_fd, b"0")

    def sample(self, pid: int) -> tuple[int, float]:
        """(memory bytes, CPU seconds) of the program so far (memory: enforced by the kernel)."""
        return 0, (self._read("cpu.stat").get("usage_usec", 0) - self.cpu0) / 1e6

    def finish(self) -> tuple[float, bool]:
        """(CPU seconds, whether the kernel OOM-killed one of its processes)."""
        cpu = (self._read("cpu.stat").get("usage_usec", 0) - self.cpu0) / 1e6
        return cpu, self._read("memory.events").get("oom_kill", 0) > self.oom0

    def close_in_child(self) -> None:
        pass  # its descriptors are closed with every other one (closerange) in the child

    def describe(self) -> str:
        return f"cgroup v2 ({self.path}): memory.max, pids.max, CPU from cpu.stat"

    def cleanup(self) -> None:
        for _ in range(50):
            try:
                os.rmdir(self.name, dir_fd=self.parent_fd)
                return
            except OSError:
                time.sleep(0.01)


class SampledLimits:
    """Per-program memory and CPU limits measured in the host's /proc (see above)."""

    kind = "sampled"

    def __init__(self, why: str) -> None:
        self.why = why
        self.proc_fd = os.open("/proc", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        self.peak_cpu = 0.0

    def prepare(self, req: dict) -> None:
        self.peak_cpu = 0.0
        self.memory_bytes = int(req["memory_mb"]) << 20

    def enter(self) -> None:
        pass

    def cap_sysv_shm(self) -> None:
        """In the child, inside its new IPC namespace: SysV shared memory <= memory_mb."""
        pages = self.memory_bytes // os.sysconf("SC_PAGE_SIZE")
        for name, value in (("sys/kernel/shmmax", self.memory_bytes), ("sys/kernel/shmall", pages)):
            fd = os.open(name, os.O_WRONLY | os.O_CLOEXEC, dir_fd=self.proc_fd)
            try:
                os.write(fd, str(value).encode())
            finally:
                os.close(fd)

    def _tree(self, pid: int) -> list[int]:
        out, todo = [], [pid]
        while todo:
            p = todo.pop()
            out.append(p)
            try:
                tfd = os.open(f"{p}/task", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC,
                              dir_fd=self.proc_fd)
            except OSError:
                continue
            try:
                tasks = os.listdir(tfd)
                for t in tasks:
                    try:
                        fd = os.open(f"{t}/children", os.O_RDONLY | os.O_CLOEXEC, dir_fd=tfd)
                        try:
                            todo += [int(c) for c in os.read(fd, 65536).split()]
                        finally:
                            os.close(fd)
                    except OSError:
                        pass
            finally:
                os.close(tfd)
        return out

    def _memory(self, p: int, proportional: bool) -> int:
        """Anonymous + shared memory of process ``p``: resident (cheap; a page a forked
        process still shares with its parent counts in each) or, ``proportional``, Pss from
        smaps_rollup (such a page counts once in all; a page-table walk)."""
        for name, keys in ((("smaps_rollup", (b"Pss_Anon:", b"Pss_Shmem:")),) if proportional
                           else ()) + (("status", (b"RssAnon:", b"RssShmem:")),):
            try:
                fd = os.open(f"{p}/{name}", os.O_RDONLY | os.O_CLOEXEC, dir_fd=self.proc_fd)
            except OSError:
                continue
            try:
                text = os.read(fd, 8192)
            except OSError:
                continue
            finally:
                os.close(fd)
            found = [int(line.split()[1]) * 1024 for line in text.split(b"\n")
                     if line.startswith(keys)]
            if found:
                return sum(found)
        return 0

    def sample(self, pid: int) -> tuple[int, float]:
        """(memory bytes, CPU seconds) of the program's processes: resident sizes first, the
        proportional measure only when those add up past the limit."""
        tree = self._tree(pid)
        mem, cpu = self._sample(tree, False)
        if mem > self.memory_bytes and len(tree) > 1:
            mem = self._sample(tree, True)[0]
        self.peak_cpu = max(self.peak_cpu, cpu)
        return mem, cpu

    def _sample(self, tree: list[int], proportional: bool) -> tuple[int, float]:
        mem, cpu = 0, 0.0
        for p in tree:
            try:
                fd = os.open(f"{p}/stat", os.O_RDONLY | os.O_CLOEXEC, dir_fd=self.proc_fd)
                try:
                    stat = os.read(fd, 4096)
                finally:
                    os.close(fd)
                fields = stat[stat.rindex(b")") + 2:].split()
                cpu += sum(int(x) for x in fields[11:15]) / CLK_TCK  # utime stime cutime cstime
                mem += self._memory(p, proportional)
            except (OSError, ValueError, IndexError):
                continue  # it just exited
        return mem, cpu

    def finish(self) -> tuple[float, bool]:
        return self.peak_cpu, False

    def close_in_child(self) -> None:
        try:
            os.close(self.proc_fd)
        except OSError:
            pass

    def describe(self) -> str:
        return (f"sampled every {SAMPLE_S * 1000:.0f} ms in /proc (memory = Pss_Anon + Pss_Shmem of "
                f"all processes, CPU of all processes; memfd_create refused; SysV shm capped): "
                f"no cgroup v2 ({self.why})")

    def cleanup(self) -> None:
        pass


def _limits_backend():
    try:
        return CgroupLimits()
    except OSError as exc:
        return SampledLimits(str(exc))


class Server:
    def __init__(self, disk_mb: int, isolate: bool = True, rfd: int = 0,
                 packages: tuple[str, ...] = (), view: dict | None = None) -> None:
        self.features: list[str] = []
        self.notes: list[str] = []
        self.uid: int | None = None
        self.pidns: str | None = None  # "setns", "intermediate" or None (see below)
        self.pidns_fd: int | None = None
        self.work_root = tempfile.gettempdir()
        self.disk_mb = int(disk_mb)
        self.rfd = rfd  # the protocol's input (private input is read from it after the fork)
        self.ipcns = False
        self.prog_mountns = False  # each program in its own mount namespace + fresh /tmp
        self.nocaps = False
        self.seccomp: bytes | None = None
        self.last_cap = _cap_last_cap()  # before /proc is hidden
        self.view: dict = {}
        # per-program limits over all of a program's processes (before /proc, /sys are hidden)
        self.limits = _limits_backend()
        if not isolate:
            self.notes.append("isolation disabled (--no-isolation): rlimits only")
        else:
            # ``view``: the spec an earlier server of the same client computed (trusted: the
            # client started that server; computed before it isolated itself)
            self.view = view or _in_child(lambda: view_spec(packages))
            # opened now: the view has no /proc
            pidns_fd = os.open("/proc/self/ns/pid", os.O_RDONLY)
            root = os.geteuid() == 0
            if not root:
                # Unprivileged: a user namespace may give us the others (kernel permitting).
                # Rehearse in a throwaway child first: a half-done setup cannot be undone.
                if _works_in_child(lambda: self._enter_userns(disk_mb)):
                    self._enter_userns(disk_mb)
                else:
                    self.notes.append("no usable user namespace; running without namespaces")
            else:
                try:
                    _unshare(CLONE_NEWNET)
                    self.features.append("netns")
                except OSError as exc:
                    self.notes.append(f"no network namespace: {exc}")

                def enter_mountns() -> None:
                    _unshare(CLONE_NEWNS)
                    self._mounts(disk_mb)

                if _works_in_child(enter_mountns):
                    enter_mountns()
                else:
                    self.notes.append("no usable mount namespace (unshare or mounts refused)")
                blocked = _blocked_ancestors()
                if "mountns" not in self.features and blocked:
                    # Without a mount namespace we cannot re-expose the Python installation to
                    # another uid: keep root (no process-count limit, no file-permission barrier).
                    self.notes.append(f"not dropping to a sandbox uid: {sorted(blocked)} is not "
                                      "readable by other users and there is no mount namespace")
                else:
                    self.uid = UID_BASE + os.getpid()
                    self.features.append("uid")
            # PID namespaces, probed in throwaway children. "setns": unshare before each fork and
            # setns back to our own namespace after it (root). "intermediate": when setns back
            # is refused (a user namespace), an intermediate child unshares and forks the
            # program, waits for it and passes its status on.
            fd = pidns_fd

            def via_setns() -> None:
                _unshare(CLONE_NEWPID)
                _setns(fd, CLONE_NEWPID)

            def via_intermediate() -> None:
                _unshare(CLONE_NEWPID)
                pid = os.fork()
                if pid == 0:
                    os._exit(0)
                os.waitpid(pid, 0)

            if _works_in_child(via_setns):
                self.pidns, self.pidns_fd = "setns", fd
                self.features.append("pidns")
            else:
                os.close(fd)
                if _works_in_child(via_intermediate):
                    self.pidns = "intermediate"
                    self.features.append("pidns")
                else:
                    self.notes.append("no pid namespace")
            # IPC namespaces (System V shared memory, semaphores, POSIX message queues): one per
            # program, so nothing it creates outlives it. Probe in a throwaway child.
            if _works_in_child(lambda: _unshare(CLONE_NEWIPC)):
                self.ipcns = True
                self.features.append("ipcns")
            else:
                self.notes.append("no ipc namespace")
            # One mount namespace per program (a copy of ours, with a fresh tmpfs on /tmp):
            # whatever a program mounts, writes or leaves there dies with it.
            if "mountns" in self.features:
                if _works_in_child(self._program_mounts):
                    self.prog_mountns = True
                else:
                    self.notes.append("no per-program mount namespace")
            # No capabilities left for the program (root: already none after the uid switch;
            # in a user namespace the program would otherwise hold them all there).
            def drop_all() -> None:
                _drop_bounding_capabilities(self.last_cap)
                _clear_capabilities()

            if _works_in_child(drop_all):
                self.nocaps = True
                self.features.append("nocaps")
            else:
                self.notes.append("could not drop capabilities")
            table = SECCOMP_TABLES.get(os.uname().machine)
            if table is None:
                self.notes.append(f"no seccomp filter: no system-call table for "
                                  f"{os.uname().machine} (only {sorted(SECCOMP_TABLES)})")
            else:
                # memfds: accounted only by a cgroup; refused without one
                extra = (table["memfd_create"],) if self.limits.kind != "cgroup2" else ()
                prog = _seccomp_program(table, extra)

                def try_seccomp() -> None:
                    _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
                    _install_seccomp(prog)
                    if _libc.socket(AF_UNIX, 1, 0) >= 0:  # the filter must refuse this
                        raise OSError("seccomp filter did not apply")

                if _works_in_child(try_seccomp):
                    self.seccomp = prog
                else:
                    self.notes.append("seccomp filter refused by the kernel")
        if self.seccomp is not None:
            # Last: from here on the server and everything it forks live under the filter.
            try:
                _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
                _install_seccomp(self.seccomp)
                self.features.append("seccomp")
            except OSError as exc:
                self.seccomp = None
                self.notes.append(f"seccomp filter refused: {exc}")

    def _enter_userns(self, disk_mb: int) -> None:
        uid, gid = os.getuid(), os.getgid()
        _unshare(CLONE_NEWUSER | CLONE_NEWNET | CLONE_NEWNS)
        with open("/proc/self/setgroups", "w") as f:
            f.write("deny")
        with open("/proc/self/uid_map", "w") as f:
            f.write(f"0 {uid} 1")
        with open("/proc/self/gid_map", "w") as f:
            f.write(f"0 {gid} 1")
        self.features += ["userns", "netns"]
        self._mounts(disk_mb)

    def _mounts(self, disk_mb: int) -> None:
        """In our private mount namespace: a new root holding only the view
        (:func:`view_spec`): the standard library, the interpreter and the shared libraries it
        mapped, the allow-listed packages under :data:`PACKAGES_DIR`, a few device nodes and
        /etc files, empty /proc, /sys and /tmp; all read-only except a size-capped tmpfs under
        /tmp. The host's tree is detached: nothing else of it can be named."""
        view = self.view
        _mount(None, "/", None, MS_REC | MS_PRIVATE, None)
        new = "/proc"  # any existing directory: the new root is a tmpfs mounted on it
        _mount("tmpfs", new, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=755")

        def make(path: str, is_dir: bool) -> str:
            target = new + path
            os.makedirs(target if is_dir else os.path.dirname(target), mode=0o755, exist_ok=True)
            if not is_dir and not os.path.exists(target):
                open(target, "w").close()
            return target

        for src, dst in view["binds"]:
            target = make(dst, os.path.isdir(src))
            _mount(src, target, None, MS_BIND | MS_REC, None)
        for d in view["hide"]:  # third-party packages inside the standard library's folder
            _mount("tmpfs", new + d, "tmpfs", MS_NOSUID | MS_NODEV, "size=4k,mode=555")
        make("/dev", True)
        for dev in VIEW_DEVICES:
            if os.path.exists(dev):
                _mount(dev, make(dev, False), None, MS_BIND, None)
        for d in ("/proc", "/sys", "/tmp/sandbox"):
            make(d, True)
        os.chdir(new)
        _check(_libc.syscall(ctypes.c_long(SYS_pivot_root), b".", b"."), "pivot_root")
        _check(_libc.umount2(b".", ctypes.c_int(MNT_DETACH)), "detach the host's tree")
        os.chdir("/")
        self.features.append("minimal_fs")
        self.features.append("private_dirs")
        # Everything read-only, recursively (mount_setattr, Linux >= 5.12).
        attr = (ctypes.c_uint64 * 4)(MOUNT_ATTR_RDONLY, 0, 0, 0)
        ret = _libc.syscall(ctypes.c_long(SYS_mount_setattr), ctypes.c_int(AT_FDCWD), b"/",
                            ctypes.c_uint(AT_RECURSIVE), ctypes.byref(attr),
                            ctypes.c_size_t(ctypes.sizeof(attr)))
        if ret == 0:
            self.features.append("readonly_fs")
        else:
            self.notes.append(f"could not make / read-only: {os.strerror(ctypes.get_errno())}")
        _mount("tmpfs", "/tmp/sandbox", "tmpfs", MS_NOSUID | MS_NODEV,
               f"size={int(disk_mb)}m,mode=755")
        # Imports resolve only in the view's read-only folders (never in /tmp).
        sys.path[:] = view["sys_path"]
        sys.path_importer_cache.clear()
        sys.executable = view["executable"]
        self.work_root = "/tmp/sandbox"
        self.features.append("mountns")

    def _program_mounts(self, uid: int | None = None) -> str:
        """In a forked child: its own mount namespace and a fresh, size-capped tmpfs on /tmp
        (owned by the program's uid); returns the working directory."""
        _unshare(CLONE_NEWNS)
        owner = f",uid={uid},gid={uid}" if uid is not None else ""
        _mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV,
               f"size={self.disk_mb}m,mode=700{owner}")
        return "/tmp"

    # -------------------------------------------------------------------------- one request

    def handle(self, req: dict) -> dict:
        t0 = time.monotonic()
        if self.prog_mountns:
            return self._run(req, None, t0)  # the child makes its own /tmp
        workdir = tempfile.mkdtemp(prefix="sbx-", dir=self.work_root)
        try:
            return self._run(req, workdir, t0)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)

    def _run(self, req: dict, workdir: str | None, t0: float) -> dict:
        uid = self.uid
        if workdir is not None:
            if uid is not None:
                os.chown(workdir, uid, uid)
            os.chmod(workdir, 0o700)
        try:  # an unnamed file in our tmpfs (memfd_create may be refused by our own filter)
            stdin_fd = os.open(self.work_root, os.O_TMPFILE | os.O_RDWR | os.O_CLOEXEC, 0o600)
        except OSError:
            stdin_fd = os.memfd_create("stdin", os.MFD_CLOEXEC)
        os.write(stdin_fd, req.get("stdin", "").encode())
        os.lseek(stdin_fd, 0, os.SEEK_SET)
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        n_private = int(req.get("private_len", 0))
        priv_r = priv_w = None
        if n_private:
            priv_r, priv_w = os.pipe()
            os.set_blocking(priv_w, False)
        self.limits.prepare(req)
        if self.pidns == "setns":
            _unshare(CLONE_NEWPID)  # the next child is PID 1 of a new namespace
        try:
            pid = os.fork()
            if pid == 0:
                fds = (stdin_fd, out_w, err_w, priv_r)
                if self.pidns == "intermediate":
                    self._intermediate(req, workdir, fds, uid)
                self._child(req, workdir, fds, uid)  # never returns
        finally:
            if self.pidns == "setns":
                _setns(self.pidns_fd, CLONE_NEWPID)  # back to ours for the next unshare
        for fd in (stdin_fd, out_w, err_w, priv_r):
            if fd is not None:
                os.close(fd)
        # The private input is read only now, after the fork: it never was in the memory the
        # program started with (nor in a later program's: the buffer is zeroed after use).
        private = bytearray(n_private)
        view = memoryview(private)
        got = 0
        while got < n_private:
            n = os.readv(self.rfd, [view[got:]])
            if n == 0:
                raise EOFError
            got += n
        try:
            return self._supervise(req, pid, out_r, err_r, t0, priv_w, private)
        finally:
            view[:] = bytes(n_private)
            view.release()

    def _intermediate(self, req, workdir, fds, uid) -> None:
        """Fork the program as PID 1 of a new namespace, wait, exit with its status."""
        try:
            os.setpgid(0, 0)
            _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # the server died: so do we
            _unshare(CLONE_NEWPID)
            inner = os.fork()
            if inner == 0:
                self._child(req, workdir, fds, uid)  # never returns
            os.closerange(3, 65536)  # the pipes: EOF must come when the program's side closes
            _, status = os.waitpid(inner, 0)
            if os.WIFSIGNALED(status):
                sig = os.WTERMSIG(status)
                signal.signal(sig, signal.SIG_DFL)
                os.kill(os.getpid(), sig)
                os._exit(128 + sig)
            os._exit(os.WEXITSTATUS(status))
        except BaseException:  # noqa: BLE001
            os._exit(125)

    def _child(self, req, workdir, fds, uid) -> None:
        stdin_fd, out_w, err_w, priv_r = fds
        try:
            self.limits.enter()  # first: everything it starts is counted
            os.setsid()
            os.dup2(stdin_fd, 0)
            os.dup2(out_w, 1)
            os.dup2(err_w, 2)
            keep = getattr(self.limits, "proc_fd", None)  # closed below, after its last use
            first = PRIVATE_FD + 1 if priv_r is not None else 3
            if priv_r is not None:
                os.dup2(priv_r, PRIVATE_FD)
            if keep is not None and keep >= first:
                os.closerange(first, keep)
                os.closerange(keep + 1, 65536)
            else:
                os.closerange(first, 65536)
            cpu = max(1, int(math.ceil(req["cpu_s"])))
            resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
            mem = int(req["memory_mb"]) * 1024 * 1024
            resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
            fsize = int(req["file_size_mb"]) * 1024 * 1024
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
            nofile = int(req["max_open_files"])
            resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
            nproc = int(req["max_processes"])
            resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
            if self.ipcns:
                _unshare(CLONE_NEWIPC)
                if self.limits.kind == "sampled":
                    self.limits.cap_sysv_shm()
            self.limits.close_in_child()
            if self.prog_mountns:
                workdir = self._program_mounts(uid)
            os.chdir(workdir)
            os.umask(0o077)
            if self.nocaps:
                _drop_bounding_capabilities(self.last_cap)  # needs CAP_SETPCAP: first
            if uid is not None:
                os.setgroups([])
                os.setresgid(uid, uid, uid)
                os.setresuid(uid, uid, uid)
            if self.nocaps:
                _clear_capabilities()
            _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
            _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # after setresuid (it clears it)
            for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD):
                signal.signal(sig, signal.SIG_DFL)
            os.environ.clear()
            os.environ.update(PATH=SAFE_PATH, HOME=workdir, TMPDIR=workdir, LANG="C.UTF-8",
                              PYTHONHASHSEED="0")
            sys.stdin = open(0, "r", encoding="utf-8", errors="replace", closefd=False)
            sys.stdout = open(1, "w", encoding="utf-8", errors="backslashreplace", closefd=False)
            sys.stderr = open(2, "w", encoding="utf-8", errors="backslashreplace", closefd=False,
                              buffering=1)
            sys.argv = ["program.py"]
            source = req["source"]
            req.clear()
        except BaseException:  # noqa: BLE001 - setup failed: never run the code unconfined
            try:
                os.write(2, traceback.format_exc().encode(errors="replace"))
            finally:
                os._exit(125)
        code = 0
        try:
            namespace = {"__name__": "__main__", "__builtins__": builtins}
            exec(compile(source, "program.py", "exec"), namespace)  # noqa: S102 - sandboxed
        except SystemExit as exc:
            if exc.code is None:
                code = 0
            elif isinstance(exc.code, int):
                code = exc.code & 0xFF
            else:
                try:
                    print(exc.code, file=sys.stderr)
                except BaseException:  # noqa: BLE001
                    pass
                code = 1
        except BaseException:  # noqa: BLE001
            try:
                traceback.print_exc()
            except BaseException:  # noqa: BLE001
                pass
            code = 1
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except BaseException:  # noqa: BLE001
                pass
        os._exit(code)

    def _supervise(self, req: dict, pid: int, out_r: int, err_r: int, t0: float,
                   priv_w: int | None = None, private: bytearray | None = None) -> dict:
        deadline = t0 + float(req["timeout_s"])
        cap = int(req["max_output_bytes"])
        bufs = {out_r: bytearray(), err_r: bytearray()}
        open_fds = {out_r, err_r}
        reason, detail = "", ""
        killed_by_us = False
        try:
            pidfd = os.pidfd_open(pid)
        except (AttributeError, OSError):
            pidfd = None
        status = None
        rusage = None
        poller = select.poll()
        for fd in open_fds:
            poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
        if pidfd is not None:
            poller.register(pidfd, select.POLLIN)
        priv_off = 0
        if priv_w is not None:
            poller.register(priv_w, select.POLLOUT)

        def close_private() -> None:
            nonlocal priv_w
            if priv_w is not None:
                poller.unregister(priv_w)
                os.close(priv_w)
                priv_w = None

        def kill() -> None:
            for fn in (lambda: os.kill(pid, signal.SIGKILL), lambda: os.killpg(pid, signal.SIGKILL)):
                try:
                    fn()
                except OSError:
                    pass

        drain_until = None
        cpu_limit = float(req["cpu_s"])
        mem_limit = int(req["memory_mb"]) << 20
        next_sample = time.monotonic() + SAMPLE_FIRST_S
        sampled_cpu = 0.0
        while True:
            now = time.monotonic()
            if status is None and not killed_by_us and now >= next_sample:
                # limits over all of the program's processes (see SampledLimits, CgroupLimits)
                mem, sampled_cpu = self.limits.sample(pid)
                next_sample = now + SAMPLE_S
                if sampled_cpu > cpu_limit:
                    reason = "timeout"
                    detail = f"CPU-time limit of {req['cpu_s']} s (all processes together)"
                    killed_by_us = True
                    kill()
                elif mem > mem_limit:
                    reason = "memory"
                    detail = (f"memory limit of {req['memory_mb']} MB (all processes together, "
                              f"{mem >> 20} MB measured)")
                    killed_by_us = True
                    kill()
            if status is None:
                wpid, st, ru = os.wait4(pid, os.WNOHANG)
                if wpid == pid:
                    status, rusage = st, ru
                    if self.pidns is None:
                        # Without a pid namespace a leftover process may hold the pipes open
                        # forever: read what is there for a moment, then stop waiting.
                        drain_until = time.monotonic() + 0.2
            if status is not None and not open_fds:
                break
            if drain_until is not None and time.monotonic() > drain_until:
                break
            remaining = deadline - time.monotonic()
            if remaining <= 0 and not killed_by_us:
                reason, detail = "timeout", f"wall-clock limit of {req['timeout_s']} s"
                killed_by_us = True
                kill()
                deadline = time.monotonic() + 5.0  # grace for the kernel to tear down
                continue
            if remaining <= 0 and killed_by_us:
                # Pipes still open after the kill: some holder escaped the namespace; give up.
                break
            wait_s = min(remaining, 0.05) if pidfd is None else remaining
            if status is None and not killed_by_us:
                wait_s = min(wait_s, max(0.0, next_sample - time.monotonic()))
            if drain_until is not None:
                wait_s = min(wait_s, drain_until - time.monotonic())
            wait_ms = max(1, int(wait_s * 1000))
            for fd, _ev in poller.poll(wait_ms):
                if fd == pidfd:
                    poller.unregister(pidfd)
                    continue
                if fd == priv_w:
                    try:
                        priv_off += os.write(priv_w, memoryview(private)[priv_off:])
                    except BlockingIOError:
                        continue
                    except OSError:  # the program closed its end: it does not want it
                        priv_off = len(private)
                    if priv_off >= len(private):
                        close_private()
                    continue
                chunk = os.read(fd, 65536)
                if not chunk:
                    poller.unregister(fd)
                    open_fds.discard(fd)
                    continue
                buf = bufs[fd]
                room = cap - len(buf)
                if room > 0:
                    buf += chunk[:room]
                if len(chunk) > room and not killed_by_us:
                    reason = "output_limit"
                    detail = f"{'stdout' if fd == out_r else 'stderr'} exceeded {cap} bytes"
                    killed_by_us = True
                    kill()
        close_private()
        if status is None:
            kill()
            _, status, rusage = os.wait4(pid, 0)
        for fd in (out_r, err_r) + ((pidfd,) if pidfd is not None else ()):
            try:
                os.close(fd)
            except OSError:
                pass
        if self.pidns is None:  # no pid namespace: kill the process group of leftovers
            try:
                os.killpg(pid, signal.SIGKILL)
            except OSError:
                pass
        if os.WIFSIGNALED(status):
            returncode = -os.WTERMSIG(status)
        else:
            returncode = os.WEXITSTATUS(status)
        cpu_s = rusage.ru_utime + rusage.ru_stime if rusage is not None else 0.0
        limits_cpu, oom = self.limits.finish()
        cpu_s = max(cpu_s, limits_cpu, sampled_cpu)
        if oom and reason in ("", "killed"):
            reason, detail = "memory", (f"memory limit of {req['memory_mb']} MB (all processes "
                                        "together; the kernel killed one)")
        stdout = bytes(bufs[out_r]).decode("utf-8", errors="replace")
        stderr = bytes(bufs[err_r]).decode("utf-8", errors="replace")
        if not reason and returncode in (-signal.SIGXCPU, -signal.SIGKILL) and cpu_s >= float(
            req["cpu_s"]
        ) - 0.05:
            reason, detail = "timeout", f"CPU-time limit of {req['cpu_s']} s"
        elif not reason and returncode == 125:
            reason, detail = "setup_failed", "the sandbox could not apply its limits"
        elif not reason and returncode != 0:
            tail = stderr[-2000:]
            if "MemoryError" in tail:
                reason, detail = "memory", f"address-space limit of {req['memory_mb']} MB"
            elif "File too large" in tail:
                reason, detail = "file_size", f"file-size limit of {req['file_size_mb']} MB"
            elif returncode < 0:
                try:
                    name = signal.Signals(-returncode).name
                except ValueError:
                    name = str(-returncode)
                reason, detail = "killed", f"killed by {name}"
        return {
            "returncode": returncode,
            "stdout": stdout,
            "stderr": stderr,
            "timed_out": reason == "timeout",
            "reason": reason,
            "detail": detail,
            "duration_s": time.monotonic() - t0,
            "cpu_s": cpu_s,
        }


def _preload(path: str) -> None:
    """Import a standard-library-only helper module from ``path`` before isolating, as
    ``"_grpolab" + file stem`` (children then find it compiled and imported)."""
    import importlib.util

    name = "_grpolab" + os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)


def main() -> None:
    # Protocol on private copies of stdin/stdout; the standard fds become /dev/null.
    rfd = os.dup(0)
    wfd = os.dup(1)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)
    # No parent-death signal here: it fires when the *thread* that started us exits, and clients
    # start servers from worker threads. A dead client closes our stdin: we exit after the
    # current program (whose own limits bound the wait).
    disk_mb = int(sys.argv[1]) if len(sys.argv) > 1 else 256
    packages: tuple[str, ...] = ()
    view = None
    try:
        for arg in sys.argv[2:]:
            if arg.startswith("--preload="):
                _preload(arg.split("=", 1)[1])
            elif arg.startswith("--packages="):
                packages = tuple(n for n in arg.split("=", 1)[1].split(",") if n)
            elif arg.startswith("--view="):
                view = json.loads(arg.split("=", 1)[1])
        server = Server(disk_mb, isolate="--no-isolation" not in sys.argv[2:], rfd=rfd,
                        packages=packages, view=view)
    except BaseException as exc:  # noqa: BLE001
        _send(wfd, {"ready": False, "error": f"{type(exc).__name__}: {exc}"})
        return
    harness = sys.modules.get("_grpolab_code_harness")
    if harness is not None and server.view:
        # The judge imports only from here (read-only in the view).
        harness.STDLIB_DIRS = tuple(server.view["stdlib"])
        harness.PACKAGE_DIRS = (PACKAGES_DIR,) if server.view["packages"] else ()
    gc.freeze()  # children's garbage collections then leave the inherited pages alone (COW)
    _send(wfd, {"ready": True, "features": server.features, "notes": server.notes,
                "pid": os.getpid(), "uid": server.uid,
                "packages": list(server.view.get("packages", ())), "view": server.view,
                "limits": {"kind": server.limits.kind, "detail": server.limits.describe()}})
    try:
        _serve(server, rfd, wfd)
    finally:
        server.limits.cleanup()


def _serve(server: "Server", rfd: int, wfd: int) -> None:
    while True:
        try:
            req = _recv(rfd)
        except (EOFError, OSError):
            return
        if req.get("op") == "exit":
            return
        try:
            reply = server.handle(req)
        except BaseException as exc:  # noqa: BLE001 - report, keep serving
            reply = {"error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()}
        _send(wfd, reply)


if __name__ == "__main__":
    main()
