"""The HTML run report (`evolve report --html`, `evolve run --report`): built from real runs,
rewritten after each generation, self-contained, and rendered by a real browser.

The browser checks drive the system's chromium (Debian's `chromium` package; `.ci/run`
installs it) headless over the DevTools protocol: every figure is drawn, nothing is logged
as an error, no request leaves file:// (data: URLs are in-page), and the full-page
screenshot is not blank. Without chromium these tests skip; in CI (`CI` set) they fail.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import tempfile
import time
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from dogma_evolve.evolution.cli.main import main
from dogma_evolve.evolution.report import html as report_html
from dogma_evolve.evolution.report.html_data import collect
from dogma_evolve.store import Store

GENERATIONS = 4  # offspring generations of the small run: 5 committed with the seeds


def _run_args(url: str, report: Path) -> list[str]:
    return [
        "run",
        "--space",
        "nb201",
        "--task",
        "cifar10",
        "--population",
        "8",
        "--generations",
        str(GENERATIONS),
        "--objectives",
        "quality,params",
        "--quiet",
        "--json",
        "--store",
        url,
        "--report",
        str(report),
    ]


@pytest.fixture(scope="module")
def nb201_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A real small run (NAS-Bench-201, table look-ups) with `--report`, every write of the
    report recorded: (generations committed, status) read back from the file each time."""
    tmp = tmp_path_factory.mktemp("report")
    url, report = f"sqlite:///{tmp / 'run.db'}", tmp / "live" / "report.html"
    writes: list[tuple[int, str]] = []
    real = report_html.write_report

    def recording(store: Store, run_id: str, path: Any, refresh_s: int | None = None) -> int:
        size = real(store, run_id, path, refresh_s)
        text = Path(path).read_text(encoding="utf-8")
        generations = re.search(r'<meta name="dogma-generations" content="(\d+)">', text)
        status = re.search(r'<meta name="dogma-status" content="(\w+)">', text)
        assert generations and status
        writes.append((int(generations.group(1)), status.group(1)))
        return size

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(report_html, "write_report", recording)
        mp.setattr(report_html, "LIVE_OVERHEAD", 1e9)  # never skip a generation here
        assert main(_run_args(url, report)) == 0
    with Store(url) as store:
        run_id = store.list_runs()[0].id
    return {"url": url, "report": report, "writes": writes, "run_id": run_id, "tmp": tmp}


# -- without a browser ---------------------------------------------------------------------
def test_run_report_is_rewritten_after_every_committed_generation(nb201_run):
    writes = nb201_run["writes"]
    committed = GENERATIONS + 1
    # one write per committed generation while running, then the final state
    assert [g for g, _ in writes] == [*range(1, committed + 1), committed]
    assert {s for _, s in writes[:-1]} == {"running"} and writes[-1][1] == "finished"
    folder = nb201_run["report"].parent
    assert [p.name for p in folder.iterdir()] == ["report.html"], "a temporary file was left behind"
    text = nb201_run["report"].read_text(encoding="utf-8")
    assert 'http-equiv="refresh"' not in text  # the final report does not reload itself


class _References(HTMLParser):
    """Every URL-valued attribute of every element (script bodies are not markup)."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[tuple[str, str, str]] = []
        self.scripts_with_src = 0
        self.stylesheets = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if name in ("src", "href", "action", "srcset", "poster", "data") and value:
                self.urls.append((tag, name, value))
        names = dict(attrs)
        self.scripts_with_src += tag == "script" and "src" in names
        self.stylesheets += tag == "link"


def test_report_is_self_contained(nb201_run):
    text = nb201_run["report"].read_text(encoding="utf-8")
    refs = _References()
    refs.feed(text)
    external = [u for u in refs.urls if re.match(r"\s*(https?:)?//", u[2], re.I)]
    assert not external, f"external references: {external[:5]}"
    assert refs.scripts_with_src == 0 and refs.stylesheets == 0
    assert all(value.startswith("#") for _, _, value in refs.urls)  # in-page anchors only
    assert text.count("Plotly.newPlot(") == _figures(text)
    assert len(re.findall(r"plotly\.js v\d", text)) == 1, "plotly.js must be inlined exactly once"


def test_report_html_command_writes_the_report(nb201_run, tmp_path, capsys):
    out = tmp_path / "again.html"
    assert main(["report", "--store", nb201_run["url"], "--html", str(out), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info == {"run_id": nb201_run["run_id"], "html": str(out), "bytes": out.stat().st_size}
    text = out.read_text(encoding="utf-8")
    assert _figures(text) >= 7 and nb201_run["run_id"] in text


def test_replayed_operator_credit_matches_the_stored_policy(nb201_run):
    with Store(nb201_run["url"]) as store:
        data = collect(store, nb201_run["run_id"])
        stored: dict[str, list[float]] = {}
        for row in store.policy(nb201_run["run_id"]):
            entry = stored.setdefault(row.operator, [0.0, 0.0])
            entry[0] += row.successes
            entry[1] += row.trials
    replayed = {op: st for op, st in data.generations[-1].credit.items() if st[1]}
    assert replayed.keys() == stored.keys()
    for op, (successes, trials) in replayed.items():
        assert (successes, trials) == pytest.approx(tuple(stored[op])), op
    assert data.best is not None and data.best in data.lineages
    assert data.lineages[data.best][-1].operator is None  # the walk reaches a seed
    assert data.fronts["params"] and "state_bytes" not in data.fronts  # nb201 has no state bytes


def test_a_live_report_skips_generations_that_come_faster_than_it_builds(monkeypatch, tmp_path):
    calls: list[int | None] = []

    def slow_write(store: Any, run_id: str, path: Any, refresh_s: int | None = None) -> int:
        time.sleep(0.05)
        calls.append(refresh_s)
        return 0

    monkeypatch.setattr(report_html, "write_report", slow_write)
    events: list[str] = []
    live = report_html.live_report(None, "r", tmp_path / "r.html", lambda kind, data: events.append(kind))  # type: ignore[arg-type]
    for _ in range(5):
        live("generation", {})
        live("committed", {})
    assert events == ["generation", "committed"] * 5  # every event still reaches the display
    assert 1 <= len(calls) < 5 and calls[0] == report_html.LIVE_REFRESH_S


# -- in chromium ---------------------------------------------------------------------------
def _figures(text: str) -> int:
    found = re.search(r'<meta name="dogma-figures" content="(\d+)">', text)
    assert found, "the report names its figure count"
    return int(found.group(1))


def _need(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"{reason} (CI is set: the browser test must run)", pytrace=False)
    pytest.skip(reason)


class Chromium:
    """A headless chromium driven over the DevTools protocol (one page target)."""

    def __init__(self, binary: str, profile: Path) -> None:
        import websocket

        self.proc = subprocess.Popen(
            [
                binary,
                "--headless=new",
                "--remote-debugging-port=0",
                f"--user-data-dir={profile}",
                "--no-sandbox",  # CI and this machine run as root
                "--disable-gpu",
                "--no-first-run",
                "--no-default-browser-check",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-default-apps",
                "--disable-extensions",
                "--disable-sync",
                "--hide-scrollbars",
                "--mute-audio",
                "--window-size=1400,1000",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + 60
        while not (port_file.exists() and len(port_file.read_text().split()) >= 2):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.close()
                raise RuntimeError("chromium did not start: " + self._stderr())
            time.sleep(0.05)
        port, path = port_file.read_text().split()[:2]
        self.ws = websocket.create_connection(
            f"ws://127.0.0.1:{port}{path}", timeout=120, suppress_origin=True
        )
        self.events: list[dict[str, Any]] = []
        self.next_id = 0

    def _stderr(self) -> str:
        try:
            _, err = self.proc.communicate(timeout=5)
        except subprocess.TimeoutExpired:
            return "(no output)"
        return (err or b"").decode(errors="replace")[-2000:]

    def call(self, method: str, params: dict[str, Any] | None = None, session: str | None = None) -> Any:
        self.next_id += 1
        message: dict[str, Any] = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        self.ws.send(json.dumps(message))
        while True:
            reply = json.loads(self.ws.recv())
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply["result"]
            self.events.append(reply)

    def page(self) -> str:
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        return self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]

    def evaluate(self, session: str, expression: str, wait: bool = False) -> Any:
        result = self.call(
            "Runtime.evaluate",
            {"expression": expression, "returnByValue": True, "awaitPromise": wait},
            session,
        )
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression[:60]}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for_event(self, name: str, session: str, since: int, timeout: float = 120) -> None:
        """Until `session` reports event `name` (among the events from index `since` on)."""
        deadline = time.monotonic() + timeout
        while not any(e.get("method") == name and e.get("sessionId") == session for e in self.events[since:]):
            if time.monotonic() > deadline:
                raise TimeoutError(name)
            self.events.append(json.loads(self.ws.recv()))

    def close(self) -> None:
        if getattr(self, "ws", None) is not None:
            self.ws.close()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)  # the group this test started
                self.proc.wait()


@pytest.fixture(scope="module")
def chromium(tmp_path_factory: pytest.TempPathFactory):
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    if binary is None:
        _need("chromium is not installed (Debian: apt-get install chromium; .ci/run installs it)")
    try:
        import websocket  # noqa: F401
    except ImportError:
        _need("websocket-client is not installed (the project's test extra)")
    profile = Path(tempfile.mkdtemp(dir=tmp_path_factory.mktemp("chromium")))
    browser = Chromium(binary, profile)  # type: ignore[arg-type]
    try:
        yield browser
    finally:
        browser.close()


def _distinct_colours(browser: Chromium, png: bytes) -> int:
    """Distinct colours of every 4th pixel of `png`, decoded by chromium on a blank page."""
    session = browser.page()
    data = base64.b64encode(png).decode()
    script = (
        "(async () => { const img = new Image(); img.src = 'data:image/png;base64," + data + "';"
        " await img.decode(); const c = document.createElement('canvas');"
        " c.width = img.width; c.height = img.height; const g = c.getContext('2d');"
        " g.drawImage(img, 0, 0); const d = g.getImageData(0, 0, c.width, c.height).data;"
        " const seen = new Set(); for (let i = 0; i < d.length; i += 16)"
        " seen.add((d[i] << 16) | (d[i + 1] << 8) | d[i + 2]); return seen.size; })()"
    )
    return int(browser.evaluate(session, script, wait=True))


def check_in_browser(browser: Chromium, report: Path, screenshot: Path) -> dict[str, Any]:
    """Open `report` from file://, wait for every figure, and check it as the module says."""
    expected = _figures(report.read_text(encoding="utf-8"))
    session = browser.page()
    first_event = len(browser.events)
    for domain in ("Page", "Runtime", "Log", "Network"):
        browser.call(f"{domain}.enable", session=session)
    browser.call("Page.navigate", {"url": report.resolve().as_uri()}, session)
    browser.wait_for_event("Page.loadEventFired", session, first_event)
    probe = (
        "(() => { const plots = [...document.querySelectorAll('.js-plotly-plot')];"
        " return { plots: plots.length, drawn: plots.filter(p => p.querySelector('.main-svg')"
        " && p.querySelector('.trace, .hm, .heatmaplayer image')).length,"
        " svgs: document.querySelectorAll('.main-svg').length,"
        " height: document.documentElement.scrollHeight }; })()"
    )
    deadline = time.monotonic() + 60
    state = browser.evaluate(session, probe)
    while state["drawn"] < expected and time.monotonic() < deadline:
        time.sleep(0.2)
        state = browser.evaluate(session, probe)
    assert state["plots"] == expected and state["drawn"] == expected, state
    assert state["svgs"] >= expected

    events = [e for e in browser.events[first_event:] if e.get("sessionId") == session]
    errors = [
        e["params"]
        for e in events
        if (e.get("method") == "Runtime.consoleAPICalled" and e["params"]["type"] in ("error", "assert"))
        or e.get("method") == "Runtime.exceptionThrown"
        or (e.get("method") == "Log.entryAdded" and e["params"]["entry"]["level"] == "error")
    ]
    assert not errors, f"console errors: {json.dumps(errors)[:2000]}"
    requests = [
        e["params"]["request"]["url"] for e in events if e.get("method") == "Network.requestWillBeSent"
    ]
    assert requests and requests[0].startswith("file://")
    network = [u for u in requests if not u.startswith(("file://", "data:"))]
    assert not network, f"requests beyond the file: {network[:5]}"

    # the first figure is the Pareto plot: hovering a front point shows its id and sequence
    hovered = browser.evaluate(
        session,
        "(() => { const gd = document.getElementById('figure-1'); const k = gd.data.length - 1;"
        " const row = gd.data[k].customdata[0]; Plotly.Fx.hover(gd, [{curveNumber: k, pointNumber: 0}]);"
        " const t = gd.querySelector('.hoverlayer .hovertext');"
        " return {title: gd.layout.title.text, row: row, text: t ? t.textContent : ''}; })()",
    )
    assert hovered["title"].startswith("quality"), hovered
    assert f"#{hovered['row'][0]} " in hovered["text"] and hovered["row"][-1] in hovered["text"], hovered

    height = min(int(state["height"]), 12000)
    browser.call(
        "Emulation.setDeviceMetricsOverride",
        {"width": 1400, "height": height, "deviceScaleFactor": 1, "mobile": False},
        session,
    )
    shot = browser.call("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True}, session)
    png = base64.b64decode(shot["data"])
    screenshot.write_bytes(png)
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    width, tall = struct.unpack(">II", png[16:24])
    assert width == 1400 and tall >= 1000
    colours = _distinct_colours(browser, png)
    assert colours > 64, f"the screenshot looks blank: {colours} colours"
    return {"figures": expected, "colours": colours, "requests": requests}


def test_the_report_renders_in_chromium(nb201_run, chromium):
    shot = nb201_run["tmp"] / "report.png"
    result = check_in_browser(chromium, nb201_run["report"], shot)
    assert result["figures"] >= 7
    print(f"screenshot: {shot} ({result['colours']} colours, {result['figures']} figures)")


@pytest.mark.slow
def test_a_multi_task_multi_fidelity_dogma_report_renders_every_section(tmp_path, chromium):
    """Every section with data: per task, state bytes, failures, fidelity transfer."""
    from dogma_evolve.evaluation import EvalResult, evaluate
    from dogma_evolve.evolution.engine import Engine, RunConfig

    class FailingPool:  # in-process evaluation, every 5th request a crash
        def __init__(self) -> None:
            self.n = 0

        def evaluate(self, requests, on_result=None):
            results = []
            for request in requests:
                self.n += 1
                crash = self.n % 5 == 0
                result = EvalResult.for_request(request, "crash", "injected") if crash else evaluate(request)
                results.append(result)
                if on_result:
                    on_result(result)
            return results

    config = RunConfig(
        population=4,
        generations=1,
        steps=2,
        min_steps=1,
        promote=0.5,
        task="mqar,noisy_recall",
        seed=3,
        max_params=60_000,
        objectives=("quality", "params", "state_bytes"),
    )
    with Store(f"sqlite:///{tmp_path / 'dogma.db'}") as store:
        engine = Engine(config, store, FailingPool())
        engine.run()
        report = tmp_path / "dogma.html"
        report_html.write_report(store, engine.run_id, report)
    text = report.read_text(encoding="utf-8")
    for section in ('id="fidelity"', "per task: the best", "vs inference-state bytes", "failed evaluations"):
        assert section in text, section
    result = check_in_browser(chromium, report, tmp_path / "dogma.png")
    assert result["figures"] >= 11
