"""The trainer: one loop (sample -> reward -> advantages -> update -> evaluate -> log -> checkpoint)."""

from grpolab.train.evaluate import EvalResult, evaluate, pass_at_k
from grpolab.train.loop import TrainResult, load_run_config, train
from grpolab.train.sft import SFTResult, run_sft

__all__ = ["EvalResult", "SFTResult", "TrainResult", "evaluate", "load_run_config", "pass_at_k", "run_sft", "train"]
