"""Unit tests of grpolab.envs: action parsing, tools, the tool and web environments, experts."""

import sqlite3
import time

import pytest

from grpolab.envs import (
    CalcTool,
    SqlTool,
    StepResult,
    ToolEnv,
    WebEnv,
    answers_match,
    list_envs,
    make_env,
    parse_call,
    render_page,
    run_script,
    safe_arith,
    web_expert,
)
from grpolab.tasks import TaskItem, get_task
from grpolab.tasks.web import FAMILIES

# ----------------------------------------------------------------------------- parsing, registry


def test_parse_call():
    assert parse_call("click(3)") == ("click", "3")
    assert parse_call(' type(2,"alice") ') == ("type", '2,"alice"')
    assert parse_call("done()") == ("done", "")
    assert parse_call("calc((1+2)*3)") == ("calc", "(1+2)*3")
    for bad in ("click 3", "click(3", "3(4)", "", "hello", "click(3)x"):
        assert parse_call(bad) is None, bad


def test_registry():
    assert {"tool_arith", "tools", "web"} <= set(list_envs())
    with pytest.raises(ValueError, match="unknown environment 'nope'.*web"):
        make_env("nope")
    with pytest.raises(ValueError, match="bad options"):
        make_env("web", colour="red")
    with pytest.raises(ValueError, match="subset of"):
        make_env("tool_arith", tools=["shell"])


# ----------------------------------------------------------------------------- tools


def test_safe_arith_values():
    assert safe_arith("4821*37+995") == 179372
    assert safe_arith("(1+2)*-3") == -9
    assert safe_arith("7//2") == 3 and safe_arith("7%4") == 3 and safe_arith("2**10") == 1024
    assert safe_arith("1/4") == 0.25


@pytest.mark.parametrize("expr, why", [
    ("__import__('os')", "not allowed"), ("x+1", "not allowed"), ("(1).real", "not allowed"),
    ("9**9**9", "exponent too large"), ("1/0", "division by zero"), ("1+", "syntax error"),
    ("10**20*10**20", "number too large"), ("1" * 300, "too long"), ("[1,2]", "not allowed"),
])
def test_safe_arith_refuses(expr, why):
    t0 = time.time()
    with pytest.raises(ValueError, match=why):
        safe_arith(expr)
    assert time.time() - t0 < 1.0


def test_calc_tool_output():
    calc = CalcTool()
    assert calc("482*37+995").text == "18829" and not calc("1+1").error
    assert calc("10/4").text == "2.5" and calc("8/4").text == "2"
    out = calc("open('x')")
    assert out.error and out.text.startswith("error:")
    with pytest.raises(ValueError, match="backend"):
        CalcTool(backend="eval")


@pytest.fixture()
def people_db(tmp_path):
    path = tmp_path / "people.db"
    con = sqlite3.connect(path)
    con.execute("create table people (name text, city text, age int)")
    con.executemany("insert into people values (?, ?, ?)",
                    [("ann", "paris", 31), ("bob", "rome", 40), ("cy", "paris", 25), ("di", "oslo", 52)])
    con.commit()
    con.close()
    return path


def test_sql_tool_reads(people_db):
    sql = SqlTool(people_db)
    assert sql("select count(*) from people where city = 'paris'").text == "2"
    assert sql("select name, age from people order by age limit 2").text == "cy,25;ann,31"
    assert sql("select name from people where age > 100").text == "(no rows)"
    assert SqlTool(people_db, max_rows=2)("select name from people order by name").text == "ann;bob;..."
    bad = sql("selec 1")
    assert bad.error and "syntax" in bad.text


@pytest.mark.parametrize("query", [
    "insert into people values ('eve', 'nice', 20)", "delete from people", "drop table people",
    "update people set age = 0", "create table t (x int)",
])
def test_sql_tool_refuses_writes(people_db, query):
    out = SqlTool(people_db)(query)
    assert out.error
    con = sqlite3.connect(people_db)
    assert con.execute("select count(*), sum(age) from people").fetchone() == (4, 148)
    assert con.execute("select count(*) from sqlite_master").fetchone() == (1,)
    con.close()


def test_sql_tool_refuses_attach(people_db, tmp_path):
    other = tmp_path / "other.db"
    out = SqlTool(people_db)(f"attach database '{other}' as o")
    assert out.error and not other.exists()


def test_sql_tool_time_limit(people_db):
    runaway = "with recursive c(x) as (select 1 union all select x + 1 from c) select count(*) from c"
    t0 = time.time()
    out = SqlTool(people_db, timeout_s=0.3)(runaway)
    assert out.error and out.text == "error: timeout"
    assert time.time() - t0 < 3.0


def test_sql_tool_missing_db(tmp_path):
    out = SqlTool(tmp_path / "missing.db")("select 1")
    assert out.error and not (tmp_path / "missing.db").exists()  # mode=ro never creates the file


def test_python_tool_through_sandbox():
    from grpolab import rewards

    if not hasattr(rewards, "run_sandboxed"):
        pytest.skip("grpolab.rewards.run_sandboxed not available yet")
    from grpolab.envs import PythonTool

    tool = PythonTool(timeout_s=5.0)
    assert tool("print(6*7)").text == "42"
    err = tool("raise ValueError('boom')")
    assert err.error and "ValueError" in err.text
    slow = PythonTool(timeout_s=0.5)("while True: pass")
    assert slow.error and "timeout" in slow.text
    assert CalcTool(backend="sandbox", timeout_s=5.0)("482*37+995").text == "18829"


# ----------------------------------------------------------------------------- tool env


def _arith_item(expr="482*37+995", answer="18829"):
    return TaskItem(prompt=f"q: {expr}\n", reference=answer, meta={"env": "tool_arith"})


def test_tool_env_episode():
    env = make_env("tool_arith")
    assert env.reset(_arith_item()) == "q: 482*37+995\n"
    r = env.step("calc(482*37+995)")
    assert r == StepResult("\n=18829\n", 0.0, False, {"tool": "calc", "tool_error": False})
    r = env.step("answer(18829)")
    assert r.done and r.reward == 1.0


def test_tool_env_wrong_answer_invalid_and_tool_errors():
    env = make_env("tool_arith")
    env.reset(_arith_item())
    r = env.step("calc(482*)")
    assert r.info["tool_error"] and r.observation.startswith("\n=error") and not r.done
    r = env.step("what is it")
    assert r.info["invalid"] and not r.done
    r = env.step("python(print(1))")  # not enabled in tool_arith
    assert r.info["invalid"] and "unknown action python" in r.observation
    r = env.step("answer(18828)")
    assert r.done and r.reward == 0.0


def test_answers_match():
    assert answers_match(" 42 ", "42") and answers_match("42.0", "42") and answers_match("-3", "-3")
    assert not answers_match("41", "42") and not answers_match("forty", "42")


def test_tool_env_sql_item(people_db):
    env = make_env("tools")
    item = TaskItem(prompt="q: how many people live in paris?\n", reference="2",
                    meta={"db_path": str(people_db)})
    env.reset(item)
    assert env.step("sql(select count(*) from people where city='paris')").observation == "\n=2\n"
    assert env.step("sql(delete from people)").info["tool_error"]
    assert env.step("answer(2)").reward == 1.0
    env.reset(TaskItem(prompt="q\n", reference="1"))  # no database: no sql tool
    assert env.step("sql(select 1)").info["invalid"]


def test_step_before_reset():
    with pytest.raises(RuntimeError, match="reset"):
        ToolEnv().step("answer(1)")
    with pytest.raises(RuntimeError, match="reset"):
        WebEnv().step("done()")


# ----------------------------------------------------------------------------- web env


ELEMENTS = [
    {"id": 1, "kind": "input", "label": "username"},
    {"id": 2, "kind": "button", "label": "cancel"},
    {"id": 3, "kind": "input", "label": "password"},
    {"id": 4, "kind": "button", "label": "login"},
    {"id": 5, "kind": "checkbox", "label": "apple"},
    {"id": 6, "kind": "checkbox", "label": "desk"},
]


def _web_item(goal, instruction="do it"):
    return TaskItem(prompt=render_page(instruction, ELEMENTS), reference=instruction, reward="exact",
                    meta={"env": "web", "family": "x", "elements": ELEMENTS, "goal": goal})


def test_render_page():
    assert render_page("click the ok button", ELEMENTS[:2]) == (
        "task: click the ok button\n[1] input username\n[2] button cancel\n"
    )


def _play(goal, actions):
    env = make_env("web")
    env.reset(_web_item(goal))
    results = [env.step(a) for a in actions]
    return results


LOGIN = {"values": {"1": "alice"}, "click": [4]}


@pytest.mark.parametrize("actions, reward", [
    (['type(1,"alice")', "click(4)", "done()"], 1.0),
    (['type(1,"alice")', "click(4)", "click(4)", "done()"], 1.0),  # pressing twice is fine
    (["click(4)", 'type(1,"alice")', "done()"], 0.0),  # pressed before typing
    (['type(1,"alic")', "click(4)", "done()"], 0.0),  # wrong text
    (['type(1,"alice")', "done()"], 0.0),  # never pressed
    (['type(1,"alice")', "click(2)", "click(4)", "done()"], 0.0),  # also pressed cancel
    (['type(1,"alice")', 'type(3,"x")', "click(4)", "done()"], 0.0),  # typed into another field
    (['type(1,"bob")', 'type(1,"alice")', "click(4)", "done()"], 1.0),  # retyping replaces
])
def test_web_login_success(actions, reward):
    res = _play(LOGIN, actions)
    assert res[-1].done and res[-1].reward == reward
    assert all(not r.done for r in res[:-1])


def test_web_checkboxes_toggle():
    goal = {"checked": [5]}
    res = _play(goal, ["click(5)", "click(6)", "click(6)", "done()"])
    assert [r.observation for r in res[:3]] == ["\n=[5] checked\n", "\n=[6] checked\n", "\n=[6] unchecked\n"]
    assert res[-1].reward == 1.0
    assert _play(goal, ["click(5)", "click(6)", "done()"])[-1].reward == 0.0
    assert _play(goal, ["click(5)", "click(5)", "done()"])[-1].reward == 0.0


def test_web_observations_and_invalid_actions():
    res = _play(LOGIN, ['type(1,"alice")', "click(2)", "click(9)", 'type(2,"x")', "click(1)", "press(4)",
                        "click(a)", "done(1)", 'type(1,alice)'])
    assert res[0].observation == "\n=[1] username: alice\n" and not res[0].info
    assert res[1].observation == "\n=[2] clicked\n" and not res[1].info
    for r in res[2:]:
        assert r.info == {"invalid": True} and r.observation.startswith("\n=error: ") and not r.done


# ----------------------------------------------------------------------------- tasks and experts


@pytest.mark.parametrize("name", ["tool_arith", "web"])
def test_experts_solve_every_item(name):
    task = get_task(name, seed=3)
    for split in ("train", "eval"):
        items = task.items(split, 150)
        for item in items:
            actions = [text for role, text in item.meta["transcript"] if role == "act"]
            transcript, ret, done = run_script(make_env(name), item, actions)
            assert done and ret == 1.0, item.prompt
            assert transcript == item.meta["transcript"]
            assert item.demonstration == "".join(t for _, t in transcript)


def test_web_families_and_expert():
    items = get_task("web", seed=0).items("train", 200)
    assert {it.meta["family"] for it in items} == set(FAMILIES)
    assert {it.meta["difficulty"] for it in items} == {1, 2, 3, 4}
    for it in items:
        assert web_expert(it)[-1] == "done()"
        assert len(it.prompt) <= 200  # short pages: the tiny model's context is small
        # an agent that only says done() fails every family
        env = make_env("web")
        env.reset(it)
        assert env.step("done()").reward == 0.0
    only = get_task("web", families=["checkboxes"]).items("train", 20)
    assert {it.meta["family"] for it in only} == {"checkboxes"}
    with pytest.raises(ValueError, match="families"):
        get_task("web", families=["drag"])


@pytest.mark.parametrize("name", ["tool_arith", "web"])
def test_tasks_deterministic_and_disjoint(name):
    a = get_task(name, seed=1).items("train", 100)
    b = get_task(name, seed=1).items("train", 100)
    assert [i.prompt for i in a] == [i.prompt for i in b]
    assert [i.meta["transcript"] for i in a] == [i.meta["transcript"] for i in b]
    ev = get_task(name, seed=2).items("eval", 50)
    assert not {i.prompt for i in a} & {i.prompt for i in ev}


def test_tool_arith_needs_the_tool():
    items = get_task("tool_arith").items("train", 100)
    for it in items:
        assert it.prompt.startswith("q: ") and it.meta["transcript"][0][1].startswith("calc(")
    # multi-digit operands; a good share of answers (the products) have 4+ digits
    assert sum(len(it.reference.lstrip("-")) >= 2 for it in items) >= 90
    assert sum(len(it.reference.lstrip("-")) >= 4 for it in items) >= 30
