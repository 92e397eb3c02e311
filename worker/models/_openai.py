"""OpenAI-compatible Chat Completions, streamed: api.openai.com, vLLM, llama.cpp, Ollama.

Request: POST {base}/chat/completions with ``stream: true`` and usage reporting on.
Answer: SSE ``data:`` lines, each a ``chat.completion.chunk``; text arrives as
``choices[0].delta.content`` and tool calls as fragments keyed by ``index`` (id and name
in the first fragment of an index, the arguments JSON in pieces); ``data: [DONE]`` ends.
"""

from __future__ import annotations

import hashlib
from typing import Any, Literal

import msgspec
from agentcell.protocol import (
    AssistantMessage,
    Message,
    SystemMessage,
    TokenCount,
    ToolCall,
    ToolMessage,
    Usage,
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

OFFICIAL_BASE_URL = "https://api.openai.com/v1"

#: Put before the content of a tool result marked ``is_error``: Chat Completions has no
#: error flag on tool messages, and the model must know the call failed.
TOOL_ERROR_PREFIX = "ERROR: the tool call failed.\n"

_FINISH = {
    "stop": StopReason.END,
    "tool_calls": StopReason.TOOL_USE,
    "function_call": StopReason.TOOL_USE,
    "length": StopReason.MAX_TOKENS,
    "content_filter": StopReason.REFUSAL,
}


# -- the chunk schema: only the fields read; gc=False since decoded data has no cycles --


class _Function(msgspec.Struct, gc=False):
    name: str | None = None
    arguments: str | None = None


class _ToolDelta(msgspec.Struct, gc=False):
    index: int | None = None
    id: str | None = None
    function: _Function | None = None


class _Delta(msgspec.Struct, gc=False):
    content: str | None = None
    refusal: str | None = None
    tool_calls: list[_ToolDelta] | None = None


class _Choice(msgspec.Struct, gc=False):
    delta: _Delta | None = None
    finish_reason: str | None = None


class _PromptDetails(msgspec.Struct, gc=False):
    cached_tokens: TokenCount | None = None


class _Usage(msgspec.Struct, gc=False):
    prompt_tokens: TokenCount | None = None
    completion_tokens: TokenCount | None = None
    prompt_tokens_details: _PromptDetails | None = None


class _Chunk(msgspec.Struct, gc=False):
    choices: list[_Choice] | None = None
    usage: _Usage | None = None
    model: str | None = None
    error: Any = None  # an error object sent inside the stream (vLLM, proxies)


_decode_chunk = msgspec.json.Decoder(_Chunk).decode
_encode = msgspec.json.Encoder().encode


class _CallParts:
    __slots__ = ("args", "id", "name")

    def __init__(self) -> None:
        self.id = ""
        self.name = ""
        self.args: list[str] = []


def synthetic_call_id(position: int, index: int, name: str, arguments: str) -> str:
    """A tool call id for servers that send none: the same call always gets the same id.

    ``position`` is the number of messages in the request, which differs for every turn
    of a conversation, so ids do not repeat within one; being a pure function of the
    call, it is reproducible across runs (recorded fixtures, replays).
    """
    key = f"{position}:{index}:{name}:{arguments}".encode()
    return "call_" + hashlib.blake2b(key, digest_size=12).hexdigest()


def stream_error(provider: str, error: Any) -> Exception:
    """The exception for an error object inside an event stream (``Retry`` if transient)."""
    if isinstance(error, dict):
        message = str(error.get("message") or error)
        etype = str(error.get("type") or "")
        code = error.get("code")
    else:
        message, etype, code = str(error), "", None
    label = " ".join(str(x) for x in (etype, code) if x).lower()
    text = f"the server reported an error in the stream: {message}"
    if "rate_limit" in label or code == 429:
        return Retry(ModelErrorKind.RATE_LIMIT, text)
    if any(w in label for w in ("server_error", "overloaded", "api_error", "internal")) or (
        isinstance(code, int) and code >= 500
    ):
        return Retry(ModelErrorKind.SERVER, text)
    if "auth" in label or code in (401, 403):
        return ModelError(ModelErrorKind.AUTH, f"{provider}: {text}")
    if "not_found" in label or code == 404:
        return ModelError(ModelErrorKind.NOT_FOUND, f"{provider}: {text}")
    if "invalid_request" in label or code in (400, 422):
        return ModelError(ModelErrorKind.BAD_REQUEST, f"{provider}: {text}")
    return ModelError(ModelErrorKind.SERVER, f"{provider}: {text}")


def _error_payload(data: bytes) -> Any:
    try:
        doc = msgspec.json.decode(data)
    except msgspec.DecodeError:
        return data.decode("utf-8", "replace")
    return doc.get("error", doc) if isinstance(doc, dict) else doc


class _Stream:
    """Assembles one streamed chat completion (implements ``_http.StreamHandler``)."""

    __slots__ = ("calls", "done", "events", "finish_reason", "model", "position", "text", "usage")

    def __init__(self, model: str, position: int) -> None:
        self.model = model
        self.position = position
        self.text: list[str] = []
        self.calls: dict[int, _CallParts] = {}
        self.finish_reason: str | None = None
        self.usage: _Usage | None = None
        self.done = False
        self.events = 0

    def feed(self, event: bytes, data: bytes) -> str | list[ToolCallStart] | None:
        self.events += 1
        if self.done:  # nothing counts after [DONE]; read on so the connection is reused
            return None
        if data == b"[DONE]":
            self.done = True
            return None
        if event == b"error":
            raise stream_error("openai", _error_payload(data))
        try:
            chunk = _decode_chunk(data)
        except msgspec.MsgspecError as exc:
            raise ModelError(
                ModelErrorKind.PROTOCOL,
                f"openai: the server sent an event that is not a chat completion chunk "
                f"({exc}): {data[:200]!r}",
            ) from None
        if chunk.error is not None:
            raise stream_error("openai", chunk.error)
        if chunk.usage is not None:  # last one wins: some servers repeat it per chunk
            self.usage = chunk.usage
        if chunk.model:
            self.model = chunk.model
        if not chunk.choices:
            return None
        choice = chunk.choices[0]  # n is never set, so there is one choice
        if choice.finish_reason:
            self.finish_reason = choice.finish_reason
        delta = choice.delta
        if delta is None:
            return None
        named = self._add_calls(delta.tool_calls) if delta.tool_calls else None
        if delta.content:
            # (a chunk with both is not seen from real servers; its calls still count
            # in the response, only their early announcement is skipped)
            self.text.append(delta.content)
            return delta.content
        if delta.refusal:
            self.text.append(delta.refusal)
            self.finish_reason = "content_filter"
            return delta.refusal
        return named

    def _add_calls(self, fragments: list[_ToolDelta]) -> list[ToolCallStart] | None:
        """Add the fragments; return the calls whose names came with them (the first
        fragment of a call carries its name; some servers send whole calls at once)."""
        calls = self.calls
        named: list[ToolCallStart] | None = None
        for frag in fragments:
            index = frag.index
            if index is None:  # a server without indexes: a new id starts a new call
                last = max(calls) if calls else -1
                fresh = last < 0 or (frag.id and calls[last].id and frag.id != calls[last].id)
                index = last + 1 if fresh else last
            parts = calls.get(index)
            if parts is None:
                parts = calls[index] = _CallParts()
            if frag.id and not parts.id:
                parts.id = frag.id
            fn = frag.function
            if fn is not None:
                if fn.name and not parts.name:
                    parts.name = fn.name
                    if named is None:
                        named = []
                    named.append(ToolCallStart(index=index, name=fn.name))
                if fn.arguments:
                    parts.args.append(fn.arguments)
        return named

    def finish(self) -> ModelResponse | None:
        if not self.done and self.finish_reason is None:
            return None
        tool_calls = []
        for index in sorted(self.calls):
            parts = self.calls[index]
            args = "".join(parts.args) or "{}"
            call_id = parts.id or synthetic_call_id(self.position, index, parts.name, args)
            tool_calls.append(ToolCall(id=call_id, name=parts.name, arguments=args))
        stop = _FINISH.get(self.finish_reason or "stop", StopReason.END)
        if tool_calls and stop is StopReason.END:  # some servers say "stop" with tool calls
            stop = StopReason.TOOL_USE
        u = self.usage
        usage = Usage()
        if u is not None:
            details = u.prompt_tokens_details
            usage = Usage(
                input_tokens=u.prompt_tokens or 0,  # includes the cached tokens
                output_tokens=u.completion_tokens or 0,
                cache_read_tokens=(details.cached_tokens or 0) if details else 0,
            )
        return ModelResponse(
            text="".join(self.text),
            tool_calls=tool_calls,
            usage=usage,
            stop_reason=stop,
            model=self.model,
        )


def convert_messages(messages: list[Message]) -> list[dict[str, Any]]:
    """Our messages in Chat Completions form. An assistant turn's ``reasoning`` (another
    provider's thinking blocks) is left out: Chat Completions has no place for it."""
    out: list[dict[str, Any]] = []
    for m in messages:
        if isinstance(m, ToolMessage):
            content = TOOL_ERROR_PREFIX + m.content if m.is_error else m.content
            out.append({"role": "tool", "tool_call_id": m.tool_call_id, "content": content})
        elif isinstance(m, AssistantMessage):
            if m.tool_calls:
                out.append(
                    {
                        "role": "assistant",
                        "content": m.content or None,  # null, not "", beside tool calls
                        "tool_calls": [
                            {
                                "id": c.id,
                                "type": "function",
                                "function": {"name": c.name, "arguments": c.arguments},
                            }
                            for c in m.tool_calls
                        ],
                    }
                )
            else:
                out.append({"role": "assistant", "content": m.content})
        elif isinstance(m, SystemMessage):
            out.append({"role": "system", "content": m.content})
        else:
            out.append({"role": "user", "content": m.content})
    return out


class OpenAIChatModel(HttpChatModel):
    """A model behind an OpenAI-compatible Chat Completions endpoint, streamed.

    ``http`` (``HttpOptions``): ``base_url`` defaults to ``$OPENAI_BASE_URL``, then the
    official API; ``api_key`` to ``$OPENAI_API_KEY``. Without a key, a custom base URL
    (vLLM, llama.cpp, Ollama) gets no Authorization header, while the official one is a
    configuration error.

    The output limit goes in ``max_tokens_field``: by default ``max_completion_tokens``
    for the official API (its reasoning models refuse ``max_tokens``) and ``max_tokens``
    elsewhere (what local servers understand). ``stream_usage=False`` drops
    ``stream_options`` for servers that reject it. ``http.timeout`` bounds connecting and
    each wait for data, not the whole answer.
    """

    provider = "openai"
    key_env = "OPENAI_API_KEY"
    base_env = "OPENAI_BASE_URL"
    official_url = OFFICIAL_BASE_URL
    endpoint = "/chat/completions"

    def __init__(
        self,
        model_name: str,
        *,
        http: HttpOptions | None = None,
        max_tokens_field: Literal["max_tokens", "max_completion_tokens"] | None = None,
        stream_usage: bool = True,
        reasoning_effort: str | None = None,
    ) -> None:
        super().__init__(model_name, http)
        self._max_field = max_tokens_field or (
            "max_completion_tokens" if self._official else "max_tokens"
        )
        self._stream_usage = stream_usage
        self._reasoning_effort = reasoning_effort  # an agent's `effort`, for reasoning models

    def _headers_for(self, api_key: str | None) -> dict[str, str]:
        return {"authorization": f"Bearer {api_key}"} if api_key else {}

    def _parser(self, position: int) -> _Stream:
        return _Stream(self.model_name, position)

    def _payload(self, request: ModelRequest) -> bytes:
        body: dict[str, Any] = {
            "model": self.model_name,
            "messages": convert_messages(request.messages),
            "stream": True,
        }
        if self._stream_usage:
            body["stream_options"] = {"include_usage": True}
        if request.tools:
            body["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": t.name,
                        "description": t.description,
                        "parameters": t.parameters,
                    },
                }
                for t in request.tools
            ]
        if request.max_output_tokens is not None:
            body[self._max_field] = request.max_output_tokens
        if self._reasoning_effort is not None:
            body["reasoning_effort"] = self._reasoning_effort
        return _encode(body)
