"""Small shared helpers (no grpolab imports): registries, atomic writes."""

from grpolab.utils.registry import Registry
from grpolab.utils.io import atomic_write_text, atomic_write_json

__all__ = ["Registry", "atomic_write_text", "atomic_write_json"]
