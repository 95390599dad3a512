"""grpolab.rewards."""
