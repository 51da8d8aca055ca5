"""What the method prescribes per failure category, read from the category playbooks in prompts/."""

from __future__ import annotations

from pydantic import BaseModel, Field

from pt2_bug_basher.content import category_playbook
from pt2_bug_basher.domain.errors import NotFound


class CategoryGuide(BaseModel):
    category: str
    log_preset: str | None = Field(None, description="the TORCH_LOGS spec to collect for this category")
    minify_level: int | None = Field(None, description="TORCHDYNAMO_REPRO_LEVEL for the FX minifier, if it applies")
    config_knobs: list[str] = Field(default_factory=list)
    source_files: list[str] = Field(default_factory=list)
    test_files: list[str] = Field(default_factory=list)
    playbook: str = Field(description="prompt name that returns the whole playbook")


def guide(category: str) -> CategoryGuide:
    try:
        meta, _ = category_playbook(category)
    except NotFound:
        meta = {}
    level = meta.get("minify_level")
    return CategoryGuide(
        category=category,
        log_preset=str(meta["log_preset"]) if meta.get("log_preset") else None,
        minify_level=int(level) if isinstance(level, int) or (isinstance(level, str) and level.isdigit()) else None,
        config_knobs=[str(k) for k in meta.get("config_knobs", []) or []],
        source_files=[str(k) for k in meta.get("source_files", []) or []],
        test_files=[str(k) for k in meta.get("test_files", []) or []],
        playbook=f'prompt "playbook" with category="{category}"',
    )


def diagnostic_call(category: str, case_id: str | None, script: str | None) -> str:
    """The exact next diagnostic tool call for a category."""
    cid = case_id or "<case_id>"
    repro = script or "<repro.py>"
    g = guide(category)
    if category == "accuracy":
        return f'minify(case_id="{cid}", script="{repro}", mode="fx", after="aot")  # TORCHDYNAMO_REPRO_LEVEL=4'
    if category in ("backend_compiler_failed", "triton"):
        return f'localize(case_id="{cid}", script="{repro}")  # then minify(mode="fx")'
    if category == "runtime_crash":
        return (f'run_with_logs(case_id="{cid}", script="{repro}", logs="runtime_crash", '
                'env={"PYTORCH_NO_CUDA_MEMORY_CACHING": "1", "CUDA_LAUNCH_BLOCKING": "1"})')
    preset = category if g.log_preset else "dynamo_internal"
    return f'run_with_logs(case_id="{cid}", script="{repro}", logs="{preset}")'
