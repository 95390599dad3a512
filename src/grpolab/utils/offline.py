"""Keep the Hugging Face libraries off the network: importing this module sets ``HF_HUB_OFFLINE=1``
and ``HF_HUB_DISABLE_TELEMETRY=1`` for this process and its children.

The tests and benchmarks build their models here or load them from local paths, so nothing needs
the Hub; but TRL's trainer reports its use to the Hub from a background thread when it is built,
and ``huggingface_hub`` fetches an agent registry for its user-agent header on any request (both
seen as DNS lookups of huggingface.co). ``huggingface_hub`` reads these variables when it is first
imported, so import this module before ``transformers``, ``trl`` or ``huggingface_hub``:
``import grpolab.utils.offline  # noqa: F401``.
"""

from __future__ import annotations

import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"
