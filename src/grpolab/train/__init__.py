"""grpolab.train."""
