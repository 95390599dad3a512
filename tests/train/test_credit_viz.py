"""The `grpolab credit` page: HTML colours and segment outlines from hand-made data; the CLI end to end."""

import pytest

from grpolab.train.credit_viz import _color, render_html, render_png

DATA = {
    "method": "gear", "lam": 1.0, "eps_w": 0.2, "teacher": "frozen", "template": "{prompt}{privileged}",
    "metrics": {},
    "rows": [{
        "prompt": "1+2=", "completion": "1+2=4#4", "reward": 0.0, "advantage": -1.0,
        "tokens": ["1", "+", "2", "=", "4", "#", "4"],
        "multiplier": [1.0, 1.0, 1.2, 1.2, 1.2, 0.8, 1.0],
        "delta": [0.0] * 7, "kl": [0.1] * 7, "segment": [0, 0, 1, 1, 1, 0, 0],
    }],
}


def test_colours():
    assert _color(1.0, 0.2) == (1.0, 1.0, 1.0)                 # white at 1
    assert _color(1.2, 0.2) == pytest.approx((1.0, 0.25, 0.25))  # saturated red at 1 + eps
    assert _color(5.0, 0.2) == pytest.approx(_color(1.2, 0.2))  # clipped
    assert _color(0.8, 0.2) == pytest.approx((0.25, 0.25, 1.0))  # saturated blue at 1 - eps


def test_html_marks_segments_and_colours_tokens():
    page = render_html(DATA)
    assert page.count("class='tok seg anc'") == 1                # one anchor (first token of the segment)
    assert page.count("class='tok seg'") == 2                    # two more tokens inside it
    assert page.count("background:#ffffff") == 3                 # multiplier 1
    assert page.count("background:#ff3f3f") == 3                 # 1.2 -> (255, 63, 63)
    assert "segment 1" in page and "A = -1.000" in page


def test_png_is_written(tmp_path):
    render_png(DATA, tmp_path / "c.png")
    assert (tmp_path / "c.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_cli_writes_the_page(tmp_path, capsys):
    from grpolab.cli import main
    from grpolab.config import load_config
    from grpolab.train import train

    small = ["model.hidden_size=32", "model.num_layers=2", "model.num_heads=2", "model.intermediate_size=64",
             "task.n_train=64", "task.n_eval=8", "sft.max_steps=4", "sft.n_eval=8", "rollout.prompts_per_step=2",
             "rollout.group_size=4", "rollout.max_new_tokens=12", "trainer.steps=1", "log.progress=false",
             "log.plots=false", "log.tensorboard=false", "trainer.headroom=false", "credit.name=rlsd",
             f"trainer.run_dir={tmp_path / 'run'}"]
    train(load_config(overrides=small), log=lambda *_: None)
    assert main(["credit", str(tmp_path / "run"), "--sample", "3"]) == 0
    page = (tmp_path / "run" / "credit" / "credit.html").read_text()
    assert page.count("<div class=row>") == 3 and "Token credit: rlsd" in page
    assert (tmp_path / "run" / "credit" / "credit.png").exists()
    assert main(["credit", str(tmp_path / "nothing")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "no config.yaml" in err and len(err.strip().splitlines()) == 1
