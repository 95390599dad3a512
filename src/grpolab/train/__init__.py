"""The trainer: one loop over its nouns (RunDir, TrainState, Collector -> Experience, update)."""

from grpolab.train.collector import Collector, EpisodeCollector, SingleTurnCollector, make_collector
from grpolab.train.evaluate import EvalResult, evaluate, pass_at_k
from grpolab.train.experience import Experience
from grpolab.train.loop import TrainResult, load_run_config, train
from grpolab.train.rundir import RunDir, RunDirError
from grpolab.train.sft import SFTResult, run_sft
from grpolab.train.state import TrainState
from grpolab.train.policy_update import LossSpec, UpdateSpec, update

__all__ = ["Collector", "EpisodeCollector", "EvalResult", "Experience", "LossSpec", "RunDir", "RunDirError",
           "SFTResult", "SingleTurnCollector", "TrainResult", "TrainState", "UpdateSpec", "evaluate",
           "load_run_config", "make_collector", "pass_at_k", "run_sft", "train", "update"]
