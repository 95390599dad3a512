"""grpolab: RL with verifiable rewards (GRPO family) for causal language models.

The objective library (:mod:`grpolab.objectives`) is pure PyTorch math over padded ``[B, T]``
tensors with a mask; everything else (models, tasks, rollouts, the trainer) builds on it.
"""

__version__ = "0.1.0"
