"""grpolab.rollout."""
