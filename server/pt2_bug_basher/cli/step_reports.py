"""Readable reports of one step's result, for the `localize`, `minify`, `artifacts` and `classify` commands."""

from __future__ import annotations

from typing import Any


def format_step_result(command: str, result: Any) -> str:
    lines = {"localize": _localize, "minify": _minify, "artifacts": _artifacts, "classify": _classify}[command](result)
    case_id = getattr(result, "case_id", None)
    if case_id:
        lines.append(f"\nCase      : {case_id}")
    lines.append(f"Next      : {result.next_step}")
    return "\n".join(lines)


def _localize(result: Any) -> list[str]:
    out = [f"== Backend ladder for {result.script}", f"{'backend':<28} {'dynamic':<8} {'outcome':<20} seconds"]
    for row in result.table:
        out.append(f"{row.backend:<28} {row.dynamic:<8} {row.outcome:<20} {row.seconds:7.1f}")
    out.append(f"\nFirst failing : {result.first_failing or 'none'}")
    out.append(f"Layer         : {result.layer}")
    out.append(f"Meaning       : {result.meaning}")
    if result.dynamic_shapes:
        out.append(f"Dynamic       : {result.dynamic_shapes}")
    out.append(f"Compared by   : {result.comparison}")
    out.append(f"Reduce with   : {result.minifier}")
    out += [f"Note          : {note}" for note in result.notes]
    return out


def _minify(result: Any) -> list[str]:
    out = [f"== Minify ({result.mode}: {result.why_mode})"]
    sizes = ", ".join(f"{unit} {result.before.get(unit)} -> {result.after.get(unit)}" for unit in result.after)
    out.append(f"Sizes     : {sizes or 'unchanged'}")
    out.append(f"Confirmed : {'yes' if result.confirmed else 'no'} ({result.comparison})")
    if result.minimized_path:
        out.append(f"Written   : {result.minimized_path}")
    out.append(f"Seconds   : {result.seconds:.0f}" + (" (the budget ran out)" if result.budget_exhausted else ""))
    out += [f"Note      : {note}" for note in result.notes]
    return out


def _artifacts(result: Any) -> list[str]:
    out = [f"== TORCH_COMPILE_DEBUG of {result.script} ({result.exit})",
           f"Graphs    : {result.graph_count}, kernels {result.kernel_count}, files {result.files_total}",
           f"Index     : {result.index}"]
    for graph in result.graphs:
        ops = ", ".join(f"{op} x{n}" for op, n in list(graph.ops.items())[:6])
        out.append(f"  {graph.name} ({graph.role}): {graph.node_count} nodes, {graph.kernel_count} kernels; {ops}")
    failure = result.failure
    if failure is not None:
        where = ", ".join(filter(None, [failure.graph and f"graph {failure.graph}",
                                        failure.kernel and f"kernel {failure.kernel}"]))
        kind = failure.exception_type or "failure"
        out.append(f"Failure   : {kind} in {where or 'no generated code'} ({failure.how})")
        if failure.code_line:
            out.append(f"  line    : {failure.code_line}")
    out += [f"Note      : {note}" for note in result.notes]
    return out


def _classify(result: Any) -> list[str]:
    out = [f"Category  : {result.category}" + (f" (also {', '.join(result.secondary)})" if result.secondary else "")
           + f", confidence {result.confidence:.2f}"]
    if result.exception_type:
        out.append(f"Exception : {result.exception_type}")
    if result.compile_mode or result.phase:
        out.append(f"Where     : {result.compile_mode or '?'}, {result.phase or '?'}")
    out += [f"  line {e.line_no}: {e.text}" for e in result.evidence]
    out.append(f"Diagnostic: {result.diagnostic}")
    return out
