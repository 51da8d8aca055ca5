"""The Claude Code plugin, the project .mcp.json and the skill against Claude Code's documented format."""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

import anyio
import yaml
from conftest import REPO_ROOT
from mcp import Client, StdioServerParameters

# Frontmatter fields Claude Code and the Agent Skills format document for SKILL.md.
SKILL_FIELDS = {"name", "description", "license", "allowed-tools", "metadata", "compatibility", "model",
                "argument-hint", "disable-model-invocation", "user-invocable"}
NAME = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")


def frontmatter(path):
    text = path.read_text()
    assert text.startswith("---\n"), f"{path} must start with YAML frontmatter"
    end = text.index("\n---", 4)
    return yaml.safe_load(text[4:end]), text[end + 4:]


def test_skill_frontmatter_follows_the_format():
    meta, body = frontmatter(REPO_ROOT / "skill" / "SKILL.md")
    assert set(meta) <= SKILL_FIELDS, set(meta) - SKILL_FIELDS
    assert meta["name"] == "pt2-bug-basher" and NAME.match(meta["name"]) and len(meta["name"]) <= 64
    assert 50 < len(meta["description"]) < 1024
    assert "<" not in meta["description"] and ">" not in meta["description"]
    assert body.strip()


def test_plugin_manifest_and_discovered_skill():
    manifest = json.loads((REPO_ROOT / ".claude-plugin" / "plugin.json").read_text())
    assert NAME.match(manifest["name"])
    assert manifest["name"] == frontmatter(REPO_ROOT / "skill" / "SKILL.md")[0]["name"]
    from pt2_bug_basher import __version__

    assert manifest["version"] == __version__
    assert manifest["description"]
    # Skills are discovered as skills/<name>/SKILL.md at the plugin root; the directory name is the skill name.
    discovered = sorted(p.parent.name for p in (REPO_ROOT / "skills").glob("*/SKILL.md"))
    assert discovered == ["pt2-bug-basher"]
    discovered_text = (REPO_ROOT / "skills" / "pt2-bug-basher" / "SKILL.md").read_text()
    assert discovered_text == (REPO_ROOT / "skill" / "SKILL.md").read_text()
    # Component folders live at the plugin root, never inside .claude-plugin/.
    assert sorted(p.name for p in (REPO_ROOT / ".claude-plugin").iterdir()) == ["plugin.json"]
    servers = manifest["mcpServers"]
    assert servers["pt2-bug-basher"] == {"command": "pt2-bug-basher", "args": ["serve"]}


def test_project_mcp_json_starts_the_server(tmp_path):
    config = json.loads((REPO_ROOT / ".mcp.json").read_text())
    entry = config["mcpServers"]["pt2-bug-basher"]
    command = shutil.which(entry["command"]) or str(Path(sys.executable).parent / entry["command"])

    async def listed():
        params = StdioServerParameters(command=command, args=[*entry["args"], "--state-dir", str(tmp_path / "s")],
                                       cwd=str(tmp_path))
        async with Client(params) as client:
            return {t.name for t in (await client.list_tools()).tools}

    assert "check_env" in anyio.run(listed)


def test_readme_tool_reference_matches_tools_list():
    import subprocess

    out = subprocess.run([sys.executable, "-m", "pt2_bug_basher.mcp_server.readme", "--check"], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    readme = (REPO_ROOT / "README.md").read_text()
    from pt2_bug_basher.mcp_server.tools import registered_modules

    for name in registered_modules():
        assert f"| `{name}` |" in readme
