"""grpolab.tasks."""
