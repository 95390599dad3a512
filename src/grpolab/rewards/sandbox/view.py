"""The programs' filesystem view: what of the host a sandboxed program can see (read-only).

:func:`view_spec` (standard library only, so that it can also run under another interpreter as
``python -I view.py PACKAGES...``) lists what the interpreter needs: its standard library, the
executable, every shared library they load (read from the ELF headers, transitively), two /etc
files, and the allow-listed third-party packages under :data:`PACKAGES_DIR`. Nothing else of
the host -- no project, data, home, run directory, /usr/share, other site-packages -- exists
in the view.

:func:`stage` turns the spec into few mounts (bubblewrap pays ~0.2 ms per mount): every single
file is hard-linked (or copied) into one private staging tree that mirrors the view's layout,
which is bound read-only as the programs' ``/``; directories (the standard library, the
packages) are bound on top as they are, or mirrored into the tree too.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import sys
import tempfile

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
    import importlib.util

    return {"binds": binds, "hide": hide, "stdlib": stdlib, "sys_path": sys_path,
            "executable": exe, "packages": sorted(n for _, n in pkgs if not n.endswith(".libs")),
            "ctypes": importlib.util.find_spec("_ctypes") is not None}


def stage(spec: dict, mirror: bool = False) -> dict:
    """``{"root": staging dir, "binds": [(src, dst)], "empty": empty dir}`` for ``spec``:
    single files linked into the staging tree ``root/view``, which is bound read-only as the
    programs' ``/`` (one mount; the mount points of /proc, /dev and /tmp are made in it), then
    the directory binds on top. The staging dir is private to this process (removed by the
    caller; one left by a process that died without removing it is removed here, see
    :func:`sweep`).

    ``mirror``: directories too are mirrored into the staging tree (hard links, copies across
    file systems; the hidden site-packages folders left out), so that every bind's source
    lies in the world-readable staging tree: how a root pool runs programs under a uid of
    their own when the interpreter sits below a folder other users cannot enter (``/root``)."""
    sweep()
    # no pid in the name (the owner's pid is in OWNER_FILE, outside the bound view)
    root = tempfile.mkdtemp(prefix=VIEW_PREFIX)
    os.chmod(root, 0o755)
    with open(os.path.join(root, OWNER_FILE), "w") as f:
        f.write(str(os.getpid()))
    tree = os.path.join(root, "view")
    os.mkdir(tree)
    os.chmod(tree, 0o755)
    dir_binds: list[tuple[str, str]] = []
    for src, dst in spec["binds"]:
        if os.path.isdir(src) and (mirror or dst.startswith(PACKAGES_DIR + "/")) and _mkdirs(
                tree, os.path.dirname(dst)) is None and _mirrored(
                src, tree + dst, set(spec.get("hide", ())), dst, copy=mirror):
            continue  # a package's host path (a virtual environment's) is not a mount source
        if os.path.isdir(src):
            dir_binds.append((src, dst))
            _mkdirs(tree, dst)  # the mount point exists inside the staged tree
            continue
        target = tree + dst
        _mkdirs(tree, os.path.dirname(dst))
        if not os.path.exists(target):
            try:
                os.link(src, target)
            except OSError:
                shutil.copy2(src, target)
    for d in (*(spec.get("hide", ()) if not mirror else ()), *MOUNT_POINTS):
        _mkdirs(tree, d)
    for dev in VIEW_DEVICES:  # files the device nodes are bound onto (read-only /dev)
        open(tree + dev, "w").close()
    empty = os.path.join(root, ".empty")
    os.mkdir(empty)
    os.chmod(empty, 0o555)
    binds = [(tree, "/")] + [(s, d) for s, d in dir_binds if not d.startswith(PACKAGES_DIR + "/")]
    binds += [(empty, d) for d in spec.get("hide", ()) if not mirror]
    binds += [(s, d) for s, d in dir_binds if d.startswith(PACKAGES_DIR + "/")]
    return {"root": root, "binds": binds, "empty": empty, "mirrored": mirror}


#: Mount points every view has (bubblewrap mounts /proc and /tmp on them and binds the device
#: nodes into /dev; the view's ``/`` is a read-only bind, so they cannot be made at start).
MOUNT_POINTS = ("/proc", "/dev", "/tmp")


#: Staging dirs are ``<tmp>/grpolab-view-<random>``, holding OWNER_FILE (the owner's pid).
VIEW_PREFIX = "grpolab-view-"
OWNER_FILE = ".owner"


def sweep(tmp: str | None = None) -> list[str]:
    """Remove staging dirs of this uid whose process is gone (a crashed or killed trainer
    cannot remove its own); returns the removed paths."""
    tmp = tmp or tempfile.gettempdir()
    removed = []
    try:
        names = os.listdir(tmp)
    except OSError:
        return removed
    for name in names:
        if not name.startswith(VIEW_PREFIX):
            continue
        path = os.path.join(tmp, name)
        try:
            if os.lstat(path).st_uid != os.getuid() or os.path.islink(path):
                continue
            with open(os.path.join(path, OWNER_FILE)) as f:
                pid = f.read().strip()
            if not pid.isdigit():
                continue
            os.kill(int(pid), 0)
            continue  # its process is alive
        except ProcessLookupError:
            pass
        except OSError:
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed


def _mirrored(src: str, dst: str, skip: set, at: str, copy: bool) -> bool:
    """:func:`_link_tree`; with ``copy=False`` only hard links, and False (nothing left at
    ``dst``) when one is refused (another file system, another owner's files)."""
    try:
        _link_tree(src, dst, skip, at, copy)
        return True
    except OSError:
        if copy:
            raise
        shutil.rmtree(dst, ignore_errors=True)
        return False


def _link_tree(src: str, dst: str, skip: set, at: str, copy: bool = True) -> None:
    """Mirror the folder ``src`` at ``dst``: folders made 0755, files hard-linked (copied when
    a link is refused and ``copy``); symbolic links kept as they are; ``at`` is ``dst``'s path
    in the view, and folders whose view path is in ``skip`` are left out."""
    os.makedirs(dst, exist_ok=True)
    os.chmod(dst, 0o755)
    for base, dirs, files in os.walk(src):
        rel = os.path.relpath(base, src)
        view_base = at if rel == "." else os.path.join(at, rel)
        dirs[:] = [d for d in dirs if os.path.join(view_base, d) not in skip]
        out = dst if rel == "." else os.path.join(dst, rel)
        for d in dirs:
            target = os.path.join(out, d)
            if os.path.islink(os.path.join(base, d)):
                os.symlink(os.readlink(os.path.join(base, d)), target)
            else:
                os.mkdir(target)
                os.chmod(target, 0o755)
        for name in files:
            path, target = os.path.join(base, name), os.path.join(out, name)
            if os.path.islink(path):
                os.symlink(os.readlink(path), target)
                continue
            try:
                os.link(path, target)
            except OSError:
                if not copy:
                    raise
                shutil.copy2(path, target)


def _mkdirs(root: str, path: str) -> None:
    cur = root
    for part in path.strip("/").split("/"):
        cur = os.path.join(cur, part)
        if not os.path.isdir(cur):
            os.mkdir(cur)
            os.chmod(cur, 0o755)


if __name__ == "__main__":  # python -I view.py NAME... -> the spec of this interpreter, as JSON
    if sys.path and os.path.abspath(sys.path[0] or ".") == os.path.dirname(os.path.abspath(__file__)):
        del sys.path[0]
    print(json.dumps(view_spec(tuple(sys.argv[1:]))))
