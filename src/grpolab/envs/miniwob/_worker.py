"""One browser: a process that drives headless Chromium on MiniWoB++ pages (run by the pool).

Started by :class:`grpolab.envs.miniwob.browser.BrowserWorker` as
``[unshare --net --pid --fork --kill-child --] python -m grpolab.envs.miniwob._worker``; speaks
one JSON object per line: requests on stdin, replies on the file descriptor named by
``GRPOLAB_MINIWOB_REPLY_FD`` (stdout is pointed at stderr, so nothing Chromium or Selenium prints
can corrupt the replies). Inside a new network namespace it first brings the loopback interface
up (chromedriver and Selenium talk over 127.0.0.1); the namespace has no other interface, so no
packet can leave the machine. As PID 1 of its own PID namespace, its exit takes chromedriver and
every Chromium process with it (the kernel kills the namespace).

Requests (``cmd``): ``hello`` (reports the interfaces and whether the process is isolated),
``play`` (one episode from a seed: replay ``actions``, optionally continue with the scripted
expert; see :func:`_play`), ``net_probe`` (tries a DNS lookup and a connection off the machine,
for the no-traffic test), ``stats`` (episodes so far), ``quit``. End of stdin also quits.

Episodes: a tab is not reloaded between episodes, so an episode's result must not depend on
the ones before it in that tab (which depend on how the pool hands out jobs). MiniWoB++'s own
reset regenerates the task and clears the selection, scroll and timers, but keeps the keyboard
focus: an element that survives ``genProblem`` (click-option's and click-test-transfer's buttons,
focus-text-2's inputs) stayed focused after an earlier episode clicked it (``core.elementClick``
focuses what it clicks), so the same (task, seed, actions) job came back with different
``focused`` flags after different histories, and keystrokes of a ``type`` whose click did not
move the focus would go to that element. :meth:`Browser.start` therefore blurs the focused
element before the reset: a job's result is a function of (task, seed, actions) alone
(``tests/envs/test_miniwob_browser.py`` plays the same jobs after different histories).
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import struct
import sys
import time
import traceback
from pathlib import Path

from grpolab.envs.miniwob.experts import expert_action
from grpolab.envs.miniwob.render import Action, flatten_dom

SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1

#: Chromium flags that stop its background services from reaching the network (no DNS query
#: at all was seen with them; see docs/miniwob.md), plus the headless basics.
OFFLINE_FLAGS = (
    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
    "--disable-component-update", "--disable-background-networking", "--disable-domain-reliability",
    "--no-pings", "--disable-breakpad", "--metrics-recording-only", "--no-default-browser-check",
    "--no-first-run", "--disable-sync", "--disable-extensions",
    "--disable-features=OptimizationHints,MediaRouter,Translate,AutofillServerCommunication,"
    "CertificateTransparencyComponentUpdater",
    "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE localhost",
    "--window-size=800,600",
)


def interfaces() -> list[str]:
    return sorted(name for _, name in socket.if_nameindex())


def loopback_up() -> None:
    """Bring ``lo`` up (a new network namespace starts with it down)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        ifr = struct.pack("16sH", b"lo", 0)
        flags = struct.unpack("16sH", fcntl.ioctl(s, SIOCGIFFLAGS, ifr)[:18])[1]
        if not flags & IFF_UP:
            fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sH", b"lo", flags | IFF_UP))


class Browser:
    """A Selenium session on MiniWoB++ pages; loads a task's page on first use."""

    def __init__(self, chrome: str, driver: str, html_dir: str, profile_dir: str) -> None:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service

        options = webdriver.ChromeOptions()
        options.binary_location = chrome
        for flag in OFFLINE_FLAGS:
            options.add_argument(flag)
        options.add_argument(f"--user-data-dir={profile_dir}")
        self.driver = webdriver.Chrome(service=Service(executable_path=driver), options=options)
        self.driver.implicitly_wait(0)
        self.html_dir = Path(html_dir)
        self.task = None
        self.episodes = 0
        self.fields_of = None
        self.tabs: dict[str, str] = {}
        self.extractors: dict = {}

    def close(self) -> None:
        try:
            self.driver.quit()
        except Exception:  # noqa: BLE001 - closing is best effort; the namespace dies anyway
            pass

    def load(self, task: str) -> None:
        """Make ``task``'s page current: one tab per task, loaded once, switched to after."""
        if task == self.task:
            return
        if task in self.tabs:
            self.driver.switch_to.window(self.tabs[task])
            # a background tab gets no focus events (focus-text would never succeed): bring it up
            self.driver.execute_cdp_cmd("Page.bringToFront", {})
            self.task, self.fields_of = task, self.extractors[task]
            return
        path = self.html_dir / f"{task}.html"
        if not path.exists():
            raise ValueError(f"no MiniWoB++ page for task {task!r} ({path} is missing)")
        if self.tabs:
            self.driver.switch_to.new_window("tab")
        self.tabs[task] = self.driver.current_window_handle
        self.driver.get(path.as_uri())
        self.driver.execute_cdp_cmd("Page.bringToFront", {})
        # and let it behave as focused whatever the window's state (focus events otherwise depend on timing)
        self.driver.execute_cdp_cmd("Emulation.setFocusEmulationEnabled", {"enabled": True})
        for _ in range(200):
            if self.driver.execute_script("return typeof core !== 'undefined' && core.cover_div != null;"):
                break
            time.sleep(0.01)
        else:
            raise RuntimeError(f"the MiniWoB++ page for {task!r} did not load")
        from miniwob.fields import get_field_extractor

        self.fields_of = self.extractors[task] = get_field_extractor(task)
        self.task = task

    #: Starts an episode from nothing but its seed (see the module docstring, "Episodes").
    _START = ("if (document.activeElement && document.activeElement !== document.body)"
              " document.activeElement.blur();"
              " core.endEpisode(0); Math.seedrandom(arguments[0]); core.setDataMode('train');"
              " core.startEpisodeReal();")

    def start(self, seed: int) -> None:
        self.driver.execute_script(self._START, int(seed))
        for _ in range(100):
            if self.driver.execute_script("return WOB_TASK_READY;"):
                break
            time.sleep(0.01)
        else:
            raise RuntimeError(f"task {self.task!r} seed {seed} did not become ready")
        self.episodes += 1

    _OBSERVE = ("return [WOB_DONE_GLOBAL, WOB_RAW_REWARD_GLOBAL, WOB_REWARD_REASON, "
                "WOB_DONE_GLOBAL ? null : core.getUtterance(), WOB_DONE_GLOBAL ? null : core.getDOMInfo()];")

    def observe(self) -> dict:
        done, raw, reason, utterance, dom = self.driver.execute_script(self._OBSERVE)
        return {"done": bool(done), "raw_reward": float(raw or 0.0), "reason": None if reason is None else str(reason),
                "utterance": utterance, "dom": dom}

    def apply(self, action: Action, ref: int) -> None:
        result = self.driver.execute_script("return core.elementClick(arguments[0]);", int(ref))
        if result is not True:
            raise RuntimeError(f"clicking ref {ref} failed: {result}")
        if action.kind == "type" and action.text:
            from miniwob.selenium_actions import execute_type_text

            execute_type_text(action.text, self.driver)


def _play(browser: Browser, req: dict) -> dict:
    """One episode: reset to ``seed``, replay ``actions``, then (``expert``) let the expert act.

    Returns the episode's steps (each with the action and, when not done, the page after it),
    the page at the start, and the final state. A replayed action that names an element the
    page does not have stops the episode with ``error`` (the page differed from the one the
    action was written for).
    """
    mode = req.get("elements", "visible")
    browser.load(req["task"])
    browser.start(req["seed"])
    first = browser.observe()
    utterance = first["utterance"]
    fields = dict(browser.fields_of(utterance)) if not first["done"] else {}
    els = flatten_dom(first["dom"], elements=mode) if not first["done"] else []
    out = {"utterance": utterance, "fields": fields, "elements": [e.__dict__ for e in els], "steps": [],
           "done": first["done"], "raw_reward": first["raw_reward"], "reason": first["reason"], "error": None}
    state = first
    actions = [Action(*a) for a in req.get("actions", [])]
    history: list[Action] = []
    max_steps = int(req.get("max_steps", 0))
    while not state["done"]:
        if actions:
            act = actions.pop(0)
        elif req.get("expert") and len(history) < max_steps:
            act = expert_action(req["task"], utterance, fields, els, history)
            if act is None:
                out["error"] = "expert has no action"
                break
        else:
            break
        if not 1 <= act.id <= len(els) or els[act.id - 1].ref <= 0:
            out["error"] = f"replayed action {act} names no clickable element"
            break
        browser.apply(act, els[act.id - 1].ref)
        history.append(act)
        state = browser.observe()
        step = {"action": [act.kind, act.id, act.text], "done": state["done"], "raw_reward": state["raw_reward"],
                "reason": state["reason"]}
        if not state["done"]:
            els = flatten_dom(state["dom"], elements=mode)
            step["utterance"] = state["utterance"]
            step["elements"] = [e.__dict__ for e in els]
        out["steps"].append(step)
    out.update(done=state["done"], raw_reward=state["raw_reward"], reason=state["reason"])
    return out


def _net_probe() -> dict:
    """Try what a leaking browser would do: resolve a public name, connect off the machine."""
    result = {}
    try:
        socket.getaddrinfo("example.com", 443)
        result["dns"] = "resolved"
    except OSError as e:
        result["dns"] = f"failed: {e}"
    for label, addr in (("connect_public", ("1.1.1.1", 53)), ("connect_private", ("10.255.255.53", 53))):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.settimeout(2)
        try:
            s.connect(addr)
            result[label] = "connected"
        except OSError as e:
            result[label] = f"failed: {e}"
        finally:
            s.close()
    return result


def main() -> None:
    reply_fd = int(os.environ["GRPOLAB_MINIWOB_REPLY_FD"])
    reply = os.fdopen(reply_fd, "w", buffering=1)
    os.dup2(2, 1)  # stray prints go to the log, never into the replies
    isolated = os.environ.get("GRPOLAB_MINIWOB_NETNS") == "1"
    browser = None
    try:
        if isolated:
            loopback_up()
        browser = Browser(os.environ["GRPOLAB_MINIWOB_CHROME"], os.environ["GRPOLAB_MINIWOB_DRIVER"],
                          os.environ["GRPOLAB_MINIWOB_HTML"], os.environ["GRPOLAB_MINIWOB_PROFILE"])
        reply.write(json.dumps({"ok": True, "interfaces": interfaces(), "isolated": isolated,
                                "pid": os.getpid()}) + "\n")
    except Exception as e:  # noqa: BLE001 - reported to the pool, which raises
        reply.write(json.dumps({"ok": False, "error": f"{type(e).__name__}: {e}"}) + "\n")
        if browser is not None:
            browser.close()
        return
    try:
        for line in sys.stdin:
            req = json.loads(line)
            cmd = req.get("cmd")
            if cmd == "quit":
                break
            try:
                if cmd == "play":
                    res = _play(browser, req)
                elif cmd == "hello":
                    res = {"interfaces": interfaces(), "isolated": isolated, "pid": os.getpid()}
                elif cmd == "net_probe":
                    res = _net_probe()
                elif cmd == "stats":
                    res = {"episodes": browser.episodes}
                else:
                    raise ValueError(f"unknown command {cmd!r}")
                reply.write(json.dumps({"ok": True, **res}) + "\n")
            except Exception as e:  # noqa: BLE001 - the pool decides (retry on a fresh browser, or raise)
                traceback.print_exc()
                reply.write(json.dumps({"ok": False, "error": f"{type(e).__name__}: {e}"}) + "\n")
    finally:
        browser.close()


if __name__ == "__main__":
    main()
