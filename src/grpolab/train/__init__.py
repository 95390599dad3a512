"""The trainer: one loop over its nouns (RunDir, TrainState, Collector -> Experience, update).

The Collector and Experience live in :mod:`grpolab.rollout`; measuring a model (evaluation, the
preflight, readability) in :mod:`grpolab.measure`."""

from grpolab.train.loop import TrainResult, load_run_config, train
from grpolab.train.rundir import RunDir, RunDirError
from grpolab.train.sft import SFTResult, run_sft
from grpolab.train.state import TrainState
from grpolab.train.policy_update import LossSpec, UpdateSpec, update

__all__ = ["LossSpec", "RunDir", "RunDirError", "SFTResult", "TrainResult", "TrainState", "UpdateSpec",
           "load_run_config", "run_sft", "train", "update"]
