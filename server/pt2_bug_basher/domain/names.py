"""The names the server exposes: tools and workflow steps."""

from __future__ import annotations

from enum import Enum
from typing import Literal, get_args


class ToolName(str, Enum):
    check_env = "check_env"
    get_workflow = "get_workflow"
    waive_step = "waive_step"
    run_with_logs = "run_with_logs"
    classify_error = "classify_error"
    localize = "localize"
    minify = "minify"
    register_test = "register_test"
    make_worktree = "make_worktree"
    collect_debug_artifacts = "collect_debug_artifacts"
    run_tests = "run_tests"
    review_changes = "review_changes"
    celebrate = "celebrate"


class Step(str, Enum):
    environment = "environment"
    reproduce = "reproduce"
    reduce = "reduce"
    test = "test"
    main_check = "main_check"
    logs = "logs"
    classify = "classify"
    artifacts = "artifacts"
    root_cause = "root_cause"
    fix = "fix"
    verify = "verify"
    review = "review"
    celebrate = "celebrate"


Category = Literal["graph_break", "backend_compiler_failed", "recompile", "accuracy", "dynamo_internal",
                   "runtime_crash", "triton", "dynamic_shapes", "export", "user_error", "unknown"]
CATEGORIES: tuple[Category, ...] = get_args(Category)
USER_ERROR: Category = "user_error"
"""never read from text: the verdict gives it when the script fails the same way with compilation off"""

RungOutcome = Literal["same failure", "different failure", "passes", "timeout", "not compiled", "skipped"]
"""a ladder rung against the case's failure ("not compiled": no torch.compile call of the script's to swap;
"skipped": a backend above the lowest one that fails the case's way)"""

StepState = Literal["done", "waived", "stale", "failed", "stopped", "pending", "agent"]
CLOSED: frozenset[StepState] = frozenset({"done", "waived"})
"""the states in which a step needs nothing more"""
