"""Anthropic Messages API, streamed.

Request: POST {base}/v1/messages with ``stream: true``; the system prompt is the
top-level ``system`` field, tool calls are ``tool_use`` blocks and their results
``tool_result`` blocks inside a user message. Answer: named SSE events (message_start,
content_block_start/delta/stop, message_delta, message_stop, ping, error).
"""

from __future__ import annotations

import hashlib
import re
from typing import Any, Literal

import msgspec
from agentcell.protocol import (
    AssistantMessage,
    Message,
    SystemMessage,
    ThinkingBlock,
    TokenCount,
    ToolCall,
    ToolMessage,
    Usage,
)
from agentcell.worker.models._anthropic_cache import (
    PROMPT_CACHE_CHOICES,
    PromptCache,
    add_breakpoints,
)
from agentcell.worker.models._base import (
    ModelError,
    ModelErrorKind,
    ModelRequest,
    ModelResponse,
    StopReason,
    ToolCallStart,
)
from agentcell.worker.models._chat_model import HttpChatModel
from agentcell.worker.models._http import HttpOptions, Retry

OFFICIAL_BASE_URL = "https://api.anthropic.com"
API_VERSION = "2023-06-01"
DEFAULT_MAX_TOKENS = 4096  # the output limit when neither the model nor the request sets one

#: Anthropic's server-side web search tool (the version the Messages API documents).
WEB_SEARCH_TOOL = "web_search_20250305"
_STOP = {
    "end_turn": StopReason.END,
    "stop_sequence": StopReason.END,
    "pause_turn": StopReason.END,
    "tool_use": StopReason.TOOL_USE,
    "max_tokens": StopReason.MAX_TOKENS,
    "model_context_window_exceeded": StopReason.MAX_TOKENS,
    "refusal": StopReason.REFUSAL,
}

# error event type → (kind, may another attempt help?)
_ERRORS = {
    "overloaded_error": (ModelErrorKind.SERVER, True),
    "api_error": (ModelErrorKind.SERVER, True),
    "rate_limit_error": (ModelErrorKind.RATE_LIMIT, True),
    "timeout_error": (ModelErrorKind.TIMEOUT, True),
    "invalid_request_error": (ModelErrorKind.BAD_REQUEST, False),
    "request_too_large": (ModelErrorKind.BAD_REQUEST, False),
    "authentication_error": (ModelErrorKind.AUTH, False),
    "permission_error": (ModelErrorKind.AUTH, False),
    "not_found_error": (ModelErrorKind.NOT_FOUND, False),
}


# -- extended thinking: which models, and how much ------------------------------------

ThinkingControl = Literal["budget", "adaptive"]

#: A definition's ``effort`` as ``thinking.budget_tokens`` (the API's floor is 1024).
#: The largest plus ``ANSWER_ROOM`` stays under 32 000, the output limit of Claude Opus 4
#: and 4.1, the smallest among the models that take a budget.
THINKING_BUDGETS = {"minimal": 1024, "low": 4096, "medium": 8192, "high": 16384, "max": 24576}

#: What the answer (text and tool calls) gets on top of the thinking budget: max_tokens
#: counts both, and must be greater than budget_tokens.
ANSWER_ROOM = DEFAULT_MAX_TOKENS

#: ``effort`` as ``output_config.effort`` for the models with adaptive thinking.
_ADAPTIVE_EFFORT = {
    "minimal": "low",
    "low": "low",
    "medium": "medium",
    "high": "high",
    "max": "max",
}

_LEGACY_NAME = re.compile(r"(?:^|[./])claude-3-7-sonnet")
_NAME = re.compile(r"(?:^|[./])claude-([a-z]+)(?:-(\d+)(?:[-.](\d{1,2})(?!\d))?)?")


def thinking_control(model_name: str) -> ThinkingControl | None:
    """How a Claude model takes extended thinking, judged from its name; None: not at all.

    From Anthropic's extended- and adaptive-thinking documentation (platform.claude.com,
    build-with-claude/extended-thinking and /adaptive-thinking, as of 2026):

    * ``"budget"``: ``thinking: {type: enabled, budget_tokens: N}`` — Claude 3.7 Sonnet
      and the Claude 4 models up to 4.5 (Sonnet 4 and 4.5, Opus 4, 4.1 and 4.5, Haiku
      4.5), dated ids and ``-latest`` aliases included;
    * ``"adaptive"``: ``thinking: {type: adaptive}`` with ``output_config.effort`` —
      Opus and Sonnet 4.6 (where budget_tokens is deprecated), 4.7 and later, the 5
      families and Mythos (Opus 4.7 and later answer budget_tokens with a 400);
    * None: Claude 3.5 and older, Claude 3 Opus/Haiku, and names this does not know.

    Bedrock-style ids (``anthropic.claude-…``, ``us.anthropic.claude-…``) are read too.
    """
    if _LEGACY_NAME.search(model_name):
        return "budget"
    match = _NAME.search(model_name)
    if match is None:
        return None
    family, major, minor = match.group(1), match.group(2), match.group(3)
    if family == "mythos":
        return "adaptive"
    if major is None or family not in ("opus", "sonnet", "haiku", "fable"):
        return None
    version = (int(major), int(minor or 0))
    if version >= (4, 6):
        return "adaptive"
    if version >= (4, 0):
        return "budget"
    return None


def thinking_max_tokens(effort: str, limit: int | None) -> int:
    """``max_tokens`` for a thinking request at ``effort``: the thinking budget plus
    ``ANSWER_ROOM``, or ``limit`` (what the user set) when that is larger already."""
    needed = THINKING_BUDGETS[effort] + ANSWER_ROOM
    return needed if limit is None or limit < needed else limit


# -- the event schema: one struct for every event type, only the fields read ----------


class _Usage(msgspec.Struct, gc=False):
    input_tokens: TokenCount | None = None
    output_tokens: TokenCount | None = None
    cache_read_input_tokens: TokenCount | None = None
    cache_creation_input_tokens: TokenCount | None = None


class _Message(msgspec.Struct, gc=False):
    model: str | None = None
    usage: _Usage | None = None


class _Block(msgspec.Struct, gc=False):
    type: str = ""
    text: str | None = None
    id: str | None = None
    name: str | None = None
    input: msgspec.Raw = msgspec.Raw(b"")  # kept as JSON text: it becomes the arguments
    thinking: str | None = None  # thinking
    signature: str | None = None  # thinking
    data: str | None = None  # redacted_thinking
    citations: list[_Citation] | None = None  # a text block's sources (web_search)


class _Citation(msgspec.Struct, gc=False):
    url: str = ""
    title: str | None = None


class _Delta(msgspec.Struct, gc=False):
    type: str | None = None
    citation: _Citation | None = None  # citations_delta (web_search's sources)
    text: str | None = None  # text_delta
    partial_json: str | None = None  # input_json_delta
    thinking: str | None = None  # thinking_delta
    signature: str | None = None  # signature_delta
    stop_reason: str | None = None  # message_delta


class _Error(msgspec.Struct, gc=False):
    type: str = ""
    message: str = ""


class _Event(msgspec.Struct, gc=False):
    type: str = ""
    index: int = 0
    message: _Message | None = None
    content_block: _Block | None = None
    delta: _Delta | None = None
    usage: _Usage | None = None
    error: _Error | None = None


_decode_event = msgspec.json.Decoder(_Event).decode
_encode = msgspec.json.Encoder().encode
_decode_arguments = msgspec.json.Decoder().decode


class _ThoughtBlock:
    __slots__ = ("data", "parts", "signature")

    def __init__(self, block: _Block) -> None:
        self.parts = [block.thinking] if block.thinking else []
        self.signature = [block.signature] if block.signature else []
        self.data = block.data or ""

    def finish(self) -> ThinkingBlock:
        if self.data:
            return ThinkingBlock(data=self.data)
        return ThinkingBlock(thinking="".join(self.parts), signature="".join(self.signature))


class _ToolBlock:
    __slots__ = ("id", "initial", "name", "parts")

    def __init__(self, id: str, name: str, initial: str) -> None:
        self.id = id
        self.name = name
        self.initial = initial  # the block's "input" when no deltas follow
        self.parts: list[str] = []


def stream_error(error: _Error | None, data: bytes) -> Exception:
    """The exception for an ``error`` event (``Retry`` when another attempt may help)."""
    etype = error.type if error else ""
    message = error.message if error else data.decode("utf-8", "replace")[:500]
    kind, transient = _ERRORS.get(etype, (ModelErrorKind.SERVER, False))
    text = f"the server reported {etype or 'an error'} in the stream: {message}"
    if transient:
        return Retry(kind, text)
    return ModelError(kind, f"anthropic: {text}")


class _Stream:
    """Assembles one streamed message (implements ``_http.StreamHandler``)."""

    __slots__ = (
        "done",
        "events",
        "model",
        "position",
        "sources",
        "stop_reason",
        "text",
        "thoughts",
        "tools",
        "usage",
    )

    def __init__(self, model: str, position: int) -> None:
        self.model = model
        self.position = position
        self.text: list[str] = []
        self.tools: dict[int, _ToolBlock] = {}
        self.thoughts: dict[int, _ThoughtBlock] = {}
        self.sources: dict[str, str] = {}  # url -> title: what web_search's answer cites
        self.usage = [0, 0, 0, 0]  # input (uncached), output, cache read, cache write
        self.stop_reason: str | None = None
        self.done = False
        self.events = 0

    def feed(self, event: bytes, data: bytes) -> str | list[ToolCallStart] | None:
        self.events += 1
        try:
            ev = _decode_event(data)
        except msgspec.MsgspecError as exc:
            if event == b"error":
                raise stream_error(None, data) from None
            raise ModelError(
                ModelErrorKind.PROTOCOL,
                f"anthropic: the server sent an event that is not a Messages API event "
                f"({exc}): {data[:200]!r}",
            ) from None
        kind = ev.type
        if kind == "content_block_delta":  # the hot path first
            delta = ev.delta
            if delta is None:
                return None
            if delta.type == "text_delta":
                if delta.text:
                    self.text.append(delta.text)
                    return delta.text
            elif delta.type == "input_json_delta" and delta.partial_json:
                block = self.tools.get(ev.index)
                if block is not None:
                    block.parts.append(delta.partial_json)
            elif delta.type == "citations_delta" and delta.citation and delta.citation.url:
                self.sources.setdefault(delta.citation.url, delta.citation.title or "")
            elif delta.type in ("thinking_delta", "signature_delta"):
                thought = self.thoughts.get(ev.index)
                if thought is not None:  # kept, never streamed: thinking is not the answer
                    if delta.thinking:
                        thought.parts.append(delta.thinking)
                    if delta.signature:
                        thought.signature.append(delta.signature)
            return None
        if kind == "content_block_start":
            cb = ev.content_block
            if cb is None:
                return None
            if cb.type == "tool_use":
                initial = bytes(cb.input).decode()
                name = cb.name or ""
                self.tools[ev.index] = _ToolBlock(cb.id or "", name, initial)
                return [ToolCallStart(index=ev.index, name=name)]  # its input streams next
            elif cb.type == "text" and (cb.text or cb.citations):
                for cited in cb.citations or []:
                    self.sources.setdefault(cited.url, cited.title or "")
                if cb.text:
                    self.text.append(cb.text)
                    return cb.text
            elif cb.type in ("thinking", "redacted_thinking"):
                self.thoughts[ev.index] = _ThoughtBlock(cb)
        elif kind == "message_start":
            if ev.message is not None:
                if ev.message.model:
                    self.model = ev.message.model
                self._add_usage(ev.message.usage)
        elif kind == "message_delta":
            if ev.delta is not None and ev.delta.stop_reason:
                self.stop_reason = ev.delta.stop_reason
            self._add_usage(ev.usage)
        elif kind == "message_stop":
            self.done = True
        elif kind == "error" or event == b"error" or ev.error is not None:
            raise stream_error(ev.error, data)
        # ping, content_block_stop and event types added later need nothing
        return None

    def _add_usage(self, u: _Usage | None) -> None:
        # message_delta counts are cumulative, so a value present replaces the old one
        if u is None:
            return
        usage = self.usage
        if u.input_tokens is not None:
            usage[0] = u.input_tokens
        if u.output_tokens is not None:
            usage[1] = u.output_tokens
        if u.cache_read_input_tokens is not None:
            usage[2] = u.cache_read_input_tokens
        if u.cache_creation_input_tokens is not None:
            usage[3] = u.cache_creation_input_tokens

    def finish(self) -> ModelResponse | None:
        if not self.done and self.stop_reason is None:
            return None
        tool_calls = []
        for index in sorted(self.tools):
            block = self.tools[index]
            args = "".join(block.parts) or block.initial or "{}"
            call_id = block.id or _synthetic_id(self.position, index, block.name, args)
            tool_calls.append(ToolCall(id=call_id, name=block.name, arguments=args))
        stop = _STOP.get(self.stop_reason or "end_turn", StopReason.END)
        if tool_calls and stop is StopReason.END:
            stop = StopReason.TOOL_USE
        uncached, output, cache_read, cache_write = self.usage
        text = "".join(self.text)
        if self.sources:  # web_search's citations, passed on as the answer's sources
            text += "\n\nSources:\n" + "\n".join(
                f"- {title or url}: {url}" if title else f"- {url}"
                for url, title in self.sources.items()
            )
        return ModelResponse(
            text=text,
            tool_calls=tool_calls,
            # input_tokens counts every prompt token, as OpenAI's prompt_tokens does, so
            # that budgets mean the same for both; Anthropic reports cache hits and
            # writes apart from its input_tokens.
            usage=Usage(
                input_tokens=uncached + cache_read + cache_write,
                output_tokens=output,
                cache_read_tokens=cache_read,
                cache_write_tokens=cache_write,
            ),
            stop_reason=stop,
            model=self.model,
            reasoning=[self.thoughts[index].finish() for index in sorted(self.thoughts)],
        )


def _synthetic_id(position: int, index: int, name: str, arguments: str) -> str:
    # the API always sends ids; this only covers look-alike servers that do not
    key = f"{position}:{index}:{name}:{arguments}".encode()
    return "toolu_" + hashlib.blake2b(key, digest_size=12).hexdigest()


def _tool_input(arguments: str) -> Any:
    """A tool call's JSON text as the object ``tool_use.input`` requires."""
    try:
        value = _decode_arguments(arguments or "{}")
    except msgspec.DecodeError:
        return {}  # the model wrote invalid JSON; its tool result already says so
    return value if isinstance(value, dict) else {}


def convert_messages(messages: list[Message]) -> tuple[str, list[dict[str, Any]]]:
    """Our messages as (system, Messages API messages); see ``convert_with_ends``."""
    system, out, _ = convert_with_ends(messages)
    return system, out


def convert_with_ends(
    messages: list[Message],
) -> tuple[str, list[dict[str, Any]], list[dict[str, Any] | None]]:
    """Our messages as (system, Messages API messages, each message's last block).

    Leading system messages become the ``system`` field; a later one becomes user text
    where it stands. Consecutive messages of one role are merged into one message, as
    the API wants tool results and any user text after them in a single user turn.
    Empty text is dropped: the API refuses empty text blocks. An assistant turn's
    thinking blocks come first and exactly as received (a turn with neither text nor
    tool calls sends none).
    """
    system: list[str] = []
    out: list[dict[str, Any]] = []
    ends: list[dict[str, Any] | None] = []  # where prompt-cache breakpoints may go
    leading = True
    for m in messages:
        if isinstance(m, SystemMessage):
            if leading:
                if m.content:
                    system.append(m.content)
                ends.append(None)
                continue
            role, blocks = "user", _text(m.content)
        elif isinstance(m, ToolMessage):
            block: dict[str, Any] = {"type": "tool_result", "tool_use_id": m.tool_call_id}
            if m.content:
                block["content"] = m.content
            if m.is_error:
                block["is_error"] = True
            role, blocks = "user", [block]
        elif isinstance(m, AssistantMessage):
            role, blocks = "assistant", _text(m.content)
            if blocks or m.tool_calls:
                # as received and first: the API refuses a tool-use turn without them
                blocks[:0] = [_thinking_block(t) for t in m.reasoning]
            blocks.extend(
                {
                    "type": "tool_use",
                    "id": c.id,
                    "name": c.name,
                    "input": _tool_input(c.arguments),
                }
                for c in m.tool_calls
            )
        else:
            role, blocks = "user", _text(m.content)
        leading = False
        ends.append(blocks[-1] if blocks else None)
        if not blocks:
            continue
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})
    return "\n\n".join(system), out, ends


def _text(text: str) -> list[dict[str, Any]]:
    return [{"type": "text", "text": text}] if text else []


def _thinking_block(block: ThinkingBlock) -> dict[str, Any]:
    if block.redacted:
        return {"type": "redacted_thinking", "data": block.data}
    return {"type": "thinking", "thinking": block.thinking, "signature": block.signature}


class AnthropicModel(HttpChatModel):
    """A Claude model over the Anthropic Messages API, streamed.

    ``http`` (``HttpOptions``): ``base_url`` defaults to ``$ANTHROPIC_BASE_URL``, then the
    official API; ``api_key`` to ``$ANTHROPIC_API_KEY`` (required by the official API).
    ``max_tokens`` is the output limit when a request sets none (the API requires one;
    default 4096). Usage reports ``input_tokens`` including cache reads and writes, like
    OpenAI's ``prompt_tokens``. ``http.timeout`` bounds connecting and each wait for
    data, not the whole answer.

    ``effort`` (minimal|low|medium|high|max, an agent definition's key) turns on
    extended thinking where ``thinking_control`` says the model has it, and is ignored
    elsewhere (the orchestrator notes that once). ``prompt_cache`` (5m|1h|off, default 5m)
    puts cache breakpoints on the tools, the system prompt, the history before the last
    message (a forked sub-agent's parent context) and the last block, with that TTL
    (``_anthropic_cache``). Budget models get ``budget_tokens``
    from ``THINKING_BUDGETS``, adaptive ones ``output_config.effort``; either way
    ``max_tokens`` becomes ``thinking_max_tokens``: the thinking room plus
    ``ANSWER_ROOM`` unless the limit set (``max_tokens`` given here, or the request's
    own) is larger already. No sampling parameters are sent, so none that thinking
    forbids (temperature, top_k). Thinking blocks come back in
    ``ModelResponse.reasoning`` and are sent back unchanged with their turn.
    """

    provider = "anthropic"
    key_env = "ANTHROPIC_API_KEY"
    base_env = "ANTHROPIC_BASE_URL"
    official_url = OFFICIAL_BASE_URL
    endpoint = "/v1/messages"

    def __init__(
        self,
        model_name: str,
        *,
        http: HttpOptions | None = None,
        max_tokens: int | None = None,
        effort: str | None = None,
        prompt_cache: str = "5m",
        web_search: int | None = None,
    ) -> None:
        """``web_search``: offer Anthropic's server-side search tool, with at most this
        many searches a request (an agent file's ``WebSearch``)."""
        if prompt_cache not in PROMPT_CACHE_CHOICES:
            raise ModelError(
                ModelErrorKind.CONFIG,
                f"anthropic: prompt_cache {prompt_cache!r} is not one of "
                f"{', '.join(PROMPT_CACHE_CHOICES)}",
            )
        if effort is not None and effort not in THINKING_BUDGETS:
            raise ModelError(
                ModelErrorKind.CONFIG,
                f"anthropic: effort {effort!r} is not one of {', '.join(THINKING_BUDGETS)}",
            )
        super().__init__(model_name, http)
        self._max_tokens = max_tokens  # None: DEFAULT_MAX_TOKENS
        self._prompt_cache: PromptCache = prompt_cache  # type: ignore[assignment]
        self._effort = effort
        self._web_search = web_search
        self._thinking = thinking_control(model_name) if effort is not None else None

    def _headers_for(self, api_key: str | None) -> dict[str, str]:
        headers = {"anthropic-version": API_VERSION}
        if api_key:
            headers["x-api-key"] = api_key
        return headers

    def _parser(self, position: int) -> _Stream:
        return _Stream(self.model_name, position)

    def _payload(self, request: ModelRequest) -> bytes:
        system, messages, ends = convert_with_ends(request.messages)
        limit = request.max_output_tokens or self._max_tokens
        body: dict[str, Any] = {
            "model": self.model_name,
            "max_tokens": limit or DEFAULT_MAX_TOKENS,
            "messages": messages,
            "stream": True,
        }
        if self._effort is not None and self._thinking is not None:
            body["max_tokens"] = thinking_max_tokens(self._effort, limit)
            if self._thinking == "budget":
                body["thinking"] = {
                    "type": "enabled",
                    "budget_tokens": THINKING_BUDGETS[self._effort],
                }
            else:
                body["thinking"] = {"type": "adaptive"}
                body["output_config"] = {"effort": _ADAPTIVE_EFFORT[self._effort]}
        if system:
            body["system"] = system
        if request.tools:
            body["tools"] = [
                {"name": t.name, "description": t.description, "input_schema": t.parameters}
                for t in request.tools
            ]
        add_breakpoints(body, ends, self._prompt_cache)
        if self._web_search:  # run by Anthropic's servers; results come back as text
            server_tool = {"type": WEB_SEARCH_TOOL, "name": "web_search"}
            body.setdefault("tools", []).append(server_tool | {"max_uses": self._web_search})
        return _encode(body)
