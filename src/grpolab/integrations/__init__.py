"""grpolab.integrations."""
