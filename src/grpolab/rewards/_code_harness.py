"""Deprecated location: the code harness lives in :mod:`grpolab.rewards.sandbox.harness`.

Kept so that ``grpolab.rewards._code_harness`` imports keep working; it re-exports the
harness's names (``encode``, ``decode``, ``trusted_module``, ``NO_COMPARE``...).
"""

from grpolab.rewards.sandbox.harness import *  # noqa: F401,F403
from grpolab.rewards.sandbox.harness import (  # noqa: F401
    MAX_DEPTH,
    NO_COMPARE,
    PACKAGE_DIRS,
    STDLIB_DIRS,
    decode,
    encode,
    trusted_module,
)
