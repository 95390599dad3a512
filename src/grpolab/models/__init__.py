"""grpolab.models."""
