"""The environment variables grpolab reads, each typed and ranged, checked before any work.

:data:`ENV_VARS` lists every variable grpolab's code reads (a test holds it to ``src/``) with what
it accepts; :func:`check_environment` raises one :class:`~grpolab.errors.ConfigError` naming the
variable, its value and the fix for the first bad one. The command line runs it before torch is
imported, so that a bad ``OMP_NUM_THREADS`` is not first met by libgomp (which prints
``Invalid value`` and silently uses every core) and a bad ``MKL_NUM_THREADS`` does not silently
make torch run on one thread. The table of docs/faults.md is this list.

This module imports nothing heavy (no torch): it runs first.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable, Mapping

from grpolab.errors import ConfigError

__all__ = ["ENV_VARS", "EnvVar", "MMAP_THRESHOLD_MAX", "check_environment", "check_variable", "env_int"]

#: glibc's largest mmap threshold on a 64-bit system (``DEFAULT_MMAP_THRESHOLD_MAX``): 32 MiB
MMAP_THRESHOLD_MAX = 32 << 20


@dataclass(frozen=True)
class EnvVar:
    """One environment variable grpolab reads.

    Attributes:
        name: the variable.
        accepts: what it accepts, in the words of the table and of the error.
        meaning: what it does, and the default when unset.
        check: ``check(value) -> problem or None`` for a set value (None: anything is accepted).
    """

    name: str
    accepts: str
    meaning: str
    check: Callable[[str], str | None] | None = None

    def problem(self, env: Mapping[str, str]) -> str | None:
        """The error line for this variable's value in ``env`` (None when unset or fine)."""
        if self.check is None or self.name not in env:
            return None
        value = env[self.name]
        why = self.check(value)
        if why is None:
            return None
        return f"environment variable {self.name}={value!r}: {why}; set it to {self.accepts}, or unset it"


def env_int(value: str, *, low: int, high: int | None = None) -> int | None:
    """``value`` as a whole number in ``[low, high]``, else None."""
    text = value.strip()
    if not text.lstrip("+-").isdigit():
        return None
    n = int(text)
    return n if n >= low and (high is None or n <= high) else None


def _threads(value: str) -> str | None:
    # OpenMP also takes a comma-separated list, one count per nesting level ("4,2")
    parts = value.split(",")
    if all(env_int(p, low=1) is not None for p in parts):
        return None
    return "not a whole number of threads >= 1"


def _positive(value: str) -> str | None:
    return None if env_int(value, low=1) is not None else "not a whole number of threads >= 1"


def _mmap_threshold(value: str) -> str | None:
    if env_int(value, low=0, high=MMAP_THRESHOLD_MAX) is not None:
        return None
    if env_int(value, low=MMAP_THRESHOLD_MAX + 1) is not None:
        return f"above glibc's largest mmap threshold ({MMAP_THRESHOLD_MAX} bytes), which it would ignore"
    return "not a whole number of bytes >= 0"


def _switch(value: str) -> str | None:
    return None if value.strip() in ("", "0", "1") else "not a switch"


def _directory(value: str) -> str | None:
    if not value.strip():
        return "empty"
    if os.path.exists(value) and not os.path.isdir(value):
        return "a file, not a directory"
    return None


def _executable(value: str) -> str | None:
    if not os.path.isfile(value):
        return "no such file"
    return None if os.access(value, os.X_OK) else "not executable"


#: Every environment variable grpolab reads (tests/train/test_env_vars.py holds this to src/).
ENV_VARS: tuple[EnvVar, ...] = (
    EnvVar("OMP_NUM_THREADS", "a whole number >= 1 (or OpenMP's per-level list, e.g. 4,2)",
           "threads torch computes with (unset: one per core); the figures of a run depend on it", _threads),
    EnvVar("MKL_NUM_THREADS", "a whole number >= 1",
           "threads of MKL's kernels (unset: as OMP_NUM_THREADS); a value MKL cannot read left torch one thread", _positive),
    EnvVar("GRPOLAB_MMAP_THRESHOLD",
           f"a whole number of bytes from 0 (0 keeps glibc's dynamic threshold) to {MMAP_THRESHOLD_MAX} (32 MiB)",
           "glibc's mmap threshold while training (unset: 131072 at one torch thread, glibc's own at more; "
           "0: glibc's own); grpolab.utils.heap", _mmap_threshold),
    EnvVar("GRPOLAB_CACHE_DIR", "a directory (created if missing)",
           "where built task data is cached (unset: ~/.cache/grpolab): the short_sql databases, MiniWoB++ items",
           _directory),
    EnvVar("GRPOLAB_REQUIRE_SANDBOX", "0 or 1 (empty: 0)",
           "1: a sandbox with less than full isolation is an error instead of a warning (CI sets it)", _switch),
    EnvVar("MINIWOB_CHROME_BINARY", "an executable file (set with MINIWOB_CHROMEDRIVER)",
           "the Chromium the MiniWoB++ environment drives (unset: found on PATH)", _executable),
    EnvVar("MINIWOB_CHROMEDRIVER", "an executable file (set with MINIWOB_CHROME_BINARY)",
           "the chromedriver for it (unset: found on PATH)", _executable),
    EnvVar("MALLOC_MMAP_THRESHOLD_", "glibc's own values",
           "glibc's mmap threshold: when set, grpolab leaves the threshold to it (glibc checks the value)"),
    EnvVar("GLIBC_TUNABLES", "glibc's own values", "likewise, when it names glibc.malloc.mmap_threshold"),
    EnvVar("VERL_PLATFORM", "verl's own values",
           "cpu: the verl integration registers its CPU platform on import (verl checks the value)"),
    EnvVar("TRANSFORMERS_SDPA_FORCE_GQA", "transformers' own values",
           "set by grpolab around a CPU forward of a grouped-query model unless already set (the user's value "
           "wins)"),
    EnvVar("HF_HUB_OFFLINE", "--", "set to 1 by grpolab: nothing is downloaded at run time"),
    EnvVar("HF_HUB_DISABLE_TELEMETRY", "--", "set to 1 by grpolab"),
)

#: Set by grpolab for its own worker processes (parent to child); never read from a user's shell.
INTERNAL = ("GRPOLAB_MINIWOB_REPLY_FD", "GRPOLAB_MINIWOB_NETNS", "GRPOLAB_MINIWOB_CHROME",
            "GRPOLAB_MINIWOB_DRIVER", "GRPOLAB_MINIWOB_HTML", "GRPOLAB_MINIWOB_PROFILE", "GRPOLAB_VERL_CPU_NETNS")


def check_variable(name: str, env: Mapping[str, str] | None = None) -> None:
    """:func:`check_environment` for the one variable ``name`` (its reader calls it: library use)."""
    problem = next(v for v in ENV_VARS if v.name == name).problem(os.environ if env is None else env)
    if problem is not None:
        raise ConfigError(problem)


def check_environment(env: Mapping[str, str] | None = None) -> None:
    """Raise :class:`ConfigError` for the first variable of :data:`ENV_VARS` whose value in ``env``
    (default ``os.environ``) it does not accept, naming the variable, the value and the fix."""
    env = os.environ if env is None else env
    for var in ENV_VARS:
        problem = var.problem(env)
        if problem is not None:
            raise ConfigError(problem)
    chrome, driver = ("MINIWOB_CHROME_BINARY" in env), ("MINIWOB_CHROMEDRIVER" in env)
    if chrome != driver:
        raise ConfigError("environment variables MINIWOB_CHROME_BINARY and MINIWOB_CHROMEDRIVER go together: set "
                          f"{'MINIWOB_CHROMEDRIVER' if chrome else 'MINIWOB_CHROME_BINARY'} too, or unset both")
