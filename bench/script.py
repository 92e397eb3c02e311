"""The load server's script: what the "model" answers to each request, decided by the request.

Every system under test gets the same conversation, whatever its framework:

* the **main agent**'s user prompt is ``bench-main run=… n=N …``. Its first request is
  answered with N calls of its delegation tool (found in the request's tool list by name,
  ``task`` unless the prompt says ``delegate=…``), each carrying a sub-agent prompt
  ``bench-job run=… i=… …``; its next request, with N tool results, gets a final answer.
* a **sub-agent**'s user prompt is such a ``bench-job`` line. It is told to call its tool
  ``turns - 1`` times (one call per turn), then it gets a final answer of ``answer``
  tokens. With ``tool=files`` (the analysis workload) the calls are file-tool calls
  that ``bench.analysis.call`` picks from the conversation itself.

Nothing is remembered between requests, so any number of clients, in any process, with
any retry behaviour, see the same script. The run id ties the requests of one run
together for the server's records.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from bench import analysis

MAIN = "bench-main"
JOB = "bench-job"

#: The tool a sub-agent is told to call: its one argument is named ``arg``.
TOOL_ARG = "arg"


@dataclasses.dataclass(frozen=True, slots=True)
class Spec:
    """One workload's conversation shape. Encoded into prompts as ``key=value`` words."""

    run: str
    n: int = 1  # fan-out: the main agent's task calls
    turns: int = 3  # model turns of each sub-agent (turns - 1 tool calls, then an answer)
    tool: str = "probe"  # the sub-agent's tool
    lat: float = -1.0  # ms before a reply starts; < 0: the server's default
    tps: float = -1.0  # tokens (deltas) per second after that; 0: all at once; < 0: default
    answer: int = 4  # tokens (deltas) of a sub-agent's final answer
    delegate: str = "task"  # the main agent's delegation tool
    hold: int = 0  # 1: no sub-agent gets its first reply before all n have asked for one
    # The server's own limits for this run (0: none): K requests in flight, R per second;
    # beyond them it answers 429 with Retry-After, as a provider does.
    rl_k: int = 0
    rl_rps: float = 0.0
    # 1: the messages workload — the main agent starts the sub-agents in the background by
    # name, then messages each while its ``hold`` tool runs (agentcell's send_message).
    msg: int = 0
    i: int = -1  # which sub-agent (job prompts only)

    def prompt(self, kind: str = MAIN) -> str:
        words = [kind]
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if field.name == "i" and value < 0:
                continue
            text = f"{value:g}" if isinstance(value, float) else str(value)
            words.append(f"{field.name}={text}")
        return " ".join(words)

    def job(self, i: int) -> Spec:
        return dataclasses.replace(self, i=i)

    @classmethod
    def parse(cls, text: str) -> tuple[str, Spec] | None:
        """(kind, spec) from a prompt, or None when it is not a bench prompt."""
        words = text.split()
        if not words or words[0] not in (MAIN, JOB):
            return None
        types = {f.name: f.type for f in dataclasses.fields(cls)}
        values: dict[str, Any] = {}
        for word in words[1:]:
            key, sep, raw = word.partition("=")
            if not sep or key not in types:
                continue
            kind = types[key]
            values[key] = int(raw) if kind == "int" else float(raw) if kind == "float" else raw
        if "run" not in values:
            return None
        return words[0], cls(**values)


@dataclasses.dataclass(slots=True)
class Reply:
    """One answer: text deltas (one "token" each), then tool calls ``(id, name, json)``."""

    deltas: list[str]
    calls: list[tuple[str, str, str]]
    role: str  # "main" or the sub-agent's index, for the server's records
    turn: int  # how many tool results the request carried
    spec: Spec


class ScriptError(Exception):
    """The request does not follow the script (answered with HTTP 400)."""


def respond(body: dict[str, Any]) -> Reply:
    messages = body.get("messages") or []
    parsed = Spec.parse(_first_user_text(messages))
    if parsed is None:
        raise ScriptError("not a bench conversation: the first user message is no bench prompt")
    kind, spec = parsed
    turn = sum(1 for m in messages if isinstance(m, dict) and m.get("role") == "tool")
    if kind == MAIN:
        return _main(body, spec, turn)
    if spec.msg:  # hold (200 ms) again and again until its message came, then answer
        if mail_of(body)[0]:
            return Reply(_answer(spec.answer, spec.i), [], str(spec.i), turn, spec)
        args = json.dumps({TOOL_ARG: f"{spec.run}/{spec.i}/{turn}"})
        return Reply(
            [], [(f"call_{spec.run}_{spec.i}_{turn}", "hold", args)], str(spec.i), turn, spec
        )
    if turn < spec.turns - 1:
        call_id = f"call_{spec.run}_{spec.i}_{turn}"
        if spec.tool == analysis.FILES:  # the analysis workload: file tools over a tree
            name, args = analysis.arguments(spec.i, turn, messages)
        elif spec.tool == MCP:  # the mcp workload: the shared servers' echo, in turn
            name, args = _mcp_call(body, spec, turn)
        else:
            name, args = spec.tool, json.dumps({TOOL_ARG: f"{spec.run}/{spec.i}/{turn}"})
        return Reply([], [(call_id, name, args)], str(spec.i), turn, spec)
    return Reply(_answer(spec.answer, spec.i), [], str(spec.i), turn, spec)


#: The mcp workload's tool: each MCP server's ``echo`` the sub-agent is offered, one after
#: the other; where it is offered none (the workload without servers), ``probe``.
MCP = "mcp"


def _mcp_call(body: dict[str, Any], spec: Spec, turn: int) -> tuple[str, str]:
    offered = sorted(
        name
        for tool in body.get("tools") or []
        if (name := (tool.get("function") or {}).get("name", "")).startswith("mcp__")
    )
    text = f"{spec.run}/{spec.i}/{turn}"
    if not offered:
        return "probe", json.dumps({TOOL_ARG: text})
    return offered[turn % len(offered)], json.dumps({"text": text})


#: What a message of the messages workload says (the envelope around it is agentcell's).
MESSAGE = "bench-msg"


def _main(body: dict[str, Any], spec: Spec, turn: int) -> Reply:
    if spec.msg and turn == spec.n:  # its sub-agents started: message them all at once
        everyone = json.dumps({"to": "*", "message": f"{MESSAGE} run={spec.run}"})
        return Reply([], [(f"call_{spec.run}_msg", "send_message", everyone)], "main", turn, spec)
    if turn:
        return Reply([f"All {turn} sub-agents reported."], [], "main", turn, spec)
    schema = _tool_schema(body, spec.delegate)
    calls = []
    for i in range(spec.n):
        args = _fill(schema, spec.job(i).prompt(JOB))
        if spec.msg:
            args.update(name=f"w{i}", background=True)
        calls.append((f"call_{spec.run}_main_{i}", spec.delegate, json.dumps(args)))
    return Reply(["Delegating."], calls, "main", turn, spec)


def _first_user_text(messages: list[Any]) -> str:
    for message in messages:
        if isinstance(message, dict) and message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, str):
                return content
            if isinstance(content, list):  # content parts: [{"type": "text", "text": ...}]
                return " ".join(
                    str(p.get("text", "")) for p in content if isinstance(p, dict)
                ).strip()
    return ""


def _tool_schema(body: dict[str, Any], name: str) -> dict[str, Any]:
    for tool in body.get("tools") or []:
        function = tool.get("function") or {}
        if function.get("name") == name:
            return function.get("parameters") or {}
    names = [(t.get("function") or {}).get("name") for t in body.get("tools") or []]
    raise ScriptError(f"the main agent has no delegation tool {name!r}; its tools: {names}")


def _fill(schema: dict[str, Any], job_prompt: str) -> dict[str, Any]:
    """Arguments for whatever the delegation tool asks: the job prompt in every text field.

    agentcell's ``task`` wants {subagent_type, prompt}, deepagents' {description,
    subagent_type}, openai-agents' ``as_tool`` {input}, our pydantic-ai tool {prompt}.
    """
    args: dict[str, Any] = {}
    properties = schema.get("properties") or {}
    for key in schema.get("required") or list(properties):
        kind = (properties.get(key) or {}).get("type")
        if key == "subagent_type":
            args[key] = "worker"
        elif kind == "integer":
            args[key] = 1
        elif kind == "boolean":
            args[key] = False
        else:
            args[key] = job_prompt
    return args


def _answer(tokens: int, i: int) -> list[str]:
    """``tokens`` deltas; the first says who answers (4 characters per later token)."""
    return [f"job {i} done."] + [" tok" for _ in range(max(0, tokens - 1))]


def mail_of(body: dict[str, Any]) -> tuple[bool, float]:
    """For the messages workload: does this request carry a message envelope after its
    last assistant message, and when did its ``hold`` tool end (its result says, on the
    monotonic clock every process of the machine shares; 0.0 when it has none)?"""
    messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
    last = max((i for i, m in enumerate(messages) if m.get("role") == "assistant"), default=-1)
    new = messages[last + 1 :]
    carried = any(MESSAGE in str(m.get("content", "")) for m in new if m.get("role") == "user")
    ended = 0.0
    for message in new:
        text = str(message.get("content", "")) if message.get("role") == "tool" else ""
        if text.startswith(HELD):
            ended = float(text.removeprefix(HELD).split()[0])
    return carried, ended


#: How the ``hold`` tool's result begins: the monotonic time it ended follows.
HELD = "held until "
