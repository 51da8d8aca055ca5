"""Tool calls written in text (next_step, diagnostic, ...): find them, and check that the server takes them.

A call is `tool(name=value, ...)`: keyword arguments only, each value a Python or JSON literal.
`<...>` marks a slot the agent fills (`script="<repro.py>"`, or unquoted `logs=<preset>`); a slot
is accepted only where the tool's input schema takes a string. Everything else is checked against
the input schemas the server lists in tools/list, plus the server's own checks of a few values
(a TORCH_LOGS spec or preset, the minify mode).
"""

from __future__ import annotations

import ast
import difflib
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from jsonschema import Draft202012Validator

# Fields of a structured tool result whose text names calls to make.
CALL_FIELDS = frozenset({"next_step", "next_steps", "diagnostic", "minifier", "tool_call", "stopped", "ask_user"})

_CALL_START = re.compile(r"(?<![\w.])(?P<name>[A-Za-z_]\w*)\(")
_SLOT = re.compile(r"<[^<>\n]*>")
_JSON_WORDS = {"true": True, "false": False, "null": None, "True": True, "False": False, "None": None}
_CLOSE = {"(": ")", "[": "]", "{": "}"}


class CallError(ValueError):
    """The text is not a call the server takes; the message says why."""


@dataclass(frozen=True)
class Call:
    tool: str
    arguments: dict[str, Any]
    source: str


@dataclass(frozen=True)
class Problem:
    call: str
    message: str

    def __str__(self) -> str:
        return f"{self.call}: {self.message}"


class _Slot(str):
    """A `<...>` placeholder standing for a value the agent fills in."""


def _is_slot(value: object) -> bool:
    return isinstance(value, str) and (isinstance(value, _Slot) or _SLOT.search(value) is not None)


# --------------------------------------------------------------------------------------------
# Finding calls in text


def _call_end(text: str, open_at: int) -> int | None:
    """Index just past the parenthesis closing the one at open_at (strings and nesting respected)."""
    stack = [")"]
    quote: str | None = None
    i = open_at + 1
    while i < len(text):
        ch = text[i]
        if quote is not None:
            if ch == "\\":
                i += 2
                continue
            if ch == quote:
                quote = None
            elif ch == "\n":
                return None
        elif ch in "\"'":
            quote = ch
        elif ch in _CLOSE:
            stack.append(_CLOSE[ch])
        elif ch in ")]}":
            if ch != stack.pop():
                return None
            if not stack:
                return i + 1
        i += 1
    return None


def find_calls(text: str, tools: Iterable[str]) -> Iterator[str]:
    """The call-shaped snippets in text: a tool's name followed by (...), or any name(keyword=...)."""
    known = set(tools)
    pos = 0
    while True:
        match = _CALL_START.search(text, pos)
        if match is None:
            return
        name = match.group("name")
        end = _call_end(text, match.end() - 1)
        if end is None:
            if name in known:
                yield text[match.start():match.start() + 200]
            pos = match.end()
            continue
        snippet = text[match.start():end]
        if name in known or re.match(r"\w+\(\s*[A-Za-z_]\w*\s*=(?!=)", snippet):
            yield snippet
            pos = end
        else:
            pos = match.end()


# --------------------------------------------------------------------------------------------
# Parsing one call


def _quote_slots(snippet: str) -> str:
    """Unquoted `<...>` slots become string literals, so the snippet parses as Python."""
    out: list[str] = []
    quote: str | None = None
    i = 0
    while i < len(snippet):
        ch = snippet[i]
        if quote is not None:
            out.append(ch)
            if ch == "\\" and i + 1 < len(snippet):
                out.append(snippet[i + 1])
                i += 2
                continue
            if ch == quote:
                quote = None
        elif ch in "\"'":
            quote = ch
            out.append(ch)
        elif ch == "<":
            slot = _SLOT.match(snippet, i)
            if slot is None:
                out.append(ch)
            else:
                out.append(repr(slot.group()))
                i = slot.end()
                continue
        else:
            out.append(ch)
        i += 1
    return "".join(out)


def _literal(node: ast.expr, where: str) -> Any:
    if isinstance(node, ast.Constant) and (node.value is None or isinstance(node.value, (str, int, float, bool))):
        return _Slot(node.value) if isinstance(node.value, str) and _SLOT.fullmatch(node.value) else node.value
    if isinstance(node, ast.Name) and node.id in _JSON_WORDS:
        return _JSON_WORDS[node.id]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant) \
            and isinstance(node.operand.value, (int, float)) and not isinstance(node.operand.value, bool):
        return -node.operand.value
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_literal(item, where) for item in node.elts]
    if isinstance(node, ast.Dict):
        out = {}
        for key, value in zip(node.keys, node.values, strict=True):
            if key is None or not isinstance(key, ast.Constant) or not isinstance(key.value, str):
                raise CallError(f"{where}: object keys must be strings")
            out[key.value] = _literal(value, where)
        return out
    if isinstance(node, ast.Constant) and node.value is Ellipsis:
        raise CallError(f"{where} is `...`: write the value (a \"<placeholder>\" for what the agent fills in)")
    raise CallError(f"{where} is {ast.unparse(node)!r}, not a literal value: quote strings, "
                    "use \"<placeholder>\" for a value to fill in")


def parse_call(snippet: str) -> Call:
    """`tool(a=1, b="x")` -> Call; CallError when it is not a call with literal keyword arguments."""
    try:
        tree = ast.parse(_quote_slots(snippet.strip()), mode="eval")
    except SyntaxError as exc:
        raise CallError(f"does not parse as a call ({exc.msg})") from None
    node = tree.body
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        raise CallError("is not a call of a tool by its name")
    if node.args:
        first = node.args[0]
        if isinstance(first, ast.Constant) and first.value is Ellipsis:
            raise CallError("`...` stands for arguments: write each one as name=value")
        raise CallError(f"has a positional argument ({ast.unparse(first)}): tools take name=value arguments only")
    arguments: dict[str, Any] = {}
    for keyword in node.keywords:
        if keyword.arg is None:
            raise CallError("uses ** : write each argument as name=value")
        arguments[keyword.arg] = _literal(keyword.value, f"argument {keyword.arg}")
    return Call(tool=node.func.id, arguments=arguments, source=snippet)


# --------------------------------------------------------------------------------------------
# Checking a call against the tools' schemas


def _resolve(schema: Mapping[str, Any], root: Mapping[str, Any]) -> Mapping[str, Any]:
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/"):
        target: Any = root
        for part in ref[2:].split("/"):
            target = target[part]
        return target
    return schema


def _takes_string(schema: Mapping[str, Any], root: Mapping[str, Any]) -> bool:
    schema = _resolve(schema, root)
    kind = schema.get("type")
    if kind == "string" or (isinstance(kind, list) and "string" in kind):
        return True
    return any(_takes_string(option, root) for key in ("anyOf", "oneOf") for option in schema.get(key, []))


def _kinds(schema: Mapping[str, Any], root: Mapping[str, Any]) -> str:
    schema = _resolve(schema, root)
    options = [_kinds(option, root) for key in ("anyOf", "oneOf") for option in schema.get(key, [])]
    return " or ".join(options) if options else str(schema.get("type", "a non-string value"))


def _schema_problems(arguments: dict[str, Any], schema: Mapping[str, Any]) -> list[str]:
    problems = []
    for error in Draft202012Validator(schema).iter_errors(arguments):
        where = "/".join(str(p) for p in error.absolute_path) or "arguments"
        if _is_slot(error.instance):
            if _takes_string(error.schema, schema):
                continue  # a slot where a string goes: its constraints apply to the filled-in value
            problems.append(f"{where} is a placeholder, but the tool takes {_kinds(error.schema, schema)} there: "
                            "write the value")
            continue
        problems.append(f"{where}: {error.message}")
    return problems


def _value_problems(tool: str, arguments: dict[str, Any]) -> list[str]:
    """The server's own checks of values the schema only types as strings."""
    problems = []
    logs = arguments.get("logs")
    if tool == "run_with_logs" and isinstance(logs, str) and not _is_slot(logs):
        from pt2_bug_basher.analysis.torch_logs import resolve_logs
        from pt2_bug_basher.domain.errors import InvalidInput

        try:
            resolve_logs(logs, [], [])
        except InvalidInput as exc:
            problems.append(f"logs={logs!r} is refused: {str(exc)[:300]}")
    if tool == "minify":
        for name, allowed in (("mode", ("auto", "fx", "source")), ("after", ("aot", "dynamo"))):
            value = arguments.get(name)
            if isinstance(value, str) and not _is_slot(value) and value not in allowed:
                problems.append(f"{name}={value!r} is refused: one of {', '.join(allowed)}")
    return problems


def check_call(call: Call, schemas: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Why the server would not take this call; empty when it would."""
    schema = schemas.get(call.tool)
    if schema is None:
        close = difflib.get_close_matches(call.tool, list(schemas), n=2)
        return [f"no tool {call.tool!r}" + (f" (did you mean {' or '.join(close)}?)" if close else "")]
    properties = schema.get("properties", {})
    unknown = [name for name in call.arguments if name not in properties]
    problems = [f"{call.tool} takes no argument {name!r}; it takes {', '.join(properties) or 'none'}"
                for name in unknown]
    known = {k: v for k, v in call.arguments.items() if k not in unknown}
    problems += _schema_problems(known, schema)
    problems += _value_problems(call.tool, known)
    return problems


def check_text(text: str, schemas: Mapping[str, Mapping[str, Any]]) -> list[Problem]:
    """Every call in text that the server would not take, with the reasons."""
    out = []
    for snippet in find_calls(text, schemas):
        try:
            call = parse_call(snippet)
        except CallError as exc:
            out.append(Problem(snippet, str(exc)))
            continue
        out += [Problem(snippet, message) for message in check_call(call, schemas)]
    return out


def emitted_texts(result: Any, path: str = "") -> Iterator[tuple[str, str]]:
    """(field path, text) for every call-bearing field of a structured tool result, nested ones too."""
    if isinstance(result, Mapping):
        for key, value in result.items():
            here = f"{path}.{key}" if path else str(key)
            if key in CALL_FIELDS:
                if isinstance(value, str):
                    yield here, value
                elif isinstance(value, list):
                    yield from ((f"{here}[{i}]", v) for i, v in enumerate(value) if isinstance(v, str))
            else:
                yield from emitted_texts(value, here)
    elif isinstance(result, list):
        for i, item in enumerate(result):
            yield from emitted_texts(item, f"{path}[{i}]")


def check_result(tool: str, result: Any, schemas: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """One line per wrong call in a tool's structured result, naming the tool, the field and the call."""
    return [f"{tool} result, field {field}: {problem.call} -> {problem.message}"
            for field, text in emitted_texts(result) for problem in check_text(text, schemas)]


async def input_schemas(server: Any) -> dict[str, dict[str, Any]]:
    """Tool name -> input schema, as the server lists them (an MCPServer, or a connected mcp.Client)."""
    listed = await server.list_tools()
    tools = getattr(listed, "tools", listed)
    return {tool.name: dict(tool.input_schema) for tool in tools}
