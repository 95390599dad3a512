"""grpolab.diagnostics."""
