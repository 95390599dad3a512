"""The `grpolab credit` page: HTML colours and segment outlines from hand-made data; the CLI end to end."""

import pytest

from grpolab.credit_page import _color, render_html, render_png

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


def test_png_has_a_colour_bar_and_the_numbers(tmp_path, monkeypatch):
    import matplotlib.figure

    seen = {}
    real_savefig = matplotlib.figure.Figure.savefig

    def spy(fig, *args, **kwargs):
        seen["texts"] = [t.get_text() for ax in fig.axes for t in ax.texts]
        seen["axes"] = [ax.get_label() for ax in fig.axes]
        seen["title"] = fig.axes[0].get_title()
        return real_savefig(fig, *args, **kwargs)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", spy)
    render_png(DATA, tmp_path / "c.png")
    assert "<colorbar>" in seen["axes"]                            # a colour bar next to the picture
    assert seen["texts"].count("1.20") == 3 and "0.80" in seen["texts"]   # each token's multiplier
    assert "GEAR segments outlined" in seen["title"] and "lam = 1" in seen["title"]
    rlsd = {**DATA, "method": "rlsd", "rows": [{**DATA["rows"][0], "segment": None}]}
    render_png(rlsd, tmp_path / "r.png")
    assert "GEAR" not in seen["title"]


def test_page_explains_only_what_it_shows_and_is_readable_by_others(tmp_path):
    assert "GEAR segment" in render_html(DATA)
    rlsd = {**DATA, "method": "rlsd", "lam": 0.46, "lam_note": "the value training reached at its last step (5)"}
    page = render_html(rlsd)
    assert "GEAR" not in page and "lam = 0.46 (the value training reached" in page
    from grpolab.utils.io import atomic_write_text

    atomic_write_text(tmp_path / "page.html", page)
    import os
    import stat

    mask = os.umask(0o022)
    os.umask(mask)
    assert stat.S_IMODE(os.stat(tmp_path / "page.html").st_mode) == 0o666 & ~mask   # not mkstemp's 0600


def test_summary_names_the_credit_method(tmp_path):
    from types import SimpleNamespace

    from grpolab.config import Config
    from grpolab.train.report import write_report

    cfg = Config()
    cfg.credit.name = "rlsd"
    result = SimpleNamespace(steps=3, seconds=1.0, start_accuracy=0.1, final_accuracy=0.2, best_accuracy=0.2)
    text = write_report(tmp_path, cfg, result, plots=False).read_text()
    assert "- credit: `rlsd` (lam 0.5 -> 0.0 over 50 steps" in text
    cfg.credit.name = "grpo"
    assert "credit:" not in write_report(tmp_path, cfg, result, plots=False).read_text()


@pytest.mark.slow
def test_cli_writes_the_page(tmp_path, capsys):
    from grpolab.cli import main
    from grpolab.config import load_config
    from grpolab.train import train

    small = ["model.hidden_size=32", "model.num_layers=2", "model.num_heads=2", "model.intermediate_size=64",
             "task.n_train=64", "task.n_eval=8", "sft.max_steps=4", "sft.n_eval=8", "rollout.prompts_per_step=2",
             "rollout.group_size=4", "rollout.max_new_tokens=12", "trainer.steps=1", "log.progress=false",
             "log.plots=false", "log.tensorboard=false", "trainer.preflight=false", "credit.name=rlsd",
             f"trainer.run_dir={tmp_path / 'run'}"]
    train(load_config(overrides=small), log=lambda *_: None)
    assert main(["credit", str(tmp_path / "run"), "--sample", "3"]) == 0
    page = (tmp_path / "run" / "credit" / "credit.html").read_text()
    assert page.count("<div class=row>") == 3 and "Token credit: rlsd" in page
    # training ran 1 step at lam 0.5 (linear to 0 over 50 steps): the page shows that lam, not 1
    assert "lam = 0.5 (the value training reached at its last step (1;" in page
    assert (tmp_path / "run" / "credit" / "credit.png").exists()
    capsys.readouterr()  # what the first call printed
    assert main(["credit", str(tmp_path / "nothing")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "no config.yaml" in err and len(err.strip().splitlines()) == 1


def test_opsd_page_is_coloured_by_the_per_token_advantage(tmp_path, monkeypatch):
    # OPSD's multiplier is 1 everywhere (no sequence advantage): the page colours what it trains
    # on, A_t = teacher - student. Gaps [-2, -1, 0, 0.5, 2]: |A_t| sorted [0, .5, 1, 2, 2], the 95th
    # percentile (element round(0.95 * 4) = 4) is 2 -> -2 saturated red, -1 half red, 0 white,
    # 0.5 a quarter blue, 2 saturated blue
    from grpolab.credit_page import opsd_scale

    gaps = [-2.0, -1.0, 0.0, 0.5, 2.0]
    opsd = {**DATA, "method": "opsd", "rows": [{**DATA["rows"][0], "tokens": list("abcde"), "multiplier": [1.0] * 5,
                                                "delta": gaps, "token_advantage": gaps, "kl": None, "segment": None}]}
    assert opsd_scale(opsd["rows"]) == 2.0
    page = render_html(opsd)
    assert page.count("background:#ffffff") == 1                 # only A_t = 0 is white
    assert "background:#ff3f3f" in page and "background:#3f3fff" in page  # saturated red / blue
    assert "background:#ff9f9f" in page                          # -1: half-way to red (255, 159, 159)
    assert "background:#cfcfff" in page                          # +0.5: a quarter to blue (207, 207, 255)
    assert "per-token advantage A_t = teacher - student" in page and "A_t -2.0000" in page
    assert "multiplier A_t / A" not in page
    assert opsd_scale([{"delta": [0.01, -0.02], "token_advantage": [0.01, -0.02]}]) == 0.1  # floor
    import matplotlib.figure

    seen = {}
    real_savefig = matplotlib.figure.Figure.savefig

    def spy(fig, *args, **kwargs):
        seen["texts"] = [t.get_text() for ax in fig.axes for t in ax.texts]
        seen["title"] = fig.axes[0].get_title()
        return real_savefig(fig, *args, **kwargs)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", spy)
    render_png(opsd, tmp_path / "o.png")
    assert "+2.00" in seen["texts"] and "-1.00" in seen["texts"] and "opsd: per-token advantage" in seen["title"]
