"""The code harness INSIDE the sandbox (standard library only; never imported on the host's
side except by tests). The sandbox's bootstrap loads it as the module ``_grpolab_code_harness``
and calls :func:`boot` with the request the host wrote on fd 3. Each sandboxed process has ONE
role (docs/sandbox.md):

* ``program`` -- :func:`grpolab.rewards.run_sandboxed`: run a source as ``__main__``;
* ``fast`` -- the code verifier's fast path: run setup + program, then evaluate each program-side
  expression and report its value as plain data on fd 4 (the expected literals never enter the
  sandbox: the verifier compares; a program that forges these reports only chooses its own
  answers);
* ``solver`` -- the judge path's program side: run setup + program, then answer the judge's
  call requests (fd 5 in, fd 6 out) with plain data. It has no descriptor to the host's verdict
  channel and never sees the tests;
* ``judge`` -- the judge path's test side, in a SEPARATE sandbox (its own process, PID, IPC,
  mount and network namespaces): it runs the dataset's tests, where the program's names are
  :class:`Remote` proxies, and writes one record per test on fd 4, which only it holds.

Values cross between solver and judge as JSON-encoded plain data (:func:`encode` /
:func:`decode`): ``None``, ``bool``, ``int``, ``float``, ``str``, ``bytes``, ``complex``,
``list``, ``tuple``, ``dict``, ``set``, ``frozenset``. The judge rebuilds them with its own
types, so every ``==`` of a test runs on real builtin values in a process the program cannot
reach; anything else is a :class:`Remote` handle that refuses to be compared, hashed or used as
a truth value. Frames are 4-byte big-endian lengths + ASCII JSON, written with a small encoder
and read with the C scanner of ``_json`` (importing :mod:`json` would cost ~9 ms per program).
"""

import builtins
import posix
import sys

import _json

#: Largest message on the judge<->solver channel, bytes, and the most containers ("[", "{")
#: and items (",") one may hold: checked on the raw bytes BEFORE decoding, so that no message
#: can make the judge's decoder recurse or allocate past these (a 20 MB list of ``{}`` would
#: be ~7 million dicts). Over any of them, the program broke the protocol: its tests fail.
MAX_MESSAGE = 16 << 20
MAX_CONTAINERS = 200_000
MAX_ITEMS = 2_000_000
MAX_DEPTH = 200
#: Module-level values of the program are copied into the judge up to this encoded size in
#: all (past it, a table is an opaque handle: tests that use it fail).
MAX_GLOBAL_COPY = 8 << 20
_PLAIN_TAGS = {tuple: "tuple", dict: "dict", set: "set", frozenset: "frozenset",
               bytes: "bytes", bytearray: "bytearray", complex: "complex"}
#: Folders the judge imports from: set by :func:`boot` to the view's read-only standard
#: library and allow-listed packages.
#: (``os`` is not imported here: its import costs ~1.3 ms per sandbox and the harness needs
#: only ``posix``; the default below is for the host, where ``os`` is loaded already.)
STDLIB_DIRS: tuple[str, ...] = tuple(
    [sys.modules["os"].path.dirname(sys.modules["os"].__file__)]
    + [p for p in sys.path if p and sys.modules["os"].path.basename(
        sys.modules["os"].path.normpath(p)) == "lib-dynload"]) if "os" in sys.modules else ()
PACKAGE_DIRS: tuple[str, ...] = ()
NO_COMPARE = ("a {} object the program returned cannot be compared, hashed or tested for "
              "truth (it would vouch for itself): return plain values (int, float, str, list, "
              "tuple, dict, set, None, bool)")
REPORT_FD, FROM_PEER_FD, TO_PEER_FD = 4, 5, 6
#: The judge server's end of its socket pair with the host (requests + each one's channel fds).
SERVER_FD = 7
_ESC = _json.encode_basestring_ascii


# ------------------------------------------------------------------------------ framing

def dumps(obj) -> str:
    """Compact ASCII JSON of plain JSON data (dict with str keys, list, str, int, finite float,
    bool, None): what :func:`encode` produces."""
    t = type(obj)
    if t is str:
        return _ESC(obj)
    if obj is None:
        return "null"
    if t is bool:
        return "true" if obj else "false"
    if t is int or t is float:
        return repr(obj)
    if t is list or t is tuple:
        return "[" + ",".join([dumps(x) for x in obj]) + "]"
    if t is dict:
        return "{" + ",".join([_ESC(str(k)) + ":" + dumps(v) for k, v in obj.items()]) + "}"
    raise TypeError(f"not plain JSON data: {t.__name__}")


def _no_constant(name):
    raise ValueError(f"{name} is not allowed")


class _ScanContext:
    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = staticmethod(_no_constant)
    memo: dict = {}


_scan = _json.make_scanner(_ScanContext())


def loads(text: str):
    """Strict JSON (no NaN/Infinity) through the C scanner; ValueError when malformed."""
    try:
        obj, end = _scan(text, 0)
    except StopIteration:
        raise ValueError("malformed JSON") from None
    if end != len(text):
        raise ValueError("trailing data after JSON")
    return obj


def send(fd: int, obj) -> None:
    data = dumps(obj).encode("ascii")
    data = len(data).to_bytes(4, "big") + data
    while data:
        data = data[posix.write(fd, data):]


def read_exact(fd: int, n: int) -> bytes:
    chunks = []
    while n:
        b = posix.read(fd, min(n, 1 << 20))
        if not b:
            raise EOFError
        chunks.append(b)
        n -= len(b)
    return b"".join(chunks)


def check_bounds(data: bytes) -> None:
    """ValueError unless ``data`` (a raw JSON message) is within :data:`MAX_CONTAINERS` and
    :data:`MAX_ITEMS` (counted on the bytes, brackets and commas inside strings too: an upper
    bound). Nesting needs no scan: the C scanner raises RecursionError past the recursion
    limit, which :func:`recv` turns into ValueError like any other malformed message."""
    if data.count(b"[") + data.count(b"{") > MAX_CONTAINERS:
        raise ValueError(f"message holds over {MAX_CONTAINERS} lists/objects")
    if data.count(b",") > MAX_ITEMS:
        raise ValueError(f"message holds over {MAX_ITEMS} items")


def recv(fd: int):
    """One message: size and structure bounded before it is decoded (:func:`check_bounds`);
    ValueError for anything malformed or over a bound (RecursionError / MemoryError included)."""
    n = int.from_bytes(read_exact(fd, 4), "big")
    if n > MAX_MESSAGE:
        raise ValueError(f"message of {n} bytes is over the {MAX_MESSAGE}-byte limit")
    data = read_exact(fd, n)
    check_bounds(data)
    try:
        return loads(data.decode("ascii"))
    except (RecursionError, MemoryError, UnicodeDecodeError) as exc:
        raise ValueError(f"undecodable message ({type(exc).__name__})") from None


def _print_exc(exc: BaseException) -> None:
    """The program's own error on its stderr (no traceback module: it imports re)."""
    try:
        sys.stdout.flush()
        tb, lines = exc.__traceback__, []
        while tb is not None:
            code = tb.tb_frame.f_code
            lines.append(f'  File "{code.co_filename}", line {tb.tb_lineno}, in {code.co_name}\n')
            tb = tb.tb_next
        sys.stderr.write("Traceback (most recent call last):\n" + "".join(lines[-20:])
                         + f"{type(exc).__name__}: {exc}\n")
        sys.stderr.flush()
    except BaseException:  # noqa: BLE001
        pass


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
        return resolve(v["id"], str(v.get("type", "?")), str(v.get("kind", "opaque")))
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
        _print_exc(exc)
        info = _exception_info(exc)
        return "ERROR", f"{info['type']}: {info['msg']}"
    return None



# ------------------------------------------------------------------------------ the solver

def kind_of(x) -> str:
    """How a test may use a non-plain object of the program (the same rule on both paths):
    "callable" (a function or class: call it), "instance" (a non-plain, non-callable module
    value: call its methods, read its attributes). Anything a call returns that is not plain
    data is "instance" when the callee is a class, else "opaque" (every use fails)."""
    return "callable" if callable(x) else "instance"


def _describe_globals(g: dict, ref) -> dict:
    names, budget = {}, [MAX_GLOBAL_COPY]
    for k, v in list(g.items()):
        if k.startswith("__") and k.endswith("__"):
            continue
        try:
            if type(v).__name__ == "module":
                names[k] = {"kind": "module", "name": str(v.__name__)}
            elif isinstance(v, type) and issubclass(v, BaseException):
                bases = [c.__name__ for c in v.__mro__
                         if getattr(builtins, c.__name__, None) is c]
                names[k] = {"kind": "exception", "name": str(v.__name__), "bases": bases}
            else:
                enc = encode(v, lambda r: ref(r, kind_of(r)) if r is v else ref(r))
                if type(enc) in (list, dict):
                    budget[0] -= len(dumps(enc))
                    if budget[0] < 0:  # tables past the copy budget: opaque (tests fail)
                        enc = ref(v)
                names[k] = {"kind": "value", "value": enc}
        except BaseException:  # noqa: BLE001
            names[k] = {"kind": "value", "value": ref(v)}
    return names


def _answer(req: dict, objs: dict, ref, resolve) -> dict:
    """One request of the judge: ``call`` (result plain, else an instance handle when the
    callee is a class, else opaque), ``getattr`` (a method handle for a callable, else plain
    or opaque) or ``setattr``. Nothing else is answered: membership, len, iteration, indexing
    and str never run on the program's objects (docs/sandbox.md)."""
    op = req["op"]
    obj = objs[req["id"]]
    args = [decode(a, resolve) for a in req.get("args", ())]
    if op == "call":
        kwargs = {k: decode(a, resolve) for k, a in req.get("kwargs", ())}
        result = obj(*args, **kwargs)
        back = [encode(a, ref) if type(a) in (list, dict, set, bytearray) else None for a in args]
        made = "instance" if isinstance(obj, type) else "opaque"
        return {"ok": encode(result, lambda r: ref(r, made) if r is result else ref(r)),
                "back": back}
    if op == "getattr":
        v = getattr(obj, req["name"])
        return {"ok": encode(v, lambda r: ref(r, "method" if callable(r) and r is v
                                              else "opaque"))}
    if op == "setattr":
        setattr(obj, req["name"], args[0])
        return {"ok": None}
    raise TypeError(f"operation {op!r} is not answered: plain data only")


def solver(program: str, setup: str) -> None:
    """Run setup + program, tell the judge its names, then answer requests until EOF."""
    g = {"__name__": "__main__", "__builtins__": builtins}
    failed = _load_program(setup, program, g)
    objs: dict[int, object] = {}

    def ref(x, kind: str = "opaque") -> dict:
        objs[id(x)] = x
        return {"$": "ref", "id": id(x), "type": type(x).__name__, "kind": kind}

    def resolve(i, _t, _k="opaque"):
        return objs[i]

    if failed is not None:
        send(TO_PEER_FD, {"loaded": False, "kind": failed[0], "what": failed[1]})
        return
    send(TO_PEER_FD, {"loaded": True, "names": _describe_globals(g, ref)})
    while True:
        try:
            req = recv(FROM_PEER_FD)
        except BaseException:  # noqa: BLE001 - the judge is done (or gone)
            return
        try:
            reply = _answer(req, objs, ref, resolve)
        except BaseException as exc:  # noqa: BLE001 - SystemExit inside a call included
            reply = {"raise": _exception_info(exc)}
        send(TO_PEER_FD, reply)


# ------------------------------------------------------------------------------ the judge

def _inside(path, dirs) -> bool:
    import posixpath  # noqa: PLC0415 - the judge only

    real = posixpath.realpath(path)
    return any(real == posixpath.realpath(d) or real.startswith(posixpath.realpath(d) + "/")
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
        self.ns: dict = {}  # the tests' namespace (the setup's exception classes)

    def request(self, msg: dict):
        if self.gone:
            raise ProgramGone(self.gone)
        try:
            send(self.wfd, msg)
            reply = recv(self.rfd)
        except (EOFError, OSError, ValueError, RecursionError, MemoryError) as exc:
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
        own = self.ns.get(name) if cls is None else None  # an exception class of the setup
        if isinstance(own, type) and issubclass(own, BaseException):
            cls = own
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
        try:
            return decode(encoded, lambda i, t, k: Remote(self, i, t, k))
        except (ValueError, TypeError, KeyError, IndexError, AttributeError, OverflowError,
                RecursionError, MemoryError) as exc:
            self.gone = f"the program sent a malformed value ({type(exc).__name__})"
            raise ProgramGone(self.gone) from None

    def plain(self, x):
        return encode(x, lambda r: _ref_of(r))

    def call(self, rid, args, kwargs):
        reply = self.request({"op": "call", "id": rid, "args": [self.plain(a) for a in args],
                              "kwargs": [[k, self.plain(v)] for k, v in kwargs.items()]})
        for a, b in zip(args, reply.get("back") or ()):
            if b is None or type(a) not in (list, dict, set, bytearray):
                continue
            new = self.value(b)  # the program changed an argument in place: so does the test's
            try:
                changed = type(new) is type(a) and new != a
            except TypeError:  # a handle inside: it refuses comparison, nothing is mirrored
                changed = False
            if changed and not _module_owned(a):
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


def _module_owned(obj) -> bool:
    """Whether ``obj`` is a module's attribute (``keyword.kwlist``, say): in-place changes a
    program makes to an argument are mirrored only onto objects the test made itself, never
    into a module the server keeps for later requests."""
    for mod in list(sys.modules.values()):
        try:
            if any(v is obj for v in vars(mod).values()):
                return True
        except TypeError:
            continue
    return False


def _ref_of(x):
    if type(x) is Remote:
        return {"$": "ref", "id": object.__getattribute__(x, "_rid"), "type": "?"}
    raise TypeError(f"cannot pass a {type(x).__name__} object to the program: plain values only")


NOT_PLAIN = ("a {} object of the program is not plain data: a test may call the program's "
             "functions and classes and the methods of an instance it made, and must compare "
             "plain results (int, float, str, list, tuple, dict, set, None, bool); {} on it "
             "fails the test")


class Remote:
    """The judge's stand-in for a non-plain object of the program. ``kind`` (:func:`kind_of`)
    says what a test may do with it: "callable" (call; attributes), "method" (call),
    "instance" (attributes: methods to call, values to read; setting attributes), "opaque"
    (nothing). Membership, len, iteration, indexing, str, comparison, hashing and truth are
    refused for every kind: they would let the program's own code answer the test."""

    __slots__ = ("_chan", "_rid", "_rtype", "_kind")

    def __init__(self, chan: _Channel, rid, rtype: str, kind: str = "opaque") -> None:
        object.__setattr__(self, "_chan", chan)
        object.__setattr__(self, "_rid", rid)
        object.__setattr__(self, "_rtype", rtype)
        object.__setattr__(self, "_kind", kind)

    def _need(self, kinds, what):
        if object.__getattribute__(self, "_kind") not in kinds:
            raise TypeError(NOT_PLAIN.format(object.__getattribute__(self, "_rtype"), what))

    def __call__(self, *args, **kwargs):
        self._need(("callable", "method"), "calling it")
        return object.__getattribute__(self, "_chan").call(
            object.__getattribute__(self, "_rid"), args, kwargs)

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        self._need(("callable", "instance"), f"reading .{name}")
        chan = object.__getattribute__(self, "_chan")
        rid = object.__getattribute__(self, "_rid")
        return chan.value(chan.request({"op": "getattr", "id": rid, "name": name}).get("ok"))

    def __setattr__(self, name, value):
        self._need(("instance",), f"setting .{name}")
        object.__getattribute__(self, "_chan").request(
            {"op": "setattr", "id": object.__getattribute__(self, "_rid"), "name": name,
             "args": [object.__getattribute__(self, "_chan").plain(value)]})

    def _not_plain(self, *_a):
        raise TypeError(NOT_PLAIN.format(object.__getattribute__(self, "_rtype"),
                                         "membership, len, iteration, indexing or str"))

    __len__ = __getitem__ = __setitem__ = __delitem__ = __contains__ = _not_plain
    __iter__ = __next__ = __str__ = __format__ = __index__ = __int__ = __float__ = _not_plain

    def __repr__(self):
        return f"<{object.__getattribute__(self, '_rtype')} object of the program>"

    def _refuse(self, *_a):
        raise TypeError(NO_COMPARE.format(object.__getattribute__(self, "_rtype")))

    __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = _refuse
    __hash__ = __bool__ = _refuse


def _verdict(record: dict) -> None:
    """One record on the verdict channel (fd 4: only the judge's sandbox holds it)."""
    send(REPORT_FD, record)


def _rebuild_names(chan: _Channel, ns: dict, names: dict) -> None:
    for name, d in names.items():
        if name in ns or not isinstance(d, dict) or name in builtins.__dict__:
            continue  # the setup's names win; a test's len, abs... are the judge's own
        try:
            kind = d.get("kind")
            if name in sys.stdlib_module_names or kind == "module":
                # a test's math, re, np... are the real modules from the read-only view
                # (trusted_module), else absent: never a module the program planted
                mod = trusted_module(name if name in sys.stdlib_module_names else d.get("name"))
                if mod is not None:
                    ns[name] = mod
            elif kind == "exception":
                base = next((getattr(builtins, b) for b in d.get("bases", ())
                             if isinstance(getattr(builtins, str(b), None), type)), Exception)
                if not (isinstance(base, type) and issubclass(base, BaseException)):
                    base = Exception
                cls = type(str(d["name"]), (base,), {"__module__": "__main__"})
                chan.exceptions[str(d["name"])] = cls
                ns[name] = cls
            else:
                ns[name] = chan.value(d.get("value"))
        except BaseException:  # noqa: BLE001 - a name the judge cannot rebuild: absent
            pass


def _run_tests(ns: dict, tests: list) -> None:
    for i, test in enumerate(tests):
        try:
            exec(compile(test, "test_%d.py" % i, "exec"), ns)  # noqa: S102 - the dataset's test
            _verdict({"i": i, "ok": True})
        except BaseException as exc:  # noqa: BLE001
            try:
                msg = str(exc)[:300]
            except BaseException:  # noqa: BLE001
                msg = ""
            _verdict({"i": i, "ok": False, "what": f"{type(exc).__name__}: {msg}"})


def judge(setup: str, tests: list, rfd: int = FROM_PEER_FD, wfd: int = TO_PEER_FD) -> None:
    """Receive the program's names from the solver (on ``rfd``), run the tests, report each on
    fd 4. Everything of one program's tests lives in this call: a fresh namespace and channel."""
    chan = _Channel(wfd, rfd)
    try:
        load = recv(rfd)
    except (EOFError, OSError, ValueError, RecursionError, MemoryError):
        _verdict({"loaded": False, "what": "the program ended before its tests ran"})
        return
    if not isinstance(load, dict) or load.get("loaded") is not True:
        what = load.get("what", "") if isinstance(load, dict) else ""
        kind = load.get("kind", "ERROR") if isinstance(load, dict) else "ERROR"
        _verdict({"loaded": False, "kind": str(kind)[:10], "what": str(what)[:300]})
        return
    sys.path[:] = [*STDLIB_DIRS, *PACKAGE_DIRS]
    sys.path_importer_cache.clear()
    ns = {"__name__": "__main__", "__builtins__": builtins}
    try:
        exec(compile(setup, "setup.py", "exec"), ns)  # noqa: S102 - the dataset's setup
    except BaseException as exc:  # noqa: BLE001
        _verdict({"loaded": False, "setup_error": True, "what": f"setup: {type(exc).__name__}: {exc}"[:300]})
        return
    names = load.get("names")
    chan.ns = ns
    _rebuild_names(chan, ns, names if isinstance(names, dict) else {})
    _verdict({"loaded": True})
    _run_tests(ns, tests)


def _recv_request(sock):
    """(request, [fd from the solver, fd to the solver]) from the host, or None at EOF. The host
    is the only writer of this socket: a 4-byte length carrying the two descriptors, then the
    marshal-free JSON body."""
    import _socket  # noqa: PLC0415 - the judge server only (the socket module imports far more)

    head, anc, _flags, _addr = sock.recvmsg(4, _socket.CMSG_SPACE(2 * 4))
    fds = []
    for level, kind, data in anc:
        if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS:
            fds += [int.from_bytes(data[i:i + 4], sys.byteorder, signed=True)
                    for i in range(0, len(data) - len(data) % 4, 4)]
    while head and len(head) < 4:
        more = sock.recv(4 - len(head))
        if not more:
            head = b""
        head += more
    if len(head) < 4 or len(fds) != 2:
        for fd in fds:
            posix.close(fd)
        return None
    n, body = int.from_bytes(head, "big"), b""
    while len(body) < n:
        more = sock.recv(min(n - len(body), 1 << 20))
        if not more:
            return None
        body += more
    return loads(body.decode("ascii")), fds


def judge_server() -> None:
    """Run many programs' tests, one request at a time, each against a fresh solver sandbox
    whose channel descriptors come with the request (fd 7, a socket pair with the host). No
    program code ever runs here: the judge holds only the dataset's setup and tests and the
    plain values the bounded decoder rebuilt. Per request on fd 4: ``{"started": True}``, the
    judge's records, ``{"done": True}``. See docs/sandbox.md."""
    import _socket  # noqa: PLC0415

    sock = _socket.socket(fileno=SERVER_FD)
    while True:
        got = _recv_request(sock)
        if got is None:
            return
        req, (rfd, wfd) = got
        _verdict({"started": True})
        _serve_one(req, rfd, wfd)
        _verdict({"done": True})  # "done" means "ready": nothing of the request is left


def _serve_one(req: dict, rfd: int, wfd: int) -> None:
    """One request, every exception caught inside it (whatever the solver sent, the server
    lives on); its channel closed before the server says done."""
    try:
        judge(req["setup"], req["tests"], rfd, wfd)
    except BaseException as exc:  # noqa: BLE001 - the request fails, the server does not
        try:
            _verdict({"loaded": False, "what": f"judge: {type(exc).__name__}"})
        except BaseException:  # noqa: BLE001
            pass
    for fd in (rfd, wfd):
        try:
            posix.close(fd)
        except OSError:
            pass


# ------------------------------------------------------------------------------ the fast path

def fast(program: str, setup: str, exprs: list) -> None:
    """Evaluate each test's program-side chain after the program and report its value (fd 4):
    ``{"i", "value", "at"}`` (``at``: how many steps of the chain ran here; the verifier runs
    the rest on the plain value) or ``{"i", "raise"}``. The expected literals never enter the
    sandbox; forged reports only choose the program's own answers."""
    _exec, _compile, _send, _chain = exec, compile, send, run_chain
    _enumerate, _exception_info_ = enumerate, _exception_info
    g = {"__name__": "__main__", "__builtins__": builtins}
    failed = _load_program(setup, program, g, exec_=_exec, compile_=_compile)
    if failed is not None:
        _send(REPORT_FD, {"loaded": False, "kind": failed[0], "what": failed[1][:300]})
        return
    _send(REPORT_FD, {"loaded": True})
    for i, chain in _enumerate(exprs):
        try:
            value, at = _chain(g, chain)
            _send(REPORT_FD, {"i": i, "value": value, "at": at})  # may be patched: own answers
        except BaseException as exc:  # noqa: BLE001 - SystemExit inside the call included
            info = _exception_info_(exc)
            _send(REPORT_FD, {"i": i, "raise": f"{info['type']}: {info['msg']}"[:300]})


def run_chain(g: dict, chain: list):
    """``(encoded value, steps run)`` of a program-side chain ``[("name", n), ("call", args,
    kwargs) | ("attr", a) | ("index", k)...]`` under the judge's rule (:func:`kind_of`,
    :class:`Remote`): calls on functions and classes, attributes of classes and instances;
    the first plain value ends the chain here (the verifier applies the rest). A non-plain
    value is reported as an opaque handle (every use of it fails in the verifier)."""
    if chain[0][1] not in g:
        raise NameError(f"name {chain[0][1]!r} is not defined")
    v = g[chain[0][1]]
    kind, enc = _kind_here(v, kind_of)
    at = 1
    for step in chain[1:]:
        if kind == "plain":
            break
        op = step[0]
        if op == "call" and kind in ("callable", "method"):
            made = "instance" if isinstance(v, type) else "opaque"
            v = v(*step[1], **dict(step[2]))
            kind, enc = _kind_here(v, lambda x: made)
        elif op == "attr" and kind in ("callable", "instance"):
            v = getattr(v, step[1])
            kind, enc = _kind_here(v, lambda x: "method" if callable(x) else "opaque")
        else:
            raise TypeError(NOT_PLAIN.format(type(v).__name__, {
                "call": "calling it", "attr": f"reading .{step[1] if len(step) > 1 else ''}",
                "index": "membership, len, iteration, indexing or str"}.get(op, op)))
        at += 1
    if kind == "plain":
        return enc, at
    return {"$": "ref", "id": 0, "type": type(v).__name__, "kind": kind}, at


def _opaque(x):
    return {"$": "ref", "id": 0, "type": type(x).__name__, "kind": "opaque"}


def _kind_here(v, non_plain) -> tuple:
    """``("plain", encoding)`` when ``v`` encodes without a handle at its top, else
    ``(non_plain(v), None)``; a value too deep to encode raises (the test fails)."""
    enc = encode(v, _opaque)
    if type(enc) is dict and enc.get("$") == "ref":
        return non_plain(v), None
    return "plain", enc


# ------------------------------------------------------------------------------ entry

#: Landlock (Linux >= 5.13; docs/sandbox.md, "Mount tables"): a sandboxed process may read files
#: beneath every top-level folder of its view except /proc, and in /proc only beneath these
#: entries: never a mount table (/proc/<pid>/mountinfo, mounts, mountstats, whose bind sources
#: are host paths), nor a thread's folder (/proc/<tid>, /proc/<pid>/task). Writing, executing
#: and listing folders are left to the view (read-only) and the seccomp filter.
PROC_READABLE = ("cpuinfo", "meminfo", "stat", "uptime", "loadavg", "version", "sys", "sysvipc",
                 "filesystems", "crypto", "devices", "diskstats", "vmstat", "zoneinfo")
#: The entries of the process's own /proc/<pid> it may read (/proc/self resolves to it).
PID_READABLE = ("status", "stat", "statm", "fd", "fdinfo", "maps", "smaps", "smaps_rollup",
                "limits", "cmdline", "environ", "comm", "io", "cgroup", "uid_map", "gid_map",
                "setgroups", "net", "ns", "auxv", "sched", "schedstat", "wchan", "oom_score",
                "oom_score_adj", "personality")
LANDLOCK_READ_FILE = 1 << 2  # LANDLOCK_ACCESS_FS_READ_FILE
NR_LANDLOCK = (444, 445, 446)  # create_ruleset, add_rule, restrict_self (x86_64 and arm64)


def _hide_mount_tables() -> None:
    """Restrict this process (and every thread it starts) with Landlock: see
    :data:`PROC_READABLE`. Called before any program code runs; raises when the kernel refuses
    (the host asked for it, having found Landlock: the sandbox then does not start)."""
    import _ctypes  # noqa: PLC0415 - the ctypes package would cost ~2 ms more per sandbox

    libc = _ctypes.dlopen(None)
    syscall, prctl = _ctypes.dlsym(libc, "syscall"), _ctypes.dlsym(libc, "prctl")
    call = _ctypes.call_function
    access = LANDLOCK_READ_FILE.to_bytes(8, "little")
    ruleset = call(syscall, (NR_LANDLOCK[0], access, 8, 0))
    if ruleset < 0:
        raise OSError("landlock_create_ruleset failed: the sandbox cannot hide the mount tables")
    me = str(posix.getpid())
    paths = ["/" + n for n in posix.listdir("/") if n != "proc"]
    paths += ["/proc/" + n for n in PROC_READABLE] + [f"/proc/{me}/{n}" for n in PID_READABLE]
    for path in paths:
        try:
            fd = posix.open(path, posix.O_PATH | posix.O_NOFOLLOW | posix.O_CLOEXEC)
        except OSError:
            continue  # not in this kernel's /proc (or not in this view)
        try:
            if call(syscall, (NR_LANDLOCK[1], ruleset, 1, access + fd.to_bytes(4, "little"), 0)):
                raise OSError(f"landlock_add_rule failed for {path}")
        finally:
            posix.close(fd)
    if call(prctl, (38, 1, 0, 0, 0)) or call(syscall, (NR_LANDLOCK[2], ruleset, 0)):
        raise OSError("landlock_restrict_self failed: the sandbox cannot hide the mount tables")
    posix.close(ruleset)


def _limit(req: dict) -> None:
    """The request's rlimits (``{resource number: value}``, numbered by the host: same kernel),
    soft = hard (a program can only lower them further); through the C library's ``setrlimit``
    when ``_ctypes`` is loaded already (Landlock), which spares loading ``resource``."""
    ctypes = sys.modules.get("_ctypes")
    if ctypes is None:
        import resource  # noqa: PLC0415

        for number, value in req["rlimits"].items():
            resource.setrlimit(number, (value, value))
        return
    setrlimit = ctypes.dlsym(ctypes.dlopen(None), "setrlimit")
    for number, value in req["rlimits"].items():
        both = value.to_bytes(8, "little") * 2  # struct rlimit {rlim_cur, rlim_max}
        if ctypes.call_function(setrlimit, (number, both)):
            raise OSError(f"setrlimit({number}, {value}) failed: the sandbox does not start")


def program(source: str) -> None:
    """Run ``source`` as ``__main__``; an uncaught MemoryError / "File too large" is labelled
    on fd 4 (the program's own claim about itself: a label, never a verdict). Exits like the
    interpreter would (status, traceback, atexit, non-daemon threads), without its teardown."""
    g = {"__name__": "__main__", "__builtins__": builtins, "__file__": "solution.py"}
    try:
        exec(compile(source, "solution.py", "exec"), g)  # noqa: S102 - sandboxed
        status = 0
    except SystemExit as exc:
        status = _exit_status(exc.code)
    except BaseException as exc:  # noqa: BLE001
        if isinstance(exc, MemoryError):
            _label("memory")
        elif isinstance(exc, OSError) and exc.errno == 27:  # EFBIG
            _label("file_size")
        sys.excepthook(type(exc), exc, exc.__traceback__)
        status = 1
    _exit(status)


def _exit_status(code) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    try:
        sys.stderr.write(f"{code}\n")
    except BaseException:  # noqa: BLE001
        pass
    return 1


def _exit(status: int) -> None:
    """Finish like the interpreter (non-daemon threads, atexit, flushed streams), then
    ``posix._exit``: the interpreter's teardown costs ~1.5 ms per sandbox and serves nobody."""
    try:
        if "threading" in sys.modules:
            sys.modules["threading"]._shutdown()
        import atexit  # noqa: PLC0415 - built in

        atexit._run_exitfuncs()
    except BaseException:  # noqa: BLE001
        pass
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:  # noqa: BLE001
            pass
    posix._exit(status)


def _label(what: str) -> None:
    try:
        send(REPORT_FD, {"exit": what})
    except BaseException:  # noqa: BLE001
        pass


def boot(req: dict) -> None:
    """Entry point (the bootstrap calls it): limits, then the request's role."""
    global STDLIB_DIRS, PACKAGE_DIRS
    STDLIB_DIRS, PACKAGE_DIRS = tuple(req["stdlib"]), tuple(req["packages"])
    if req.get("landlock"):
        _hide_mount_tables()
    _limit(req)
    role = req["role"]
    if role != "program":
        sys.stdout.flush()
        posix.dup2(2, 1)  # a program's or test's prints go to stderr; reports go to fd 4
    send(REPORT_FD, {"started": True})
    if role == "program":
        program(req["source"])
    elif role == "fast":
        fast(req["source"], req["setup"], req["exprs"])
    elif role == "solver":
        solver(req["source"], req["setup"])
    elif role == "judge_server":
        judge_server()
    else:
        judge(req["setup"], req["tests"])
    _exit(0)
