"""The code verifier's harness inside the sandbox: a judge and a solver (standard library only).

The sandbox server imports this file once at start (``--preload``), so each program's harness is
two lines. :func:`main` runs as the sandboxed program (PID 1 of its PID namespace) and splits
into two processes *before* it knows the tests:

* the **solver** (a forked child) runs the setup and the model's program, then answers remote
  calls: "call this function with these arguments", "get this attribute". Its stdout goes to
  stderr; it has no descriptor of the real stdout nor of the private input.
* the **judge** (PID 1, not ptrace-able, unkillable from inside the namespace) then reads the
  tests from the private input (fd 3, written by the server only after the fork, so the tests
  are in no memory the solver ever had), runs each test in its own clean interpreter, where
  the program's names are :class:`Remote` stand-ins, and prints one marker line per test.

Values cross between the two as JSON-encoded plain data (:func:`encode` / :func:`decode`):
``None``, ``bool``, ``int``, ``float``, ``str``, ``bytes``, ``complex``, ``list``, ``tuple``,
``dict``, ``set``, ``frozenset``. The judge rebuilds them with its own types, so every ``==``,
``<``, ``isinstance`` or ``math.isclose`` of a test runs on real builtin values in a process the
program cannot reach. Anything else the program returns (its own objects, functions,
generators) reaches the judge as a :class:`Remote` handle: attribute access, calls, ``len``,
indexing, ``in`` and iteration go back to the solver, but a handle can never be compared, hashed
or used as a truth value (it would vouch for itself). Subclasses of the plain types and numpy
values are converted to the plain base value by the solver.
"""

from __future__ import annotations

import builtins
import json
import os
import struct
import sys
import traceback

MAX_MESSAGE = 64 << 20
MAX_DEPTH = 200
#: Module-level values of the program up to this JSON size are copied into the judge; bigger ones
#: become handles.
MAX_GLOBAL_COPY = 1 << 20
#: Builtin types a solver value is converted to (subclasses included), in MRO lookup order.
_PLAIN_TAGS = {tuple: "tuple", dict: "dict", set: "set", frozenset: "frozenset",
               bytes: "bytes", bytearray: "bytearray", complex: "complex"}
#: Folders the judge imports from (the sandbox server sets them to the view's read-only
#: standard library and allow-listed packages; these defaults serve a server without a view).
STDLIB_DIRS: tuple[str, ...] = tuple(
    [os.path.dirname(os.__file__)]
    + [p for p in sys.path if p and os.path.basename(os.path.normpath(p)) == "lib-dynload"])
PACKAGE_DIRS: tuple[str, ...] = ()
NO_COMPARE = ("a {} object the program returned cannot be compared, hashed or tested for "
              "truth (it would vouch for itself): return plain values (int, float, str, list, "
              "tuple, dict, set, None, bool)")


# ------------------------------------------------------------------------------ framing

def _send(fd: int, obj) -> None:
    data = json.dumps(obj, ensure_ascii=True, separators=(",", ":")).encode()
    data = struct.pack(">I", len(data)) + data
    while data:
        data = data[os.write(fd, data):]


def _read_exact(fd: int, n: int) -> bytes:
    chunks = []
    while n:
        b = os.read(fd, min(n, 1 << 20))
        if not b:
            raise EOFError
        chunks.append(b)
        n -= len(b)
    return b"".join(chunks)


def _recv(fd: int):
    (n,) = struct.unpack(">I", _read_exact(fd, 4))
    if n > MAX_MESSAGE:
        raise ValueError(f"message of {n} bytes is over the {MAX_MESSAGE}-byte limit")
    return json.loads(_read_exact(fd, n))


# ------------------------------------------------------------------------------ plain data

def encode(x, ref=None, depth: int = 0):
    """``x`` as JSON-able plain data. Exact builtin types are kept; subclasses of them and
    numpy values are converted to the base value; anything else becomes ``ref(x)`` (a handle)
    or, without ``ref``, a TypeError."""
    if depth > MAX_DEPTH:
        raise ValueError(f"value nested deeper than {MAX_DEPTH} levels")
    t = type(x)
    if x is None or t is bool or t is str:
        return x
    if t is int:
        return x if x.bit_length() < 2000 else {"$": "int", "v": hex(x)}
    if t is float:
        return x if x == x and x not in (float("inf"), float("-inf")) else {"$": "float", "v": repr(x)}
    if t is list:
        return [encode(e, ref, depth + 1) for e in x]
    if t in _PLAIN_TAGS:
        return _encode_tagged(t, x, ref, depth)
    if ref is None:
        raise TypeError(f"cannot pass a {t.__name__} object to the program: plain values only")
    # the solver side: convert subclasses and numpy values to plain ones, else a handle
    for base in (bool, int, float, str):
        if isinstance(x, base):
            return encode({bool: bool, int: int.__int__, float: float.__float__,
                           str: str.__str__}[base](x), ref, depth)
    if isinstance(x, list):
        return [encode(e, ref, depth + 1) for e in list.__iter__(x)]
    for base, _tag in _PLAIN_TAGS.items():
        if isinstance(x, base):
            return _encode_tagged(base, x, ref, depth)
    if getattr(t, "__module__", "") == "numpy" and hasattr(x, "tolist"):
        return encode(x.tolist(), ref, depth + 1)
    return ref(x)


def _encode_tagged(base, x, ref, depth):
    tag = _PLAIN_TAGS[base]
    if base is dict:
        v = [[encode(k, ref, depth + 1), encode(val, ref, depth + 1)] for k, val in dict.items(x)]
    elif base in (bytes, bytearray):
        v = base.hex(x)
    elif base is complex:
        v = [repr(complex.__getattribute__(x, "real")), repr(complex.__getattribute__(x, "imag"))]
    else:
        v = [encode(e, ref, depth + 1) for e in base.__iter__(x)]
    return {"$": tag, "v": v}


def decode(v, resolve, depth: int = 0):
    """The inverse of :func:`encode`, with fresh builtin objects; ``resolve(id, type)`` for
    handles."""
    if depth > MAX_DEPTH:
        raise ValueError(f"value nested deeper than {MAX_DEPTH} levels")
    t = type(v)
    if v is None or t in (bool, int, float, str):
        return v
    if t is list:
        return [decode(e, resolve, depth + 1) for e in v]
    if t is not dict:
        raise ValueError(f"malformed value of type {t.__name__}")
    tag, body = v.get("$"), v.get("v")
    if tag == "ref":
        return resolve(v["id"], str(v.get("type", "?")))
    if tag == "int":
        return int(body, 16)
    if tag == "float":
        return float(body)
    if tag == "complex":
        return complex(float(body[0]), float(body[1]))
    if tag in ("bytes", "bytearray"):
        return (bytes if tag == "bytes" else bytearray).fromhex(body)
    if tag == "dict":
        return {decode(k, resolve, depth + 1): decode(x, resolve, depth + 1) for k, x in body}
    items = [decode(e, resolve, depth + 1) for e in body]
    if tag == "tuple":
        return tuple(items)
    if tag == "set":
        return set(items)
    if tag == "frozenset":
        return frozenset(items)
    raise ValueError(f"unknown value tag {tag!r}")


def _exception_info(exc: BaseException) -> dict:
    try:
        msg = str(exc)[:500]
    except BaseException:  # noqa: BLE001
        msg = "<unprintable>"
    bases = []
    for cls in type(exc).__mro__:
        if getattr(builtins, cls.__name__, None) is cls:
            bases.append(cls.__name__)
    return {"type": type(exc).__name__, "bases": bases, "msg": msg}


def _load_program(setup: str, program: str, g: dict, exec_=exec, compile_=compile) -> tuple[str, str] | None:
    """Run ``setup`` then ``program`` in the namespace ``g``; ``None`` when both ran (or the
    program exited with status 0), else ``(kind, what)``: ``("EXIT", code)`` or ``("ERROR", msg)``.
    The fast path passes the ``exec``/``compile`` it bound before any program ran."""
    try:
        exec_(compile_(setup, "setup.py", "exec"), g)  # noqa: S102 - sandboxed
        exec_(compile_(program, "solution.py", "exec"), g)  # noqa: S102 - sandboxed
    except SystemExit as exc:
        return None if exc.code in (None, 0) else ("EXIT", repr(exc.code)[:200])
    except BaseException as exc:  # noqa: BLE001
        try:
            traceback.print_exc()
        except BaseException:  # noqa: BLE001
            pass
        info = _exception_info(exc)
        return "ERROR", f"{info['type']}: {info['msg']}"
    return None


# ------------------------------------------------------------------------------ the solver

def _solver(rfd: int, wfd: int, program: str, setup: str) -> None:
    """Run setup + program, then serve the judge's requests until it closes the pipe."""
    pid = os.getpid()
    g = {"__name__": "__main__", "__builtins__": builtins}
    status = {"loaded": True}
    failed = _load_program(setup, program, g)
    if failed is not None:
        status = {"loaded": False, "kind": failed[0], "what": failed[1]}
    if os.getpid() != pid:
        os._exit(0)  # a forked copy of the program does not answer
    objs: dict[int, object] = {}

    def ref(x) -> dict:
        objs[id(x)] = x
        return {"$": "ref", "id": id(x), "type": type(x).__name__}

    def resolve(i, _t):
        return objs[i]

    names = {}
    if status["loaded"]:
        for k, v in list(g.items()):
            if k.startswith("__") and k.endswith("__"):
                continue
            try:
                if type(v).__name__ == "module":
                    names[k] = {"kind": "module", "name": str(v.__name__)}
                elif isinstance(v, type) and issubclass(v, BaseException):
                    bases = [c.__name__ for c in v.__mro__ if getattr(builtins, c.__name__, None) is c]
                    names[k] = {"kind": "exception", "name": v.__name__, "bases": bases}
                else:
                    enc = encode(v, ref)
                    if type(enc) in (list, dict) and len(json.dumps(enc)) > MAX_GLOBAL_COPY:
                        enc = ref(v)  # a big table: a handle (len, indexing, iteration remote)
                    names[k] = {"kind": "value", "value": enc}
            except BaseException:  # noqa: BLE001
                names[k] = {"kind": "value", "value": ref(v)}
    _send(wfd, dict(status, names=names))
    if not status["loaded"]:
        os._exit(0)
    def nextn(it, n):
        out = []
        for _ in range(max(1, min(int(n), 1024))):
            try:
                out.append(next(it))
            except StopIteration:
                break
        return out

    ops = {"len": len, "str": str, "iter": iter, "next": next, "nextn": nextn,
           "getitem": lambda o, k: o[k], "contains": lambda o, k: k in o,
           "setitem": lambda o, k, v: o.__setitem__(k, v), "delitem": lambda o, k: o.__delitem__(k)}
    while True:
        try:
            req = _recv(rfd)
        except BaseException:  # noqa: BLE001 - the judge is done (or gone)
            os._exit(0)
        try:
            op = req["op"]
            obj = objs[req["id"]]
            args = [decode(a, resolve) for a in req.get("args", ())]
            if op == "call":
                kwargs = {k: decode(a, resolve) for k, a in req.get("kwargs", ())}
                result = obj(*args, **kwargs)
                back = [encode(a, ref) if type(a) in (list, dict, set, bytearray) else None
                        for a in args]
                reply = {"ok": encode(result, ref), "back": back}
            elif op == "getattr":
                reply = {"ok": encode(getattr(obj, req["name"]), ref)}
            elif op == "setattr":
                setattr(obj, req["name"], args[0])
                reply = {"ok": None}
            else:
                reply = {"ok": encode(ops[op](obj, *args), ref)}
        except BaseException as exc:  # noqa: BLE001 - SystemExit inside a call included
            reply = {"raise": _exception_info(exc)}
        _send(wfd, reply)


# ------------------------------------------------------------------------------ the judge

def _inside(path, dirs) -> bool:
    real = os.path.realpath(path)
    return any(real == os.path.realpath(d) or real.startswith(os.path.realpath(d) + os.sep)
               for d in dirs)


def trusted_module(modname):
    """The module ``modname`` as the judge may use it, or None: a standard-library name only
    from :data:`STDLIB_DIRS` (or built in), any other name only from :data:`PACKAGE_DIRS` (the
    verifier's allow-list). Never from a folder the program could write, whatever it reports."""
    import importlib  # noqa: PLC0415
    import importlib.machinery  # noqa: PLC0415

    if type(modname) is not str or not all(p.isidentifier() for p in modname.split(".")):
        return None
    top = modname.split(".")[0]
    dirs = STDLIB_DIRS if top in sys.stdlib_module_names else PACKAGE_DIRS

    def trusted(mod) -> bool:
        spec = getattr(mod, "__spec__", None)
        origin = getattr(spec, "origin", None)
        if origin in ("built-in", "frozen") or (origin is None and mod.__name__ in
                                                sys.builtin_module_names):
            return True
        return isinstance(origin, str) and _inside(origin, dirs)

    if top not in sys.modules and top not in sys.builtin_module_names:
        spec = importlib.machinery.PathFinder.find_spec(top, list(dirs))
        if spec is None or spec.origin is None or not _inside(spec.origin, dirs):
            return None
    try:
        mod = importlib.import_module(modname)
    except BaseException:  # noqa: BLE001
        return None
    top_mod = sys.modules.get(top)
    if top_mod is None or not trusted(top_mod) or not trusted(mod):
        return None
    return mod


class ProgramGone(Exception):
    """The solver process ended (or broke the protocol) before answering."""


class RemoteError(Exception):
    """An exception the program raised whose type the judge does not know."""


class _Channel:
    def __init__(self, wfd: int, rfd: int) -> None:
        self.wfd, self.rfd, self.gone = wfd, rfd, ""
        self.exceptions: dict[str, type] = {}

    def request(self, msg: dict):
        if self.gone:
            raise ProgramGone(self.gone)
        try:
            _send(self.wfd, msg)
            reply = _recv(self.rfd)
        except (EOFError, OSError, ValueError) as exc:
            self.gone = f"the program's process ended or broke the protocol ({type(exc).__name__})"
            raise ProgramGone(self.gone) from None
        if not isinstance(reply, dict):
            raise ProgramGone("malformed reply from the program")
        if "raise" in reply:
            self.raise_(reply["raise"])
        return reply

    def raise_(self, info: dict):
        name, msg = str(info.get("type")), str(info.get("msg", ""))
        cls = self.exceptions.get(name)
        if cls is None:
            for base in [name, *info.get("bases", ())]:
                c = getattr(builtins, str(base), None)
                if isinstance(c, type) and issubclass(c, BaseException):
                    cls = c
                    break
        try:
            exc = (cls or RemoteError)(msg if cls is not None else f"{name}: {msg}")
        except BaseException:  # noqa: BLE001 - an exception type with other constructor args
            exc = RemoteError(f"{name}: {msg}")
        raise exc

    def value(self, encoded):
        return decode(encoded, lambda i, t: Remote(self, i, t))

    def plain(self, x):
        return encode(x, lambda r: _ref_of(r))

    def call(self, rid, args, kwargs):
        reply = self.request({"op": "call", "id": rid, "args": [self.plain(a) for a in args],
                              "kwargs": [[k, self.plain(v)] for k, v in kwargs.items()]})
        for a, b in zip(args, reply.get("back") or ()):
            if b is None or type(a) not in (list, dict, set, bytearray):
                continue
            new = self.value(b)  # the program changed an argument in place: so does the test's
            if type(new) is type(a):
                if type(a) is dict:
                    a.clear()
                    a.update(new)
                elif type(a) is set:
                    a.clear()
                    a.update(new)
                else:
                    a[:] = new
        return self.value(reply.get("ok"))

    def op(self, rid, name, *args):
        return self.value(self.request({"op": name, "id": rid,
                                        "args": [self.plain(a) for a in args]}).get("ok"))


def _ref_of(x):
    if type(x) is Remote:
        return {"$": "ref", "id": object.__getattribute__(x, "_rid"), "type": "?"}
    raise TypeError(f"cannot pass a {type(x).__name__} object to the program: plain values only")


class Remote:
    """The judge's stand-in for a non-plain object of the program (a function, an instance...)."""

    __slots__ = ("_chan", "_rid", "_rtype")

    def __init__(self, chan: _Channel, rid, rtype: str) -> None:
        object.__setattr__(self, "_chan", chan)
        object.__setattr__(self, "_rid", rid)
        object.__setattr__(self, "_rtype", rtype)

    def _do(self, name, *args):
        return object.__getattribute__(self, "_chan").op(object.__getattribute__(self, "_rid"),
                                                         name, *args)

    def __call__(self, *args, **kwargs):
        return object.__getattribute__(self, "_chan").call(
            object.__getattribute__(self, "_rid"), args, kwargs)

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        chan = object.__getattribute__(self, "_chan")
        rid = object.__getattribute__(self, "_rid")
        return chan.value(chan.request({"op": "getattr", "id": rid, "name": name}).get("ok"))

    def __setattr__(self, name, value):
        object.__getattribute__(self, "_chan").request(
            {"op": "setattr", "id": object.__getattribute__(self, "_rid"), "name": name,
             "args": [object.__getattribute__(self, "_chan").plain(value)]})

    def __len__(self):
        return self._do("len")

    def __getitem__(self, key):
        return self._do("getitem", key)

    def __setitem__(self, key, value):
        self._do("setitem", key, value)

    def __delitem__(self, key):
        self._do("delitem", key)

    def __contains__(self, item):
        return self._do("contains", item)

    def __iter__(self):
        it = self._do("iter")
        if type(it) is not Remote:
            return builtins.iter(it)
        return _Chunks(object.__getattribute__(it, "_chan"), object.__getattribute__(it, "_rid"))

    def __next__(self):
        return self._do("next")

    def __str__(self):
        s = self._do("str")
        if type(s) is not str:
            raise TypeError("__str__ of a program object did not give a str")
        return s

    def __repr__(self):
        return f"<{object.__getattribute__(self, '_rtype')} object of the program>"

    def _refuse(self, *_a):
        raise TypeError(NO_COMPARE.format(object.__getattribute__(self, "_rtype")))

    __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = _refuse
    __hash__ = __bool__ = _refuse


class _Chunks:
    """Iteration over a program's iterator in growing chunks (1, 2, 4, ... 1024 items per round
    trip): ``for x in obj`` and ``list(obj)`` without one round trip per item. ``next(obj)`` on a
    handle itself still takes exactly one item."""

    def __init__(self, chan: _Channel, rid) -> None:
        self.chan, self.rid, self.buf, self.n, self.done = chan, rid, [], 1, False

    def __iter__(self):
        return self

    def __next__(self):
        if not self.buf:
            if self.done:
                raise StopIteration
            reply = self.chan.request({"op": "nextn", "id": self.rid,
                                       "args": [self.n]})
            self.buf = list(reversed(self.chan.value(reply.get("ok"))))
            self.done = len(self.buf) < self.n
            self.n = min(2 * self.n, 1024)
            if not self.buf:
                raise StopIteration
        return self.buf.pop()


def _judge(chan: _Channel, setup: str, nonce: str, out_fd: int) -> None:
    try:
        import ctypes  # noqa: PLC0415 - preloaded by the server
        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0: no ptrace, no /proc/pid/fd
    except BaseException:  # noqa: BLE001
        pass
    chunks = []
    while True:
        b = os.read(3, 1 << 20)
        if not b:
            break
        chunks.append(b)
    os.close(3)
    tests = json.loads(b"".join(chunks))["tests"]

    def mark(i, status, what=""):
        try:
            sys.stdout.flush()
        except BaseException:  # noqa: BLE001
            pass
        line = "\n%s:%d:%s:%s\n" % (nonce, i, status, str(what)[:200].replace("\n", " "))
        os.write(out_fd, line.encode("utf-8", "backslashreplace"))

    try:
        load = _recv(chan.rfd)
    except (EOFError, OSError, ValueError):
        mark(-1, "ERROR", "the program ended before its tests ran")
        return
    if not isinstance(load, dict) or not load.get("loaded"):
        what = load.get("what", "") if isinstance(load, dict) else ""
        mark(-1, load.get("kind", "ERROR") if isinstance(load, dict) else "ERROR", what)
        return
    # The setup's and the tests' own imports, too, resolve only in the trusted folders.
    sys.path[:] = [*STDLIB_DIRS, *PACKAGE_DIRS]
    sys.path_importer_cache.clear()
    ns = {"__name__": "__main__", "__builtins__": builtins}
    try:
        exec(compile(setup, "setup.py", "exec"), ns)  # noqa: S102 - the dataset's setup
    except BaseException as exc:  # noqa: BLE001
        mark(-1, "ERROR", f"setup: {type(exc).__name__}: {exc}")
        return
    for name, d in (load.get("names") or {}).items():
        if name in ns or not isinstance(d, dict):
            continue  # the setup's own names win (the tests rely on them)
        if name in builtins.__dict__:
            continue  # a test's abs, len, sorted, isinstance... are the judge's, not the program's
        try:
            kind = d.get("kind")
            if name in sys.stdlib_module_names or kind == "module":
                # A test's math, re, np... are the real modules, from the read-only standard
                # library or the allow-list (trusted_module), else absent: never a module the
                # program planted, whatever name it reports.
                mod = trusted_module(name if name in sys.stdlib_module_names else d.get("name"))
                if mod is not None:
                    ns[name] = mod
            elif kind == "exception":
                base = next((getattr(builtins, b) for b in d.get("bases", ())
                             if isinstance(getattr(builtins, b, None), type)), Exception)
                cls = type(str(d["name"]), (base,), {"__module__": "__main__"})
                chan.exceptions[str(d["name"])] = cls
                ns[name] = cls
            else:
                ns[name] = chan.value(d.get("value"))
        except BaseException:  # noqa: BLE001 - a name the judge cannot rebuild: absent
            pass
    mark(-1, "LOADED")
    for i, test in enumerate(tests):
        try:
            exec(compile(test, "test_%d.py" % i, "exec"), ns)  # noqa: S102 - the dataset's test
            mark(i, "PASS")
        except BaseException as exc:  # noqa: BLE001
            try:
                msg = str(exc)
            except BaseException:  # noqa: BLE001
                msg = ""
            mark(i, "FAIL", f"{type(exc).__name__}: {msg}")


def main(program: str, setup: str, nonce: str) -> None:
    """Entry point of the harness (the sandboxed program): fork the solver, then judge."""
    j2s_r, j2s_w = os.pipe()
    s2j_r, s2j_w = os.pipe()
    out_fd = os.dup(1)
    pid = os.fork()
    if pid == 0:
        try:
            os.close(3)  # the tests arrive there, later, for the judge only
        except OSError:
            pass
        for fd in (j2s_w, s2j_r, out_fd):
            os.close(fd)
        os.dup2(2, 1)  # the program's prints: to stderr; stdout belongs to the judge
        try:
            _solver(j2s_r, s2j_w, program, setup)
        finally:
            os._exit(0)
    os.close(j2s_r)
    os.close(s2j_w)
    os.dup2(2, 1)  # a test's prints do not mix with the markers either
    chan = _Channel(j2s_w, s2j_r)
    try:
        _judge(chan, setup, nonce, out_fd)
    finally:
        try:
            sys.stdout.flush()
        except BaseException:  # noqa: BLE001
            pass
        os._exit(0)


# ------------------------------------------------------------------------------ the fast path

def fast_main(program: str, setup: str, nonce: str, exprs: list) -> None:
    """Single-process harness for tests of the form ``assert <program side> <op> <literal>``:
    the expected literals never enter the sandbox (the verifier keeps them and compares), so
    this process only evaluates each program-side expression and reports its value as plain
    data. A program that forges or suppresses these reports only chooses its own answers."""
    out_fd = os.dup(1)
    # own references: a program that replaces these builtins only breaks its own reports
    _compile, _eval, _exec, _dumps, _write, _getpid = (compile, eval, exec, json.dumps, os.write,
                                                         os.getpid)
    _enc, _str_replace, _enumerate = str.encode, str.replace, enumerate
    pid = _getpid()

    def mark(i, status, what=""):
        if _getpid() != pid:
            return  # a forked copy: only the original process reports
        try:
            sys.stdout.flush()
        except BaseException:  # noqa: BLE001
            pass
        line = "\n%s:%d:%s:%s\n" % (nonce, i, status, _str_replace(what, "\n", " "))
        _write(out_fd, _enc(line, "utf-8", "backslashreplace"))

    g = {"__name__": "__main__", "__builtins__": builtins}
    failed = _load_program(setup, program, g, exec_=_exec, compile_=_compile)
    if failed is not None:
        mark(-1, failed[0], failed[1][:200])
        return
    mark(-1, "LOADED")

    def opaque(x):
        return {"$": "ref", "id": 0, "type": type(x).__name__}

    for i, src in _enumerate(exprs):
        try:
            value = _eval(_compile(src, "test_%d.py" % i, "eval"), g)  # noqa: S307 - sandboxed
            text = _dumps(encode(value, opaque), ensure_ascii=True, separators=(",", ":"))
        except BaseException as exc:  # noqa: BLE001 - SystemExit inside the call included
            info = _exception_info(exc)
            mark(i, "RAISE", f"{info['type']}: {info['msg']}"[:200])
            continue
        mark(i, "VALUE", text)
