"""ReasoningGymTask and the "reasoning_gym" reward, against a fake reasoning_gym module.

The fake has the real package's interface: ``create_dataset(name, size=, seed=, **config)``
returning a sized, indexable dataset of ``{"question", "answer", "metadata"}`` dicts with a
``score_answer(answer=, entry=)`` method.
"""

import random
import sys
import types

import pytest

from grpolab.rewards import safe_score
from grpolab.tasks import ReasoningGymTask, get_task


class FakeDataset:
    def __init__(self, size, seed, max_value=50):
        self.size, self.seed, self.max_value = size, seed, max_value
        self.calls = []

    def __len__(self):
        return self.size

    def __getitem__(self, idx):
        rng = random.Random(self.seed * 100_003 + idx)
        a, b = rng.randint(0, self.max_value), rng.randint(0, self.max_value)
        return {
            "question": f"what is {a} plus {b}?",
            "answer": str(a + b),
            "metadata": {"a": a, "b": b, "idx": idx},
        }

    def score_answer(self, answer, entry):
        self.calls.append((answer, entry["answer"]))
        if answer == entry["answer"]:
            return 1.0
        return 0.5 if answer and entry["answer"] in answer else 0.0


@pytest.fixture
def fake_rg(monkeypatch):
    module = types.ModuleType("reasoning_gym")
    module.created = []

    def create_dataset(name, *, size=500, seed=None, **config):
        if name != "fake_sum":
            raise ValueError(f"Dataset '{name}' not registered")
        ds = FakeDataset(size, seed, **config)
        module.created.append(ds)
        return ds

    module.create_dataset = create_dataset
    monkeypatch.setitem(sys.modules, "reasoning_gym", module)
    return module


def test_items_split_and_determinism(fake_rg):
    task = ReasoningGymTask("fake_sum", size=60, seed=3, eval_fraction=0.2)
    assert task.name == "reasoning_gym:fake_sum"
    train = task.items("train", task.available("train"))
    evals = task.items("eval", task.available("eval"))
    assert len(train) + len(evals) == 60
    assert {i.prompt for i in train}.isdisjoint({i.prompt for i in evals})
    again = ReasoningGymTask("fake_sum", size=60, seed=3, eval_fraction=0.2)
    assert again.items("train", 10) == task.items("train", 10)
    item = train[0]
    entry = FakeDataset(60, 3)[item.meta["index"]]
    assert item.prompt.startswith(entry["question"] + "\n") and item.reference == entry["answer"]
    assert item.meta["metadata"] == entry["metadata"]
    assert item.demonstration == "#" + entry["answer"] and item.reward == "reasoning_gym"
    assert item.reward_options["entry"] == entry
    assert item.reward_options["dataset_config"] == {"size": 60, "seed": 3}


def test_reward_uses_the_datasets_score_answer(fake_rg):
    task = ReasoningGymTask("fake_sum", size=20, seed=0, config={"max_value": 9})
    item = task.items("train", 1)[0]
    ref = item.reference
    assert item.score("thinking... #" + ref).score == 1.0
    assert item.score(f"<answer> {ref} </answer> #999").score == 1.0  # tags win over the marker
    assert item.score(ref).score == 1.0  # no tag, no marker: whole completion
    assert item.score("#" + ref + "!").score == 0.5  # partial credit comes from score_answer
    wrong = item.score("#-1")
    assert wrong.score == 0.0 and wrong.info["extracted"] == "-1"
    assert item.score("").score == 0.0
    scorer = fake_rg.created[-1]  # the reward built (and cached) its own dataset object
    assert scorer.max_value == 9 and ("-1", ref) in scorer.calls and (None, ref) in scorer.calls


def test_answer_marker_none_scores_whole_completion(fake_rg):
    item = ReasoningGymTask("fake_sum", size=5, seed=0, answer_marker=None).items("train", 1)[0]
    assert item.demonstration == ""
    assert item.score("#" + item.reference).score == 0.5  # "#" is not a marker now


def test_registry_and_errors(fake_rg):
    assert get_task("reasoning_gym", name="fake_sum", size=10).available("train") == 9
    with pytest.raises(ValueError, match="not registered"):
        ReasoningGymTask("nope", size=10)
    with pytest.raises(ValueError, match="inside config"):
        ReasoningGymTask("fake_sum", size=10, config={"seed": 1})
    with pytest.raises(ValueError, match="question"):
        ReasoningGymTask("fake_sum", prompt_template="no placeholder")


def test_missing_package_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "reasoning_gym", None)  # makes `import reasoning_gym` fail
    with pytest.raises(ImportError, match="pip install reasoning-gym"):
        ReasoningGymTask("fake_sum", size=10)
    result = safe_score("reasoning_gym", "#1", "1", dataset="x", entry={"answer": "1"})
    assert result.score == 0.0 and "pip install reasoning-gym" in result.info["error"]
