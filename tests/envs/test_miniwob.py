"""grpolab.envs.miniwob without a browser: page rendering, action parsing, experts on hand-made
pages, the environment's invalid-action and reward handling, batched steps, config checks.

The browser tests are in test_miniwob_browser.py (skipped with a reason when there is none).
"""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from grpolab.config import ConfigError, config_from_dict
from grpolab.envs import StepResult, make_env, step_envs
from grpolab.envs.miniwob import (
    SUPPORTED_TASKS,
    Action,
    ActionError,
    BrowserUnavailable,
    Element,
    MiniWoBEnv,
    decode_case,
    encode_case,
    expert_action,
    find_browser,
    flatten_dom,
    observation_text,
    parse_action,
    render_observation,
)
from grpolab.tasks import TaskItem


def node(tag, ref, text=None, children=(), **kw):
    d = {"tag": tag, "ref": ref, "children": list(children), "classes": kw.pop("classes", "")}
    if text is not None:
        d["text"] = text
    d.update(kw)
    return d


# A login-user page as core.getDOMInfo() returns it (structure copied from a real page by hand).
LOGIN = node("BODY", 1, children=[node("DIV", 2, children=[node("DIV", 3, children=[
    node("LABEL", 4, "Username"), node("INPUT_text", 5, value=""),
    node("LABEL", 6, "Password"), node("INPUT_password", 7, value=""),
    node("BUTTON", 8, "Login"),
])])])


def test_render_login_page_exact():
    els = flatten_dom(LOGIN)
    assert [(e.id, e.ref, e.kind) for e in els] == [(1, 4, ""), (2, 5, "text"), (3, 6, ""), (4, 7, "password"),
                                                    (5, 8, "button")]
    text = render_observation('Enter the username "karrie" and the password "AU" into the text fields and press login.',
                              els)
    assert text == ('Enter the username "karrie" and the password "AU" into the text fields and press login.\n'
                    '[1] "Username"\n[2] text\n[3] "Password"\n[4] password\n[5] button "Login"\n')
    assert [e.id for e in flatten_dom(LOGIN, elements="interactive")] == [1, 2, 3]


def test_render_checkbox_labels_dialog_close_links_and_values():
    page = node("BODY", 1, children=[
        node("LABEL", 2, children=[node("INPUT_checkbox", 3, value=True), node("t", -1, "HF2")]),
        node("LABEL", 4, children=[node("INPUT_radio", 5, value=False), node("t", -2, "AU")]),
        node("BUTTON", 6, "Close", classes="ui-button ui-dialog-titlebar-close"),
        node("SPAN", 7, "eget", classes="alink"),
        node("P", 8, children=[node("t", -3, "some words"), node("SPAN", 9, "more")]),
        node("INPUT_text", 10, value="bob"),
        node("DIV", 11),  # no text, no children: not shown
    ])
    lines = render_observation("u", flatten_dom(page)).splitlines()[1:]
    assert lines == ['[1] checkbox "HF2" checked', '[2] radio "AU"', '[3] button "x"', '[4] link "eget"',
                     '[5] "some words"', '[6] "more"', '[7] text "bob"']
    els = flatten_dom(page)
    assert not els[4].clickable and els[5].clickable  # a text fragment (negative ref) cannot be clicked
    with pytest.raises(ValueError, match="elements must be one of"):
        flatten_dom(page, elements="all")


def test_case_escape():
    assert encode_case('Enter "AU" now', "escape") == '^enter "^a^u" now'
    assert decode_case("^a^u", "escape") == "AU"
    assert encode_case("AbC", "lower") == "abc" and encode_case("AbC", "keep") == "AbC"
    with pytest.raises(ValueError, match="case must be one of"):
        encode_case("x", "upper")


@given(st.text(alphabet="abcXYZ019 .\"", max_size=30))
def test_case_escape_round_trip(s):
    enc = encode_case(s, "escape")
    assert enc == enc.lower()  # the tiny tokenizer has no capitals
    assert decode_case(enc, "escape") == s


def test_parse_action_and_errors():
    els = flatten_dom(LOGIN)
    assert parse_action("click(5)", els) == Action("click", 5)
    assert parse_action(' type( 2 , "karrie" ) ', els) == Action("type", 2, "karrie")
    assert parse_action('type(4,"^a^u")', els, case="escape") == Action("type", 4, "AU")
    assert Action("type", 4, "AU").to_text("escape") == 'type(4,"^a^u")'
    cases = [("click 5", "bad action"), ("click(9)", "no element 9"), ("click(0)", "no element 0"),
             ('type(5,"x")', r"\[5\] takes no text"), ('type(1,"x")', r"\[1\] takes no text"),
             (f'type(2,"{"a" * 65}")', "longer than 64"), ('type(2,"a"b")', "bad action"), ("", "bad action")]
    for text, why in cases:
        with pytest.raises(ActionError, match=why):
            parse_action(text, els)
    page = flatten_dom(node("BODY", 1, children=[node("P", 2, children=[node("t", -1, "w"), node("SPAN", 3, "x")])]))
    with pytest.raises(ActionError, match="cannot be clicked"):
        parse_action("click(1)", page)


def test_observation_text_changes_page_and_structure():
    before = flatten_dom(LOGIN)
    typed = node("BODY", 1, children=[node("DIV", 2, children=[node("DIV", 3, children=[
        node("LABEL", 4, "Username"), node("INPUT_text", 5, value="karrie"),
        node("LABEL", 6, "Password"), node("INPUT_password", 7, value=""), node("BUTTON", 8, "Login")])])])
    after = flatten_dom(typed)
    assert observation_text(before, after, mode="changes", case="keep") == '[2] text "karrie"'
    assert observation_text(before, before, mode="changes", case="keep") == "no change"
    assert observation_text(before, after, mode="page", case="keep").splitlines()[1] == '[2] text "karrie"'
    other = flatten_dom(node("BODY", 1, children=[node("BUTTON", 9, "Next")]))
    assert observation_text(before, other, mode="changes", case="keep") == '[1] button "Next"'


def test_experts_on_hand_made_pages():
    els = flatten_dom(LOGIN)
    fields = {"username": "karrie", "password": "AU"}
    assert expert_action("login-user", "", fields, els, []) == Action("type", 2, "karrie")
    half = [Element(e.id, e.ref, e.kind, "karrie" if e.id == 2 else e.text) for e in els]
    assert expert_action("login-user", "", fields, half, []) == Action("type", 4, "AU")
    full = [Element(e.id, e.ref, e.kind, {2: "karrie", 4: "AU"}.get(e.id, e.text)) for e in els]
    assert expert_action("login-user", "", fields, full, []) == Action("click", 5)
    wrong = [Element(e.id, e.ref, e.kind, "bob" if e.id == 2 else e.text) for e in els]
    assert expert_action("login-user", "", fields, wrong, []) is None  # cannot clear a wrong input
    links = [Element(1, 2, "link", "eget"), Element(2, 3, "link", "Eget")]
    assert expert_action("click-link", "", {"target": "Eget"}, links, []) == Action("click", 2)  # exact case first
    boxes = [Element(1, 2, "checkbox", "a", checked=True), Element(2, 3, "checkbox", "b"),
             Element(3, 4, "button", "Submit")]
    assert expert_action("click-checkboxes", "", {"target 0": "b"}, boxes, []) == Action("click", 1)  # untick a
    widgets = [Element(1, 2, "radio", "x"), Element(2, -1, "checkbox", "y"), Element(3, 4, "text", "checkbox"),
               Element(4, 5, "checkbox", "z")]
    # click-widget matches the element's kind, not its text, and skips what cannot be clicked
    assert expert_action("click-widget", "", {"target": "checkbox"}, widgets, []) == Action("click", 4)
    assert expert_action("click-widget", "", {"target": "textarea"}, widgets, []) is None
    two = [Element(1, 2, "button", "ONE"), Element(2, 3, "button", "TWO")]
    assert expert_action("click-test-transfer", "", {"target": "TWO"}, two, []) == Action("click", 2)
    with pytest.raises(ValueError, match="no scripted expert.*supported"):
        expert_action("book-flight", "", {}, els, [])
    assert {"click-test-2", "click-button", "click-link", "focus-text", "click-dialog", "enter-text", "login-user",
            "click-checkboxes", "click-option", "enter-password", "click-tab"} <= set(SUPPORTED_TASKS)


# ----------------------------------------------------------------------------- the environment, no browser


class NoBrowser:
    """A pool that fails the test if the environment sends it anything."""

    def run(self, jobs):
        raise AssertionError(f"the browser was asked to run {jobs}")


class ScriptedPool:
    """A pool that answers each job with the next canned result and records the jobs."""

    def __init__(self, results):
        self.results, self.jobs = list(results), []

    def run(self, jobs):
        self.jobs.append(jobs)
        return [self.results.pop(0) for _ in jobs]


def login_item():
    els = flatten_dom(LOGIN)
    return TaskItem(prompt=render_observation("u", els), reference="login-user", reward="exact",
                    meta={"env": "miniwob", "task": "login-user", "seed": 7, "case": "keep", "element_mode": "visible",
                          "observation": "changes", "elements": [e.__dict__ for e in els]})


def test_env_invalid_actions_continue_end_and_penalty():
    env = MiniWoBEnv(pool=NoBrowser(), invalid_penalty=0.25)
    assert env.reset(login_item()).startswith("u\n[1]")
    r = env.step("click(42)")
    assert (r.done, r.reward, r.info["invalid"]) == (False, -0.25, True) and r.observation == "\n=error: no element 42\n"
    r = env.step('type(5,"x")')
    assert not r.done and "takes no text" in r.observation
    env = MiniWoBEnv(pool=NoBrowser(), on_invalid="end")
    env.reset(login_item())
    r = env.step("nonsense")
    assert r.done and r.reward == 0.0 and r.info == {"invalid": True, "task": "login-user", "success": False,
                                                      "error": 'bad action (write click(ID) or type(ID,"TEXT"))'}
    with pytest.raises(RuntimeError, match="episode is over"):
        env.step("click(1)")


def test_env_replays_history_and_maps_reward():
    page = [e.__dict__ for e in flatten_dom(LOGIN)]
    typed = [dict(e, text="karrie") if e["ref"] == 5 else e for e in page]
    pool = ScriptedPool([
        {"steps": [{"action": ["type", 2, "karrie"], "done": False, "elements": typed}], "error": None},
        {"steps": [{"action": ["type", 2, "karrie"], "done": False, "elements": typed},
                   {"action": ["click", 5, ""], "done": True, "raw_reward": -1.0, "reason": "wrong"}], "error": None},
    ])
    env = MiniWoBEnv(pool=pool)
    env.reset(login_item())
    r = env.step('type(2,"karrie")')
    assert r == StepResult('\n=[2] text "karrie"\n', 0.0, False, {"task": "login-user"})
    r = env.step("click(5)")
    assert r.done and r.reward == 0.0 and r.info["success"] is False and r.info["raw_reward"] == -1.0
    # the second job replays the first action before the new one, from the same seed
    assert pool.jobs[1] == [{"task": "login-user", "seed": 7, "actions": [["type", 2, "karrie"], ["click", 5, ""]],
                             "elements": "visible"}]
    raw = MiniWoBEnv(pool=ScriptedPool([{"steps": [{"action": ["click", 5, ""], "done": True, "raw_reward": 0.5,
                                                    "reason": None}], "error": None}]), reward="raw")
    raw.reset(login_item())
    r = raw.step("click(5)")
    assert r.reward == 0.5 and r.info["success"] is False  # partial credit is not success
    win = MiniWoBEnv(pool=ScriptedPool([{"steps": [{"action": ["click", 5, ""], "done": True, "raw_reward": 1.0,
                                                    "reason": None}], "error": None}]))
    win.reset(login_item())
    assert win.step("click(5)").reward == 1.0


def test_env_options_and_items_checked():
    for kw, why in (({"on_invalid": "skip"}, "on_invalid must be one of"), ({"reward": "timed"}, "reward must be one of"),
                    ({"invalid_penalty": -1}, "invalid_penalty must be a number >= 0")):
        with pytest.raises(ValueError, match=why):
            make_env("miniwob", **kw)
    with pytest.raises(ValueError, match="bad options"):
        make_env("miniwob", colour="red")
    env = MiniWoBEnv(pool=NoBrowser())
    with pytest.raises(ValueError, match="task.name: miniwob"):
        env.reset(TaskItem(prompt="p", reference="r", reward="exact", meta={"env": "web"}))
    with pytest.raises(RuntimeError, match="reset"):
        MiniWoBEnv(pool=NoBrowser()).step("click(1)")


class Batched:
    calls: list = []

    def __init__(self, tag):
        self.tag = tag

    @staticmethod
    def step_batch(envs, actions):
        Batched.calls.append([e.tag for e in envs])
        return [StepResult(f"{e.tag}:{a}") for e, a in zip(envs, actions)]


class Plain:
    def __init__(self, tag):
        self.tag = tag

    def step(self, action):
        return StepResult(f"plain{self.tag}:{action}")


def test_step_envs_batches_and_keeps_order():
    Batched.calls = []
    envs = [Batched("a"), Plain(1), Batched("b"), Plain(2), Batched("c")]
    out = step_envs(envs, ["1", "2", "3", "4", "5"])
    assert [r.observation for r in out] == ["a:1", "plain1:2", "b:3", "plain2:4", "c:5"]
    assert Batched.calls == [["a", "b", "c"]]  # one call for all of them


def test_config_needs_miniwob_task_and_env_together():
    with pytest.raises(ConfigError, match="both set to miniwob"):
        config_from_dict({"task": {"name": "arith"}, "env": {"name": "miniwob"}})
    with pytest.raises(ConfigError, match="both set to miniwob"):
        config_from_dict({"task": {"name": "miniwob"}})
    cfg = config_from_dict({"task": {"name": "miniwob"}, "env": {"name": "miniwob"}})
    assert cfg.env.name == "miniwob"


def test_task_options_checked():
    from grpolab.tasks import get_task

    with pytest.raises(ValueError, match="unsupported: \\['book-flight'\\]"):
        get_task("miniwob", tasks=["book-flight"])
    with pytest.raises(ValueError, match="case must be one of"):
        get_task("miniwob", case="title")
    t = get_task("miniwob", tasks=["click-test-2", "login-user"], seed=1)
    train = [t.seed_of("train", i) for i in range(6)]
    evals = [t.seed_of("eval", i) for i in range(6)]
    assert train[:2] == [("click-test-2", 10_000_000), ("login-user", 10_000_000)]
    assert not {s for _, s in train} & {s for _, s in evals}


def test_find_browser_reports_what_is_missing(monkeypatch, tmp_path):
    monkeypatch.setenv("MINIWOB_CHROME_BINARY", str(tmp_path / "chrome"))
    monkeypatch.delenv("MINIWOB_CHROMEDRIVER", raising=False)
    with pytest.raises(BrowserUnavailable, match="together"):
        find_browser()
    monkeypatch.setenv("MINIWOB_CHROMEDRIVER", str(tmp_path / "driver"))
    with pytest.raises(BrowserUnavailable, match="chromium and chromedriver not found.*apt-get install -y chromium"):
        find_browser()


def test_pool_options_checked_and_netns_require_fails_without_namespace(monkeypatch, tmp_path):
    from grpolab.envs.miniwob import MiniWoBPool
    from grpolab.envs.miniwob import pool as pool_mod

    for kw, why in (({"browsers": 0}, "browsers must be an int >= 1"), ({"netns": "maybe"}, "netns must be one of"),
                    ({"recycle_every": -1}, "recycle_every must be an int >= 0")):
        with pytest.raises(ValueError, match=why):
            MiniWoBPool(**kw)
    monkeypatch.setattr(pool_mod, "find_browser", lambda: ("/bin/true", "/bin/true"))
    monkeypatch.setattr(pool_mod, "_miniwob_html", lambda: tmp_path)
    monkeypatch.setattr(pool_mod, "namespace_prefix", lambda: None)
    with pytest.raises(BrowserUnavailable, match="netns=require but this process may not create a network namespace"):
        pool_mod.BrowserWorker(netns="require")
