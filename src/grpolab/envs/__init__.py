"""grpolab.envs."""
