"""What an event loop's tasks wait on: each task with its chain of awaits, for a run that stopped making progress."""

from __future__ import annotations

import asyncio


def task_chains(loop: asyncio.AbstractEventLoop | None = None) -> list[str]:
    """Lines naming every task of `loop` (default: the running one), each followed by the frames it awaits
    through, outermost first (a task's own stack stops at anyio's wrapper)."""
    lines = []
    for task in list(asyncio.all_tasks(loop)):
        lines.append(f"-- {task.get_name()}")
        awaited: object = task.get_coro()
        while awaited is not None:
            frame = getattr(awaited, "cr_frame", None) or getattr(awaited, "gi_frame", None)
            lines.append(f"   {frame.f_code.co_filename}:{frame.f_lineno} {frame.f_code.co_name}" if frame
                         else f"   {awaited!r}")
            awaited = getattr(awaited, "cr_await", None) or getattr(awaited, "gi_yieldfrom", None)
    return lines
