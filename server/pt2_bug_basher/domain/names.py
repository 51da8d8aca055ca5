"""The names the server exposes: tools and workflow steps."""

from __future__ import annotations

from enum import Enum


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
