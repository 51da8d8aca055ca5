"""The case report: a real case built through the MCP client, rendered as HTML in headless Chromium
and as Markdown; partial cases and malformed evidence; the CLI; triage's progress line on a TTY."""

from __future__ import annotations

import json
import os
import pty
import re
import shutil
import struct
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest
from mcp import Client

from pt2_bug_basher.case.config import ServerConfig
from pt2_bug_basher.case.store import Store
from pt2_bug_basher.case.workflow import STEPS
from pt2_bug_basher.cli.main import main
from pt2_bug_basher.mcp_server.server import create_server
from pt2_bug_basher.report.build import build_report
from pt2_bug_basher.report.html import render_html
from pt2_bug_basher.report.markdown import md_code, md_text, render_markdown
from pt2_bug_basher.steps.environment import start_case

SCREENSHOTS = Path(__file__).parent / "screenshots"
HOSTILE = "<script>alert('pwned')</script><img src=x onerror=alert(1)>"
FAILING_SCRIPT = f'''\
import os, sys, time
time.sleep(0.3)
print("stdout says {HOSTILE}")
print("stderr says {HOSTILE}", file=sys.stderr)


class BackendCompilerFailed(RuntimeError):
    pass


BackendCompilerFailed.__module__ = "torch._dynamo.exc"
if os.environ.get("TORCHDYNAMO_DISABLE"):  # as a compiler failure, it needs compilation on
    sys.exit(0)
raise BackendCompilerFailed("backend='inductor' raised:\\nLoweringException: AssertionError: {HOSTILE}")
'''
WAIVER = f"no reduction needed: the repro is 5 lines | already minimal {HOSTILE} `tick`"


def _text(result) -> str:
    return result.contents[0].text


@pytest.fixture(scope="module")
def real_case(tmp_path_factory):
    """check_env, run_with_logs(repeat=2) on a failing script, a waiver and classify_error, all over MCP."""
    root = tmp_path_factory.mktemp("report")
    repo = root / "repo"
    repo.mkdir()
    script = repo / "repro.py"
    script.write_text(FAILING_SCRIPT)
    config = ServerConfig(state_dir=root / "state", default_repo=repo, allowed_roots=(root,))

    async def build() -> dict:
        server = create_server(config)
        async with Client(server) as client:
            env = await client.call_tool("check_env", {"python": sys.executable})
            assert not env.is_error, env.content[0].text
            case_id = env.structured_content["case_id"]
            run = await client.call_tool("run_with_logs", {"case_id": case_id, "script": str(script), "repeat": 2})
            assert not run.is_error, run.content[0].text
            run_ids = [r["run_id"] for r in run.structured_content["runs"]]
            assert run.structured_content["reproduced"], run.structured_content
            waived = await client.call_tool("waive_step", {"case_id": case_id, "step": "reduce", "reason": WAIVER})
            assert not waived.is_error, waived.content[0].text
            classified = await client.call_tool("classify_error", {"case_id": case_id, "run_id": run_ids[0]})
            assert not classified.is_error, classified.content[0].text
            markdown = _text(await client.read_resource(f"case://{case_id}/report"))
            page = _text(await client.read_resource(f"case://{case_id}/report.html"))
            missing = None
            try:
                await client.read_resource("case://case-nope/report")
            except Exception as exc:  # noqa: BLE001 - the SDK's error type for a resource error
                missing = str(exc)
        return {"case_id": case_id, "run_ids": run_ids, "markdown": markdown, "html": page, "config": config,
                "category": classified.structured_content["category"], "missing": missing}

    return anyio.run(build)


# --------------------------------------------------------------------------------------------
# Headless Chromium


def _chromium() -> str | None:
    found = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed (CI must install it: apt-get install -y chromium)")
        pytest.skip("chromium is not installed")
    return found


def _chromium_run(binary: str, tmp: Path, *args: str) -> subprocess.CompletedProcess:
    profile = tmp / f"profile-{time.monotonic_ns()}"
    argv = [binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--disable-dev-shm-usage", "--enable-logging=stderr", "--v=0", f"--user-data-dir={profile}", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=180, stdin=subprocess.DEVNULL)


def _png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n" and head[12:16] == b"IHDR", head
    return struct.unpack(">II", head[16:24])


def _js_problems(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines()
            if "CONSOLE" in line or "Uncaught" in line or "Refused to" in line or "Content Security Policy" in line]


def test_html_report_renders_in_headless_chromium(real_case, tmp_path):
    binary = _chromium()
    case_id, run_ids = real_case["case_id"], real_case["run_ids"]
    page = tmp_path / "report.html"
    page.write_text(real_case["html"], encoding="utf-8")
    SCREENSHOTS.mkdir(exist_ok=True)
    png = SCREENSHOTS / "report-real-case.png"
    png.unlink(missing_ok=True)

    shot = _chromium_run(binary, tmp_path, f"--screenshot={png}", "--window-size=1280,2000", page.as_uri())
    assert shot.returncode == 0, shot.stderr[-3000:]
    assert png.is_file() and png.stat().st_size > 40_000, png.stat().st_size if png.exists() else "no file"
    assert _png_size(png) == (1280, 2000)
    assert not _js_problems(shot.stderr), _js_problems(shot.stderr)

    dom = _chromium_run(binary, tmp_path, "--dump-dom", page.as_uri())
    assert dom.returncode == 0, dom.stderr[-3000:]
    text = dom.stdout
    assert case_id in text
    for spec in STEPS:
        assert spec.title.replace("<", "&lt;").replace(">", "&gt;") in text, spec.title
    for run_id in run_ids:
        assert f'id="run-{run_id}"' in text
    # The script's output (stderr, the exception message) and the waiver are text, never elements.
    assert "<script" not in text.lower() and "<img" not in text.lower()
    assert "&lt;script&gt;alert('pwned')&lt;/script&gt;" in text
    assert "onerror" in text  # present, as escaped text only
    assert re.search(r'<svg[^>]+class="timeline"', text)
    assert 'class="badge b-waived"' in text
    assert "Evidence lines" in text and "exception:BackendCompilerFailed" in text
    assert not _js_problems(dom.stderr), _js_problems(dom.stderr)


def test_html_report_is_self_contained(real_case):
    page = real_case["html"]
    assert page.startswith("<!DOCTYPE html>")
    lowered = page.lower()
    assert "<script" not in lowered and "<link" not in lowered and "@import" not in lowered
    assert "http://" not in lowered.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert "https://" not in lowered
    assert re.search(r"<img\b", lowered) is None
    assert "default-src 'none'" in page
    assert real_case["case_id"] in page and real_case["category"] in page


# --------------------------------------------------------------------------------------------
# Markdown


def _outside_code(markdown: str) -> str:
    """The Markdown with fenced blocks and code spans taken out: what a renderer would parse as markup."""
    without_fences = re.sub(r"(?ms)^(~{3,}|`{3,}).*?^\1\s*$", "", markdown)
    return re.sub(r"(`+)(?!`).*?(?<!`)\1(?!`)", "", without_fences)


def test_markdown_report_structure(real_case):
    md, case_id = real_case["markdown"], real_case["case_id"]
    headings = [line for line in md.splitlines() if line.startswith("#")]
    assert headings[0].startswith("# Case report: ") and case_id in headings[0]
    assert [h for h in headings if h.startswith("## ")] == [
        "## Steps", "## Runs", "## Classification", "## Minification", "## Tests", "## Waivers", "## Summary"]
    lines = md.splitlines()
    start = lines.index("## Steps")
    table = [ln for ln in lines[start:lines.index("## Runs")] if ln.startswith("|")]
    assert table[0] == "| # | Step | Status | When | Evidence |"
    rows = table[2:]
    assert len(rows) == 13 and all(row.count("|") - row.count("\\|") == 6 for row in rows), rows
    assert rows[0].startswith("| 1 | Check the environment | ✔ done")
    assert "waived" in rows[2] and "done" in rows[1]
    runs = md[md.index("## Runs"):md.index("## Classification")]
    for run_id in real_case["run_ids"]:
        assert f"`{run_id}`" in runs
    assert runs.count("exit 1") >= 2
    waivers = md[md.index("## Waivers"):md.index("## Summary")]
    assert "**reduce**" in waivers and "already minimal" in waivers and "\\|" in waivers
    assert real_case["category"] == "backend_compiler_failed"
    assert f"**{md_text(real_case['category'])}**" in md
    assert "Evidence lines:" in md and "[exception:BackendCompilerFailed]" in md
    # No raw HTML from the script's output or the waiver reaches a Markdown renderer.
    outside = _outside_code(md)
    assert re.search(r"(?<!\\)<", outside) is None, [ln for ln in outside.splitlines() if re.search(r"(?<!\\)<", ln)]
    assert "\\<script\\>" in outside


def test_markdown_helpers_escape():
    assert md_text("<b>x</b> | *y*") == "\\<b\\>x\\</b\\> \\| \\*y\\*"
    assert md_code("a ``b`` c") == "```a ``b`` c```"
    assert md_code("`x`") == "`` `x` ``"
    assert "|" not in md_code("a|b")
    assert md_text("two\nlines") == "two lines"


def test_report_resource_of_unknown_case(real_case):
    assert real_case["missing"] is not None and "case-nope" in real_case["missing"]


# --------------------------------------------------------------------------------------------
# Partial cases and malformed evidence


def test_report_of_a_case_with_only_check_env(config):
    result = anyio.run(lambda: start_case(Store(config.state_dir), config.default_repo, python=sys.executable))
    assert result.ok
    report = build_report(Store(config.state_dir), result.case_id)
    assert report.notes == []
    # steps 9 and 10 (root cause, fix) are the agent's: the progress counts the 11 the server checks
    assert report.complete == 1 and report.total == 11 and report.agent_steps.startswith("9 (") and " and 10 (" \
        in report.agent_steps
    assert [s.status for s in report.steps][:3] == ["done", "pending", "pending"]
    md = render_markdown(report)
    assert "No runs yet." in md and "Not classified yet." in md and "None." in md and "Not celebrated yet." in md
    assert f"1 of 11 steps the server checks complete; steps {report.agent_steps} are the agent's own" in md
    page = render_html(report)
    assert result.case_id in page and "No runs yet." in page and "<script" not in page.lower()


def raw_evidence(store, case_id, step, ok, summary, data, run_id=None):
    """An evidence row as an older version (or a damaged store) may have left it: raw JSON, unchecked."""
    with store.transaction() as conn:
        conn.execute("INSERT INTO evidence(case_id, step, ok, tree_hash, run_id, summary, data_json, created_at) "
                     "VALUES (?, ?, ?, NULL, ?, ?, ?, ?)", (case_id, step, int(ok), run_id, summary, json.dumps(data),
                                                            time.time()))


def test_report_survives_malformed_evidence(workspace):
    store = Store(workspace / "state")
    case = store.create_case(str(workspace / "gone"), "/no/python", {"torch": ["not", "a", "dict"]})
    cid = case.case_id
    raw_evidence(store, cid, "environment", True, "torch imports", {})
    run = store.start_run(cid, "run_with_logs", "not a list",  # type: ignore[arg-type]
                          "/x", {"K": HOSTILE}, "/no/out", "/no/err", 1)
    store.finish_run(run, "finished", None, "SIGSEGV", {"failed": True, "signature": HOSTILE, "nested": {"a": 1}})
    hung = store.start_run(cid, "run_with_logs", ["python", "x.py"], "/x", {}, "/no/out", "/no/err", 1)
    store.finish_run(hung, "timeout", None, "SIGKILL")
    store.start_run(cid, "localize", ["py", "launcher.py", "--backend", "inductor", "--dynamic", "true", "--", "r.py"],
                    "/x", {}, "/no/out", "/no/err", 1)
    raw_evidence(store, cid, "reproduce", True, HOSTILE, {"category": 7, "run_ids": "nope"}, run_id=run)
    raw_evidence(store, cid, "classify", True, "graph_break (confidence 0.90)",
                       {"secondary": "not a list", "evidence": [{"line_no": "x", "text": HOSTILE}, 3]})
    raw_evidence(store, cid, "reduce", True, "source reduction 40 -> 8 lines",
                       {"before": {"lines": 40}, "after": {"lines": 8}, "mode": "source",
                        "progress": [{"t": 2, "size": 30}, {"t": 5.5, "size": 12}, "junk", {"t": float("nan")}]})
    raw_evidence(store, cid, "reduce", False, "fx", {"before": "?", "after": None})
    raw_evidence(store, cid, "test", True, "registered", {"test_file": None, "message": ["x"]})
    raw_evidence(store, cid, "main_check", True, "fails on main", {"ref": HOSTILE, "commit": 12345})
    raw_evidence(store, cid, "verify", False, "1 failed", {"counts": "bad", "tests": [1, {"node_id": HOSTILE}],
                                                          "problems": None})
    raw_evidence(store, cid, "review", True, "clean", {"files": [None, {"path": "a.py", "added": "x"}], "findings": 5})
    raw_evidence(store, cid, "artifacts", True, "2 graphs", {"index": 3})
    raw_evidence(store, cid, "celebrate", True, "done", {"root_cause": HOSTILE})
    raw_evidence(store, cid, "not_a_step", True, "junk", {})
    store.add_waiver(cid, "logs", HOSTILE)
    store.set_kv(f"localize:{cid}", json.dumps({"first_failing": "inductor", "layer": HOSTILE}))

    report = build_report(store, cid, tree_hash=lambda: "h")
    assert report.notes == [], report.notes
    assert report.classification is not None and report.classification.category == "graph_break"
    assert report.localization is not None and report.localization.rows[0].backend == "inductor"
    assert report.localization.rows[0].dynamic == "True"
    kinds = {r.run_id: r.kind for r in report.runs}
    assert kinds[run] == "signal" and kinds[hung] == "timeout" and "running" in kinds.values()
    first = report.minify[0]
    assert [p[1] for p in first.points] == [40, 30, 12, 8] and "<path" in first.chart
    assert report.minify[1].chart == ""
    page = render_html(report)
    assert "<script" not in page.lower() and "<img" not in page.lower()
    assert page.count("&lt;script&gt;") >= 5
    md = render_markdown(report)
    assert re.search(r"(?<!\\)<", _outside_code(md)) is None


def test_report_when_the_repository_is_gone(workspace):
    store = Store(workspace / "state")
    case = store.create_case(str(workspace / "missing-repo"), sys.executable, {})
    store.add_evidence(case.case_id, "environment", True, "ok")
    store.add_evidence(case.case_id, "verify", True, "1 passed", tree_hash="git:abc")
    report = build_report(store, case.case_id)
    assert report.steps[10].status == "stale"
    assert render_markdown(report)


# --------------------------------------------------------------------------------------------
# CLI


def test_cli_report_markdown_and_html(real_case, tmp_path, capsys):
    config, case_id = real_case["config"], real_case["case_id"]
    base = ["--state-dir", str(config.state_dir), "--repo", str(config.default_repo)]
    assert main(["report", case_id, *base]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"# Case report: `{case_id}`") and "## Waivers" in out
    target = tmp_path / "r.html"
    assert main(["report", case_id, "--html", str(target), *base]) == 0
    assert str(target) in capsys.readouterr().out
    assert target.read_text().startswith("<!DOCTYPE html>")
    assert main(["report", "case-unknown", *base]) == 2
    assert "unknown case_id" in capsys.readouterr().err
    assert main(["report", case_id, "--state-dir", str(tmp_path / "empty")]) == 2
    assert "no case store" in capsys.readouterr().err


# --------------------------------------------------------------------------------------------
# triage's progress line


def _triage_argv(tmp_path: Path) -> list[str]:
    repo = tmp_path / "repo"
    repo.mkdir(exist_ok=True)
    script = repo / "repro.py"
    script.write_text(FAILING_SCRIPT)
    return [sys.executable, "-m", "pt2_bug_basher", "triage", str(script), "--python", sys.executable,
            "--timeout", "120", "--state-dir", str(tmp_path / "state"), "--repo", str(repo)]


def test_triage_prints_no_progress_on_a_pipe(tmp_path):
    done = subprocess.run(_triage_argv(tmp_path), capture_output=True, text=True, timeout=300,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "== Environment" in done.stdout
    assert done.stderr == "", done.stderr[-2000:]


def test_triage_shows_a_live_progress_line_on_a_terminal(tmp_path):
    master, slave = pty.openpty()
    proc = subprocess.Popen(_triage_argv(tmp_path), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=slave, close_fds=True)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    stdout, _ = proc.communicate(timeout=300)
    os.close(master)
    terminal = b"".join(chunks).decode("utf-8", errors="replace")
    assert proc.returncode == 0, terminal[-3000:]
    assert b"== Environment" in stdout
    assert "\r\x1b[2K" in terminal
    assert re.search("[⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏] checking the environment", terminal)
    assert re.search(r"✓ checking the environment \(\d+\.\ds\)", terminal)
    assert re.search(r"✓ reproducing: running repro\.py twice \(\d+\.\ds\)", terminal)
    assert re.search(r"✓ rerunning with TORCH_LOGS=\S+ \(\d+\.\ds\)", terminal)
    # the final state: every phase ticked, nothing left spinning on the line
    assert terminal.rstrip().splitlines()[-1].lstrip("\r\x1b[2K").startswith("✓")
