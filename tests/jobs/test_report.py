"""kraft-audit report: one self-contained HTML file of an audit, checked as a person sees it.

On the ``last-replica-standing-elr-off`` scenario (seed 7): the page lists the incidents ``audit --json --all``
finds, shows payments-0's ISR sequence as ``timeline --json`` prints it, and its search box finds a
partition; in a headless Chromium (Selenium, the system's ``/usr/bin/chromium`` and ``/usr/bin/chromedriver``)
with the network switched off, with no console error and no request leaving the file.  The browser tests skip,
naming what is missing, only where Chromium or Selenium cannot be had (``scripts/test.sh`` installs them).

``KRAFT_AUDIT_UPDATE_SCREENSHOT=1`` makes the browser test write README's screenshot,
``docs/report-screenshot.png``.
"""
from __future__ import annotations

import json
import os
import re
import shutil
from html.parser import HTMLParser
from pathlib import Path

import pytest

from jobs import cli
from realdata_facts import CLUSTERS, REALDATA

ROOT = Path(__file__).resolve().parents[2]
REAL_LOG = REALDATA / CLUSTERS["vasifvortex"] / "__cluster_metadata-0"
CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"


def _cli_json(capsys, *argv) -> tuple[int, str]:
    capsys.readouterr()
    code = cli.main(list(argv))
    return code, capsys.readouterr().out


@pytest.fixture(scope="module")
def scenario(tmp_path_factory):
    d = tmp_path_factory.mktemp("report")
    log = d / "log"
    assert cli.main(["simulate", "last-replica-standing-elr-off", "-o", str(log), "--seed", "7"]) == 0
    return d, log


@pytest.fixture(scope="module")
def facts(scenario):
    """What the other commands say about the scenario: the audit (--json --all, and its exit code) and
    payments-0's timeline."""
    import contextlib
    import io

    _, log = scenario
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = cli.main(["audit", "--log-dir", str(log), "--json", "--all"])
    audit = json.loads(out.getvalue())
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli.main(["timeline", "--log-dir", str(log), "--topic", "payments", "--partition", "0", "--json"]) == 0
    timeline = [json.loads(x) for x in out.getvalue().splitlines()]
    return {"audit": audit, "audit_exit": code, "timeline": timeline, "inc": audit["incidents"]}


@pytest.fixture(scope="module")
def report(scenario):
    d, log = scenario
    path = d / "report.html"
    assert cli.main(["report", "--log-dir", str(log), "-o", str(path)]) == 0
    return path


class _Page(HTMLParser):
    """Every element's tag and attributes, the scripts' text, and text inside elements with an id."""

    def __init__(self):
        super().__init__()
        self.tags, self.scripts, self._script = [], [], None

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if tag == "script":
            self._script = [dict(attrs), ""]

    def handle_data(self, data):
        if self._script is not None:
            self._script[1] += data

    def handle_endtag(self, tag):
        if tag == "script" and self._script is not None:
            self.scripts.append(tuple(self._script))
            self._script = None


def _parse(text: str) -> _Page:
    p = _Page()
    p.feed(text)
    p.close()
    return p


def _index(page: _Page) -> dict:
    (doc,) = [t for a, t in page.scripts if a.get("type") == "application/json" and a.get("id") == "partition-index"]
    return json.loads(doc)


# ------------------------------------------------------------------------------------------ the file
def test_the_page_is_self_contained_and_holds_the_audit(report, facts, capsys):
    text = report.read_text(encoding="utf-8")
    page = _parse(text)
    external = [(t, a) for t, a in page.tags for k in ("src", "href", "xlink:href", "action")
                if re.match(r"\s*(https?:)?//", a.get(k) or "")]
    assert not external
    assert not [t for t, a in page.tags if t in ("link", "img", "iframe", "object", "embed")]
    assert all(not a.get("src") for a, _ in page.scripts)  # inline only
    assert "@import" not in text and "url(" not in text
    # the verdict: the exit code `audit` gives at the default --fail-on
    assert re.search(r'id="audit-exit-code">(\d)<', text).group(1) == str(facts["audit_exit"])
    # the incidents of the audit, in its order, each with its findings
    want = [i["incident_id"] for i in facts["inc"]]
    assert {i["cause"] for i in facts["inc"]} >= {"CLUSTER_RESTART", "UNCLEAN_ELECTION"}
    assert [a["data-incident"] for t, a in page.tags if t == "details" and "data-incident" in a] == want
    assert len([a for t, a in page.tags if t == "tr" and a.get("class") == "finding"]) >= \
        sum(i["findings"] for i in facts["inc"])
    # the search index: every partition (one here), payments-0 exactly as `timeline` prints it
    index = _index(page)
    assert index["complete"] and index["totalPartitions"] == 1
    rows = index["partitions"]["payments-0"]
    cols = index["columns"]
    assert [(r[cols.index("offset")], r[cols.index("isr")], r[cols.index("leader")]) for r in rows] == \
        [(r["offset"], r["isr"], r["leader"]) for r in facts["timeline"]]
    assert [t for t, a in page.tags if t == "svg"]  # the plots are inline SVG
    for ident in ("broker-timeline", "availability", "changes-per-minute", "records-per-type"):
        assert any(a.get("id") == ident for t, a in page.tags if t == "svg"), ident


def test_a_hostile_topic_name_is_text_everywhere(scenario):
    """A topic named like markup ends no element and opens none: escaped in the HTML, ``\\u003c`` in the JSON."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from audit import report
    from audit.run import audit
    from lake import catalog, gold
    from lake.config import load_config

    _, log = scenario
    evil = '</script><script>alert("x")</script><b title="a&b">'
    tables, end, end_time = gold.silver_from_log_dir(str(log))
    t = tables[catalog.TOPIC_CONFIG_HISTORY.name]
    i = t.schema.get_field_index("topic_name")
    tables[catalog.TOPIC_CONFIG_HISTORY.name] = t.set_column(
        i, "topic_name", pc.if_else(pc.equal(t.column("topic_name"), "payments"), pa.scalar(evil), t.column(i)))
    result = audit(tables, load_config(None), end, end_time)
    timelines = [(f"{evil}-0", [r for r in tables[catalog.PARTITION_STATE_HISTORY.name].to_pylist()])]
    text = report.render(tables, result, name=evil, fail_on="ERROR", source={"facts": [("log directory", evil)]},
                         version="test", plan=None, timelines=timelines, timelines_total=1)
    assert evil not in text and "<script>alert" not in text
    page = _parse(text)
    assert len(page.scripts) == 2  # the index and the search code: nothing the name opened
    assert not [a for t, a in page.tags if a.get("title") == "a&b"]
    assert f"{evil}-0" in _index(page)["partitions"]
    assert "&lt;/script&gt;&lt;script&gt;alert(&quot;x&quot;)" in text


def test_recovery_shows_the_candidates_and_the_plan_of_kraft_audit_plan(scenario, capsys):
    """At T3 (payments-0 leaderless, the followers back) with the brokers' log info: the candidates and the
    commands ``kraft-audit plan`` writes for the strategy, each step with its data-loss estimate."""
    d, log = scenario
    out = d / "t3.html"
    at = ["--log-dir", str(log), "--at-offset", "51", "--log-info", str(log / "log-info"), "--strategy", "aggressive"]
    assert cli.main(["report", *at, "-o", str(out)]) == 0
    text = out.read_text(encoding="utf-8")
    assert 'id="candidates"' in text and 'id="plan-steps"' in text
    commands = re.search(r'<pre class="mono" id="plan-commands">(.*?)</pre>', text, re.S).group(1).splitlines()
    plan_dir = d / "plan"
    code, summary = _cli_json(capsys, "plan", *at, "--election-type", "longest_log_aggressive", "-o", str(plan_dir))
    assert code == 0
    assert commands and all(c in (plan_dir / "PLAN.md").read_text() for c in commands)
    # an earlier report is replaced; anything else at -o is not
    assert cli.main(["report", *at, "-o", str(out)]) == 0
    other = d / "notes.html"
    other.write_text("<html>mine</html>")
    assert cli.main(["report", "--log-dir", str(log), "-o", str(other)]) == 2
    assert other.read_text() == "<html>mine</html>"


def test_the_index_is_bounded_and_says_so(scenario):
    d, log = scenario
    out = d / "small.html"
    assert cli.main(["report", "--log-dir", str(log), "--max-index-rows", "3", "-o", str(out)]) == 0
    text = out.read_text(encoding="utf-8")
    index = _index(_parse(text))
    assert not index["complete"] and index["indexedRows"] <= 3 and index["partitions"] == {}
    assert "kraft-audit timeline --topic T --partition N" in text
    assert 'data-partition="payments-0"' in text  # the partition in an incident is still shown in full


# ------------------------------------------------------------------------------------------ the browser
def _browser():
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not shutil.which(p)]
    try:
        import selenium  # noqa: F401
    except ImportError:
        missing.append("the selenium package (pip install '.[test]')")
    if missing:
        pytest.skip(f"no browser to test in: missing {', '.join(missing)} (scripts/test.sh installs "
                    "Debian's chromium and chromium-driver)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1100,1500",
              "--no-first-run", "--disable-background-networking"):
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    driver.set_page_load_timeout(30)
    driver.execute_cdp_cmd("Network.enable", {})
    driver.execute_cdp_cmd("Network.emulateNetworkConditions",
                           {"offline": True, "latency": 0, "downloadThroughput": 0, "uploadThroughput": 0})
    return driver


@pytest.fixture(scope="module")
def browser():
    driver = _browser()
    yield driver
    driver.quit()


def test_in_a_browser_offline(browser, report, facts, tmp_path):
    from selenium.webdriver.common.by import By

    d = browser
    d.get(report.as_uri())
    assert d.title.startswith("kraft-audit report")
    # the incidents, each collapsible, its findings shown when opened
    incidents = d.find_elements(By.CSS_SELECTOR, "details.incident")
    assert [x.get_attribute("data-incident") for x in incidents] == [i["incident_id"] for i in facts["inc"]]
    for x, want in zip(incidents, facts["inc"]):
        summary = x.find_element(By.TAG_NAME, "summary")
        assert want["cause"] in summary.text and want["severity"] in summary.text
        assert not x.find_element(By.CSS_SELECTOR, "tr.finding").is_displayed()  # collapsed
        summary.click()
        shown = [r for r in x.find_elements(By.CSS_SELECTOR, "tr.finding") if r.is_displayed()]
        assert len(shown) == want["findings"]
        assert {r.get_attribute("data-code") for r in shown} == set(want["codes"])
    verdict = d.find_element(By.ID, "verdict").text
    assert f"exits {facts['audit_exit']}" in verdict and facts["audit"]["worstSeverity"] in verdict
    # payments-0's timeline: the ISR sequence `kraft-audit timeline` prints
    want_isr = [",".join(map(str, r["isr"])) or "-" for r in facts["timeline"]]
    tl = d.find_element(By.CSS_SELECTOR, '.partition-timeline[data-partition="payments-0"]')
    assert [c.text for c in tl.find_elements(By.CSS_SELECTOR, "td.isr")] == want_isr
    # the search box: nothing until typed, then the partition's rows
    box = d.find_element(By.ID, "search-box")
    assert not d.find_elements(By.CSS_SELECTOR, "#search-results .search-partition")
    box.send_keys("payments-0")
    found = d.find_element(By.CSS_SELECTOR, '#search-results .search-partition[data-partition="payments-0"]')
    assert [c.text for c in found.find_elements(By.CSS_SELECTOR, "td.isr")] == want_isr
    assert [r.find_element(By.TAG_NAME, "td").text for r in found.find_elements(By.CSS_SELECTOR, "tr")[1:]] == \
        [str(r["offset"]) for r in facts["timeline"]]
    box.clear()
    box.send_keys("no-such-topic-7")
    assert "No partition matching" in d.find_element(By.ID, "search-results").text
    box.clear()
    box.send_keys("payments")  # part of a name finds it too
    assert d.find_elements(By.CSS_SELECTOR, '#search-results .search-partition[data-partition="payments-0"]')
    # the broker timeline is drawn: a bar per state, broker 3's unclean restart marked
    states = {r.get_attribute("data-state") for r in d.find_elements(By.CSS_SELECTOR, "#broker-timeline rect[data-state]")}
    assert {"active", "fenced"} <= states
    assert d.find_elements(By.CSS_SELECTOR, "#broker-timeline path.unclean")
    # nothing left the file, nothing went wrong
    requests = d.execute_script("return performance.getEntriesByType('resource').map(function (e) { return e.name; })")
    assert not [u for u in requests if re.match(r"(https?|wss?):", u)], requests
    severe = [x for x in d.get_log("browser") if x["level"] == "SEVERE"]
    assert not severe, severe
    # what a person sees: the top of the page with the incidents open and payments-0 found
    d.execute_script("window.scrollTo(0, 0)")
    box.clear()
    box.send_keys("payments-0")
    shot = ROOT / "docs" / "report-screenshot.png" if os.environ.get("KRAFT_AUDIT_UPDATE_SCREENSHOT") else \
        tmp_path / "report.png"
    shot.parent.mkdir(exist_ok=True)
    height = d.execute_script("return document.body.scrollHeight")
    d.set_window_size(1100, min(height + 40, 4000))
    d.execute_script("window.scrollTo(0, 0)")
    assert d.save_screenshot(str(shot)) and shot.stat().st_size > 10_000


def test_from_the_lake_the_page_is_the_log_directorys(scenario, report, tmp_path):
    """``--cluster``: the same incidents, findings and partition index as ``--log-dir`` (the lake's silver tables
    written here with delta-rs from the in-process replay, as ``replay`` writes them, without starting Spark)."""
    import datetime as dt

    import pyarrow as pa

    from lake import catalog, gold
    from lake.delta import Lake

    _, log = scenario
    tables, end, end_time = gold.silver_from_log_dir(str(log))
    lake = Lake(tmp_path / "lake", None, backend="delta-rs")

    def put(name, t):
        lake.append_arrow(name, t.append_column("cluster", pa.array(["c1"] * t.num_rows, pa.string())),
                          partition_by=["cluster"])

    for name in gold.SILVER_INPUTS:
        put(name, tables[name])
    rt = tables["record_times"]
    put(catalog.METADATA_RECORDS.name, rt.append_column("source_kind", pa.array(["segment"] * rt.num_rows))
        .append_column("source_file", pa.array(["00000000000000000000.log"] * rt.num_rows)))
    put(catalog.REPLAY_CHECKPOINTS.name, pa.table({
        "replayed_at": pa.array([dt.datetime.now(dt.timezone.utc)], catalog.TS), "mode": ["full"],
        "start_offset": pa.array([0], pa.int64()), "snapshot": pa.array([None], pa.string()),
        "last_offset": pa.array([end], pa.int64()), "last_timestamp": pa.array([end_time], catalog.TS),
        "records": pa.array([rt.num_rows], pa.int64())}))
    out = tmp_path / "lake.html"
    assert cli.main(["report", "--cluster", "c1", "--lake", str(lake.root), "-o", str(out)]) == 0
    a, b = _parse(report.read_text(encoding="utf-8")), _parse(out.read_text(encoding="utf-8"))
    for what in ("data-incident", "data-code", "data-partition"):
        assert [x.get(what) for _, x in a.tags if what in x] == [x.get(what) for _, x in b.tags if what in x], what
    assert _index(a)["partitions"] == _index(b)["partitions"]
    assert 'id="files"' in out.read_text(encoding="utf-8")  # the files ingested, with their records


def test_the_plots_and_the_broker_timeline_follow_the_history(scenario, facts):
    """The under-min-ISR / offline step lines are 1 exactly inside the audit's UNDER_MIN_ISR / OFFLINE windows of
    payments-0 (every slice wholly inside is 1, every slice wholly outside 0); broker 3's re-registration after its
    crash is an unclean restart; the records per type add up to the segments' records."""
    import datetime as dt

    from audit import report
    from audit.run import audit
    from lake import catalog, gold
    from lake.config import load_config

    _, log = scenario
    tables, end, end_time = gold.silver_from_log_dir(str(log))
    result = audit(tables, load_config(None), end, end_time)
    lo, hi = report.time_range(tables, result)
    series = report.availability_series(tables, lo, hi, end, points=2000)
    w = -(-(hi - lo) // 2000)

    def ms(iso):
        return int(dt.datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() * 1000)

    for name, code in (("under", "UNDER_MIN_ISR"), ("offline", "OFFLINE")):
        (f,) = [f for f in facts["audit"]["findings"] if f["code"] == code]
        a, b = ms(f["first_time"]), ms(f["last_time"])
        for start, n in series[name]:
            if a <= start and start + w < b:
                assert n == 1, (name, start)
            elif start + w < a or start > b:
                assert n == 0, (name, start)
    intervals, restarts = report.broker_intervals(tables[catalog.BROKER_STATE_HISTORY.name], hi, end)
    assert [(b, off, unclean) for b, _, off, unclean in restarts] == [(3, 52, True)]
    assert [s for _, _, s, _ in intervals[3]] == ["fenced", "active", "fenced", "active"]
    types = report.records_per_type(tables, end)
    assert sum(n for _, n in types) == tables["record_times"].num_rows


def test_a_damaged_logs_incidents_name_a_topic_by_its_id(tmp_path, capsys):
    """A real log whose batch holding __consumer_offsets' TopicRecord is damaged: the change records of its
    partitions are findings naming the topic by its id (no name was read).  The report is still written, those
    partitions' timelines empty (no state of their own), and ``timeline`` says why instead of printing nothing."""
    log = tmp_path / "__cluster_metadata-0"
    shutil.copytree(REAL_LOG, log, copy_function=shutil.copyfile)
    log.chmod(0o755)
    seg = log / "00000000000000000000.log"
    capsys.readouterr()
    assert cli.main(["decode", str(seg)]) == 0
    (topic,) = [json.loads(x) for x in capsys.readouterr().out.splitlines()
                if '"TOPIC_RECORD"' in x and '"__consumer_offsets"' in x]
    tid = topic["data"]["topicId"]
    raw = bytearray(seg.read_bytes())
    raw[topic["position"]] ^= 0xFF  # the record's batch no longer verifies: it is quarantined
    seg.write_bytes(bytes(raw))
    path = tmp_path / "report.html"
    capsys.readouterr()
    assert cli.main(["report", "--log-dir", str(log), "-o", str(path)]) == 0
    said = capsys.readouterr()
    assert "the log is damaged" in said.err and "wrote" in said.out + said.err
    page = path.read_text(encoding="utf-8")
    named = re.findall(r'data-partition="([^"]+)"><h3>[^<]*: (\d+) change', page)
    assert any(n.startswith(tid + "-") for n, _ in named)
    assert all(c == "0" for n, c in named if n.startswith(tid + "-"))
    assert cli.main(["timeline", "--log-dir", str(log), "--topic", tid]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].endswith(
        f"topic '{tid}' has no partition state in the history read (--topic)")
