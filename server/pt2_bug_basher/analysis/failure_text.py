"""A failure message as text fit for a summary: the exception's first meaningful line in whole
sentences, with PyTorch's rerun hint taken out (and kept apart only when its command is complete).

Messages reach here as pytest recorded them, often cut at a fixed length: PyTorch's TestCase
appends "To execute this test, run the following from the base repo dir:", the command on the
next line, and a note on how to suppress the hint, so a cut message tends to end mid-hint.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

RERUN_HINT = "To execute this test, run the following from the base repo dir:"
HEADLINE_CHARS = 300
_NOISE = re.compile(r"^(?:Traceback \(most recent call last\):|File \"|During handling of the above exception"
                    r"|The above exception was the direct cause)")
_SENTENCE_END = re.compile(r"[.!?](?=\s)")
_MIN_SENTENCE_CHARS = 20


@dataclass(frozen=True)
class FailureText:
    headline: str
    """One line: the exception and its first meaningful line, whole sentences only."""
    rerun: str | None
    """The command PyTorch's hint gives to run the test alone, when the message holds all of it."""


def summarise_failure(message: str | None, exception_type: str | None = None,
                      limit: int = HEADLINE_CHARS) -> FailureText:
    text = (message or "").replace("\r\n", "\n")
    body, rerun = _split_hint(text)
    headline = _first_meaningful(body)
    if exception_type and exception_type not in headline.split(":", 1)[0]:
        headline = f"{exception_type}: {headline}" if headline else exception_type
    return FailureText(headline=whole_sentences(headline or "a failure (no message recorded)", limit),
                       rerun=rerun)


def whole_sentences(line: str, limit: int = HEADLINE_CHARS) -> str:
    """`line` if it fits; else its sentences that fit, else its words that fit followed by an ellipsis."""
    if len(line) <= limit:
        return line
    ends = [m.end() for m in _SENTENCE_END.finditer(line, 0, limit + 1) if m.end() >= _MIN_SENTENCE_CHARS]
    if ends:
        return line[:ends[-1]]
    cut = line.rfind(" ", 0, limit)
    return (line[:cut] if cut > _MIN_SENTENCE_CHARS else line[:limit - 1]).rstrip(" ,;:") + "…"


def _split_hint(text: str) -> tuple[str, str | None]:
    """(the message without the rerun hint, the hint's command if the message holds it whole)."""
    at = text.find(RERUN_HINT[:40])
    if at == -1:
        lines = text.rstrip().splitlines()
        tail = lines[-1].strip() if lines else ""
        if len(tail) >= 8 and RERUN_HINT.startswith(tail):  # cut inside the hint's first line
            return "\n".join(lines[:-1]), None
        return text, None
    hint = text[at:]
    after = hint.split("\n", 1)[1] if "\n" in hint else ""
    command = None
    if hint.startswith(RERUN_HINT) and "\n" in after:  # the command line ends before the message does
        line = after.split("\n", 1)[0].strip()
        if "python" in line and ".py" in line:
            command = line
    return text[:at], command


def _first_meaningful(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines()]
    meaningful = [ln for ln in lines if ln and not _NOISE.match(ln) and set(ln) != {"^"}]
    if not meaningful:
        return ""
    head = meaningful[0]
    if head.endswith(":") and len(meaningful) > 1:  # "backend='inductor' raised:" says nothing alone
        head = f"{head} {meaningful[1]}"
    return " ".join(head.split())
