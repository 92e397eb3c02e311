"""The parent's model relay: a sub-agent's model requests, sent from here.

A child on the local backend holds no provider key and may open no TCP connection (its
Landlock layer allows none). Its provider code builds each request body as usual and
sends it as a ``ModelCall`` (``worker.models.transports._parent``); ``ModelRelay`` checks it
against what the child's definition allows — the body's ``model`` is the spec's, its
top-level keys come from the provider's allow-list, its size and the calls in flight are
capped, what in it costs money is bounded (``_relay_checks``: server-side tools, output
limits, thinking, effort) — then adds the URL, headers and key from the parent's own
configuration, takes a permit from the provider limiter, sends it from the parent's
connection pools (``ModelPools``: small httpx clients, each child on one) and streams the
raw body back in batched frames (``_model_batch``: what the upstream had ready, joined; a short
answer in one frame), waiting on the channel's writability (a slow child is never
buffered without bound). The child parses the answer (a hostile server's bytes are
parsed in the sandbox); the relay reads only the usage the server reports in it, for the
limiter and the ledger. A ``ModelCancel``, the child's end and the run's end cancel the
upstream request, and charge it (``UsageScan.given_up``): a call given up before its
usage arrived is not free.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import importlib.util
import logging
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping
from typing import Any

import httpx
import msgspec
from agentcell.orchestrator.config._settings import Settings
from agentcell.orchestrator.journal._delta import request_digest
from agentcell.orchestrator.journal._journal import Journal
from agentcell.orchestrator.journal._replay import Answer
from agentcell.orchestrator.model_relay._batch import (
    CallFrames,
    relay_chunks,
)
from agentcell.orchestrator.model_relay._call_ahead import CallAhead
from agentcell.orchestrator.model_relay._checks import check_costs
from agentcell.orchestrator.model_relay._checks import shown as _shown
from agentcell.orchestrator.model_relay._key_mask import KeyMask, header_secrets, url_secrets
from agentcell.orchestrator.model_relay._limiter import ModelPermit, ProviderLimiter
from agentcell.orchestrator.model_relay._usage import UsageScan
from agentcell.protocol import (
    AgentSpec,
    ChannelClosed,
    Frame,
    ModelCall,
    ModelCancel,
    ModelEnd,
    ModelHead,
    Usage,
)
from agentcell.worker.models import (
    AnthropicModel,
    Endpoint,
    H11Pool,
    HttpxTransport,
    Inflater,
    ModelError,
    ModelTransport,
    OpenAIChatModel,
    Retry,
    estimate_tokens,
    h11_route,
    make_client,
    parse_retry_after,
    resolve_model,
)

log = logging.getLogger("agentcell.orchestrator")

#: Providers whose requests a child sends through the parent (the HTTP ones).
RELAYED_PROVIDERS = ("openai", "anthropic")
#: The top-level keys of a request body each provider's code sends (and a few sampling
#: parameters a provider option may add); any other key is refused.
ALLOWED_KEYS: dict[str, frozenset[str]] = {
    "openai": frozenset(
        {
            "model",
            "messages",
            "stream",
            "stream_options",
            "tools",
            "tool_choice",
            "max_tokens",
            "max_completion_tokens",
            "temperature",
            "top_p",
            "stop",
            "metadata",
            "reasoning_effort",
            "parallel_tool_calls",
            "response_format",
            "seed",
        }
    ),
    "anthropic": frozenset(
        {
            "model",
            "messages",
            "system",
            "stream",
            "tools",
            "tool_choice",
            "max_tokens",
            "temperature",
            "top_p",
            "top_k",
            "stop_sequences",
            "metadata",
            "thinking",
            "output_config",
        }
    ),
}
#: The largest request body a child may send (a long conversation is a few MiB).
MAX_CALL_BYTES = 8 * 1024 * 1024
#: Model calls one child may have in flight (its engine sends one at a time).
MAX_CALLS_PER_CHILD = 4
#: Refusals one child is answered (a refusal ends a genuine child's run; a compromised one
#: asking on and reading nothing would have them queued for it without bound).
MAX_REFUSALS = 64
#: Model options the parent uses to reach the provider: where, with which key, how long.
UPSTREAM_KEYS = ("base_url", "api_key", "timeout", "max_connections")
#: Options the child's copy of the model never gets.
PARENT_ONLY_KEYS = ("api_key",)

_decode_top = msgspec.json.Decoder(dict[str, msgspec.Raw]).decode
_decode_model = msgspec.json.Decoder(str).decode


def relayed(model: str) -> bool:
    return model.partition(":")[0] in RELAYED_PROVIDERS


def upstream_options(settings: Settings, model: str) -> dict[str, Any]:
    """The options of the parent's copy of the child's model (URL, key, timeouts)."""
    given = settings.model_options.get(model.partition(":")[0], {})
    return {key: given[key] for key in UPSTREAM_KEYS if key in given}


def check_call(spec: AgentSpec, body: bytes) -> str:
    """Why the parent will not send ``body`` for this child ("" if it will)."""
    return _checked(spec, body)[0]


def _checked(
    spec: AgentSpec, body: bytes, tokens_left: int | None = None
) -> tuple[str, dict[str, msgspec.Raw], list[str]]:
    """``check_call``'s answer, the body's top level as it was checked (what goes
    upstream, re-encoded: decoded once per call) and what the cost checks clamped in it
    (``tokens_left``: the run's token budget left, None for none)."""
    provider, _, name = spec.model.partition(":")
    if not spec.model_via_parent or provider not in ALLOWED_KEYS:
        why = f"this sub-agent's model {spec.model!r} is not reached through the orchestrator"
        return why, {}, []
    if len(body) > MAX_CALL_BYTES:
        why = f"the request body has {len(body)} bytes, more than the {MAX_CALL_BYTES} allowed"
        return why, {}, []
    try:
        top = _decode_top(body)
        model = _decode_model(top["model"]) if "model" in top else ""
    except (msgspec.DecodeError, msgspec.ValidationError):
        return "the request body is not a JSON object with a string 'model'", {}, []
    if model != name:
        why = f"the request names model {_shown(model)}, but this sub-agent runs on {name!r}"
        return why, top, []
    unknown = sorted(set(top) - ALLOWED_KEYS[provider])
    if unknown:
        shown = ", ".join(map(_shown, unknown[:4])) + (", …" if len(unknown) > 4 else "")
        return f"the request sets {shown}, not allowed for {provider}", top, []
    if why := _unpriced(spec, provider, top):
        return why, top, []
    why, clamped = check_costs(spec, provider, top, tokens_left)
    return why, top, clamped


def _unpriced(spec: AgentSpec, provider: str, top: dict[str, msgspec.Raw]) -> str:
    """Why the parent could not read what this call costs from its answer ("" if it can):
    the child's report of a call its engine never made would say nothing."""
    if "stream" not in top or msgspec.json.decode(top["stream"]) is not True:
        return "the request is not streamed (the orchestrator reads its cost from the stream)"
    if provider != "openai" or spec.model_options.get("stream_usage", True) is False:
        return ""  # Anthropic's stream always reports usage; a server without it, none
    options = msgspec.json.decode(top["stream_options"]) if "stream_options" in top else None
    if not isinstance(options, dict) or options.get("include_usage") is not True:
        return "the request does not ask for the usage chunk (stream_options.include_usage)"
    # Upstream as it was read: {"include_usage": false, "include_usage": true} is true
    # here, and would be false to a server whose parser keeps the first key (no usage
    # chunk: a call that cost the child nothing).
    top["stream_options"] = msgspec.Raw(msgspec.json.encode(options))
    return ""


class ModelPools:
    """The parent's connection pools for relayed requests: ``SHARDS`` small pools per
    endpoint, each child on one. For a plain-HTTP server, h11 connections of our own
    (``H11Pool``: a third of httpx's CPU per request, on the parent's serial path); for
    HTTPS (HTTP/2 offered) and through a proxy, httpx clients. Small, because httpcore
    rescans every connection of a pool each time a request starts or ends (and counts
    its idle ones once per connection: quadratic in the pool's size); 128 children then
    share a pool by four. A child takes the shard with the fewest children on it, the
    first such: sub-agents one after another reuse one pool's open connections (turn by
    turn, each new child made a new client and opened a new connection for its first
    request, 32 times)."""

    SHARDS = 32
    CONNECTIONS_PER_SHARD = 8

    def __init__(self) -> None:
        self._clients: dict[tuple[str, float, int], httpx.AsyncClient] = {}
        self._h11_pools: dict[tuple[str, float, int], H11Pool] = {}
        self._h11_route: dict[str, bool] = {}  # by base URL (proxy look-ups are not free)
        self._children = [0] * self.SHARDS  # children on each shard now
        self._http2 = importlib.util.find_spec("h2") is not None

    def take_shard(self) -> int:
        shard = self._children.index(min(self._children))
        self._children[shard] += 1
        return shard

    def leave_shard(self, shard: int) -> None:
        self._children[shard] -= 1

    def transport(
        self, url: str, headers: Mapping[str, str], endpoint: Endpoint, shard: int
    ) -> ModelTransport:
        """A model's requests (its URL and headers, the key among them) sent from
        ``shard``'s pool for the model's endpoint."""
        base, timeout = endpoint.base_url, endpoint.timeout
        plain = self._h11_route.get(base)
        if plain is None:
            plain = self._h11_route[base] = h11_route(base)
        if not plain:
            return HttpxTransport(lambda: self.client(base, timeout, shard), url, headers, endpoint)
        key = (base, timeout, shard)
        pool = self._h11_pools.get(key)
        if pool is None:
            pool = self._h11_pools[key] = H11Pool(
                endpoint, max_connections=self.CONNECTIONS_PER_SHARD
            )
        return pool.transport(url, headers)

    def client(self, base_url: str, timeout: float, shard: int) -> httpx.AsyncClient:
        key = (base_url, timeout, shard)
        client = self._clients.get(key)
        if client is None:
            client = self._clients[key] = make_client(
                base_url,
                timeout=timeout,
                max_connections=self.CONNECTIONS_PER_SHARD,
                http2=self._http2,
            )
        return client

    async def aclose(self) -> None:
        clients, self._clients = list(self._clients.values()), {}
        h11_pools, self._h11_pools = list(self._h11_pools.values()), {}
        for pool in h11_pools:
            await pool.aclose()
        for client in clients:
            await client.aclose()


class _Call:
    """One call in flight: its task, and what it is charged if it ends unfinished."""

    __slots__ = ("charged", "estimate", "scan", "sent", "status", "task", "tokens")

    def __init__(self, estimate: int, scan: UsageScan) -> None:
        self.estimate = estimate  # its input tokens, guessed from the body
        self.scan = scan
        self.task: asyncio.Task[None] | None = None
        self.sent = False  # the request went upstream (or was sent ahead)
        self.status = 0  # the answer's, once its head is in
        self.charged = False  # its cost is counted (or it has none to count)
        self.tokens = 0  # what the limiter is told it cost


class JournaledAnswer:
    """A resumed agent's answer from the journal, served the way an answer sent ahead
    is (``_serve`` takes it in place of one): no permit, no upstream, its bytes as the
    child was sent them then."""

    secrets: list[bytes] = []

    def __init__(self, body: bytes) -> None:
        self._body = body

    async def take(self) -> tuple[ModelPermit, _Replayed]:
        return ModelPermit(None, 0), _Replayed(self._body)


class _Replayed:
    """A ``TransportResponse`` of journaled bytes."""

    status = 200
    headers = {"content-type": "text/event-stream"}

    def __init__(self, body: bytes) -> None:
        self._body = body

    async def chunks(self) -> AsyncIterator[bytes]:
        yield self._body

    async def aclose(self) -> None:
        return None


class ModelRelay:
    """One child's model calls, each served in a task of the child relay's group.

    ``tokens_left``: what the run's token budget has left (an output limit is clamped to
    it), None where it has none."""

    def __init__(
        self,
        spec: AgentSpec,
        settings: Settings,
        limiter: ProviderLimiter,
        pools: ModelPools,
        send: Callable[[Frame], Coroutine[Any, Any, None]],
        *,
        send_nowait: Callable[[Frame], None],
        start: Callable[[Coroutine[Any, Any, None]], asyncio.Task[None]],
        ahead: CallAhead | None = None,
        tokens_left: Callable[[], int | None] | None = None,
        journal: Journal | None = None,
    ) -> None:
        self._spec = spec
        self._journal = journal  # each request and answer, when the run is journaled
        self._replay: collections.deque[Answer] = collections.deque()  # see serve_again
        self._tokens_left = tokens_left
        self._ahead = ahead  # its first request, sent while it started (_call_ahead)
        self._settings = settings
        self._limiter = limiter
        self._pools = pools
        self._send = send
        self._send_nowait = send_nowait
        self._start = start
        self._calls: dict[int, _Call] = {}
        self._upstream: ModelTransport | None = None
        self._secrets: list[bytes] = []  # the key in the upstream headers, to mask
        if ahead is not None:  # its shard and transport: the connection it opened
            ahead.adopt()
            self._shard, self._upstream, self._secrets = ahead.shard, ahead.transport, ahead.secrets
        else:
            self._shard = pools.take_shard()
        self._on_shard = True
        self._counted: list[Usage] = []  # what the servers reported
        self._refusals = 0

    def counted_usage(self, reported: Usage) -> Usage:
        """The usage of the child's next ``UsageUpdate``: the tokens the servers reported
        in the answers relayed since the last one (the child parsed the same streams, and
        reports only after their end), and what the calls given up since cost
        (``_give_up``), else the child's own report."""
        counted, self._counted = self._counted, []
        if not counted:
            return reported
        return sum(counted[1:], counted[0])

    def on_call(self, frame: ModelCall) -> None:
        if frame.id in self._calls:
            self._refuse(frame.id, f"call id {frame.id} is already in flight")
        elif len(self._calls) >= MAX_CALLS_PER_CHILD:
            self._refuse(frame.id, f"more than {MAX_CALLS_PER_CHILD} model calls in flight")
        elif (checked := _checked(self._spec, frame.body, self._left()))[0]:
            self._refuse(frame.id, checked[0])
        else:
            if checked[2]:  # silent to the child (its request goes, bounded), not to us
                log.warning(
                    "%s: model request clamped: %s", self._spec.agent_id, "; ".join(checked[2])
                )
            # What goes upstream is the object checked, re-encoded: a key given twice
            # ({"model": "a", "model": "b"}) would mean the last one to this check and
            # maybe the first to the server's parser.
            body, asked = msgspec.json.encode(checked[1]), frame.body
            if self._journal is not None:
                self._journal.ask(self._spec.agent_id, frame.id, checked[1])
            frame = msgspec.structs.replace(frame, body=body)
            ahead, self._ahead = self._ahead, None
            if ahead is not None and not self._same_as_ahead(ahead, body, asked):
                log.warning(
                    "%s: its first model request was not the one sent ahead: that one is cancelled",
                    self._spec.agent_id,
                )
                self._start(ahead.aclose())
                ahead = None
            call = _Call(estimate_tokens(body), UsageScan(self._spec.model.partition(":")[0]))
            replayed = self._replayed(checked[1])
            served: CallAhead | JournaledAnswer | None = ahead
            if replayed is not None:
                served = JournaledAnswer(replayed.body)
            call.task = task = self._start(self._serve(frame, call, served))
            self._calls[frame.id] = call
            task.add_done_callback(functools.partial(self._ended, frame.id))

    def serve_again(self, answers: list[Answer]) -> None:
        """A resumed agent: the answers the killed run's agent was given, served while
        its requests are the ones journaled; the first that is not ends the replay (it
        and every later one is asked upstream)."""
        self._replay.extend(answers)

    def _replayed(self, top: dict[str, msgspec.Raw]) -> Answer | None:
        """The journaled answer to this request, if it is the next one journaled."""
        if not self._replay:
            return None
        if self._replay[0].digest == request_digest(top):
            return self._replay.popleft()
        log.warning(
            "%s: its request differs from the one journaled: asking the model from here on",
            self._spec.agent_id,
        )
        self._replay.clear()
        return None

    def _left(self) -> int | None:
        return None if self._tokens_left is None else self._tokens_left()

    def _same_as_ahead(self, ahead: CallAhead, body: bytes, asked: bytes) -> bool:
        """Is the child's first call (``body``: ``asked`` as checked now) the one sent
        ahead? That one was checked against the run's budget left then (an output limit
        clamped, or set, to it): under a budget that moved since, ``asked`` is compared
        checked the same way."""
        if ahead.body == body:
            return True
        if ahead.tokens_left is None:
            return False
        why, top, _ = _checked(self._spec, asked, ahead.tokens_left)
        return not why and msgspec.json.encode(top) == ahead.body

    def _ended(self, call_id: int, task: asyncio.Task[None]) -> None:
        call = self._calls.get(call_id)
        if call is not None and call.task is task:
            del self._calls[call_id]

    def on_cancel(self, frame: ModelCancel) -> None:
        """The child gave the call up (an id it never used is ignored): cancelled, and
        charged now, before the child's next ``UsageUpdate`` is read."""
        call = self._calls.pop(frame.id, None)
        if call is not None:
            self._cancel(call)

    def _cancel(self, call: _Call) -> None:
        assert call.task is not None
        call.task.cancel()
        # What it relayed so far is all it relays: its task's next step is the cancel.
        self._give_up(call)

    def _give_up(self, call: _Call) -> None:
        """A call that ends unfinished: charged what the server reported so far, never
        less than its estimated input and the output relayed (``UsageScan.given_up``);
        nothing if it never went upstream or the server refused it (no answer to bill)."""
        if call.charged:
            return
        call.charged = True
        if not call.sent or call.status not in (0, 200):
            return
        usage = call.scan.given_up(call.estimate)
        call.tokens = usage.input_tokens + usage.output_tokens
        self._counted.append(usage)

    def _finished(self, call: _Call) -> None:
        """A call whose answer was relayed whole: charged what the server reported."""
        if call.charged:  # given up, but its cancel came too late to stop it
            return
        call.charged = True
        scan = call.scan
        scan.finish()
        call.tokens = scan.tokens
        if scan.tokens:
            self._counted.append(scan.usage)

    async def close(self) -> None:
        """The child is gone: every call it had in flight is cancelled upstream."""
        if self._on_shard:  # first: a cancelled close still gives its place back
            self._on_shard = False
            self._pools.leave_shard(self._shard)
        if self._ahead is not None:  # it never asked
            ahead, self._ahead = self._ahead, None
            await ahead.aclose()
        calls = list(self._calls.values())
        for call in calls:  # each charged before the first wait: a cancelled close too
            self._cancel(call)
        if calls:
            await asyncio.wait([call.task for call in calls if call.task is not None])
        self._calls.clear()

    def _refuse(self, call_id: int, why: str) -> None:
        self._refusals += 1
        if self._refusals > MAX_REFUSALS:
            if self._refusals == MAX_REFUSALS + 1:
                log.warning(
                    "%s: model requests refused unanswered from now on", self._spec.agent_id
                )
            return
        log.warning("%s: model request refused: %s", self._spec.agent_id, why)
        with contextlib.suppress(ChannelClosed):
            self._send_nowait(ModelEnd(id=call_id, error_kind="refused", message=why))

    def _transport(self) -> ModelTransport:
        """The parent's copy of the child's model, sending from this child's shard."""
        if self._upstream is None:
            self._upstream, self._secrets = parent_transport(
                self._spec, self._settings, self._pools, self._shard
            )
        return self._upstream

    async def _serve(
        self, frame: ModelCall, call: _Call, ahead: CallAhead | JournaledAnswer | None = None
    ) -> None:
        cid = frame.id
        if ahead is None:
            permit = await self._limiter.acquire(self._spec.model, call.estimate)
        else:
            permit = ModelPermit(None, 0)  # released below; the one sent ahead has its own
        provider = self._spec.model.partition(":")[0]
        scan = call.scan
        headers: dict[str, str] = {}
        frames: CallFrames | None = None
        mask = KeyMask(())
        try:
            if ahead is None:
                transport = self._transport()
                mask = KeyMask(self._secrets)
                call.sent = True
                response = await transport.open(frame.body)
            else:
                mask = KeyMask(ahead.secrets)
                call.sent = True
                permit, response = await ahead.take()
            status = call.status = response.status
            headers = response.headers
            try:
                # Inflated here, so that the key can be masked and the usage read in it
                # (we ask for identity; a server or proxy may compress anyway).
                inflater = Inflater(headers.get("content-encoding", ""), provider)
                relayed = {k: mask.text(v) for k, v in headers.items() if k != "content-encoding"}
                head = ModelHead(id=cid, status=status, headers=relayed)
                feed = scan.feed if status == 200 else None
                frames = CallFrames(self._send, head, feed, mask, keep=self._journal is not None)
                chunks = inflated_chunks(response.chunks(), inflater)
                frames.hold(await relay_chunks(chunks, frames.send))
            finally:
                await response.aclose()
            self._finished(call)
            end = ModelEnd(id=cid)
        except Retry as failure:
            call.charged = True  # failed, not given up: its retry is what is charged
            end = ModelEnd(
                id=cid,
                error_kind=failure.kind.value,
                message=mask.text(failure.cause),
                retry=True,
                midstream=mask.text(failure.midstream or ""),
            )
        except ModelError as error:
            call.charged = True
            end = ModelEnd(id=cid, error_kind=error.kind.value, message=mask.text(str(error)))
        except ChannelClosed:
            return  # the child is gone: nobody to answer (its call given up, below)
        finally:
            self._give_up(call)  # cancelled, or the child gone, before its end
            _release(permit, call.tokens, call.status, headers)
        with contextlib.suppress(ChannelClosed):
            await (self._send(end) if frames is None else frames.end(end))
        if self._journal is not None and frames is not None and frames.kept is not None:
            # What the child was sent, whole: a resumed child parses it as it parsed this.
            body = b"".join(frames.kept)
            self._journal.answer(self._spec.agent_id, cid, call.status, body, end.error_kind)


def parent_transport(
    spec: AgentSpec, settings: Settings, pools: ModelPools, shard: int
) -> tuple[ModelTransport, list[bytes]]:
    """The parent's copy of the child's model, sending from ``shard``'s pool, and the
    secrets of its headers (what an answer relayed to the child must not echo)."""
    model = resolve_model(spec.model, upstream_options(settings, spec.model))
    assert isinstance(model, OpenAIChatModel | AnthropicModel)  # check_call's
    model.check_ready()  # no key for the official API: the child says so, in words
    secrets: list[bytes] = []

    def make(url: str, headers: Mapping[str, str], endpoint: Endpoint) -> ModelTransport:
        secrets.extend(header_secrets(headers) + url_secrets(url))  # errors quote the URL
        return pools.transport(url, headers, endpoint, shard)

    return model.transport_over(make), secrets


def call_ahead(  # noqa: PLR0917 - the runner's one call
    spec: AgentSpec,
    body: bytes,
    settings: Settings,
    limiter: ProviderLimiter,
    pools: ModelPools,
    start: Callable[[Coroutine[Any, Any, None]], asyncio.Task[None]],
    tokens_left: int | None = None,
) -> CallAhead | None:
    """``body`` (the child's predicted first request) sent now, if the relay would send
    it as it is (checked and re-encoded the same way; ``tokens_left``: the run's token
    budget left now, which bounds its output limit)."""
    why, checked, _ = _checked(spec, body, tokens_left)
    if why:
        return None
    shard = pools.take_shard()
    try:
        transport, secrets = parent_transport(spec, settings, pools, shard)
    except ModelError:  # the child meets it, and says it, in its own words
        pools.leave_shard(shard)
        return None
    body = msgspec.json.encode(checked)
    return CallAhead(
        spec,
        body,
        transport,
        secrets,
        limiter=limiter,
        start=start,
        shard=shard,
        on_done=lambda: pools.leave_shard(shard),
        tokens_left=tokens_left,
    )


async def inflated_chunks(chunks: AsyncIterator[bytes], inflater: Inflater) -> AsyncIterator[bytes]:
    """The body's bytes decompressed in bounded steps (as they are, uncompressed)."""
    async for raw in chunks:
        for piece in inflater.pieces(raw):
            yield piece


def _release(permit: ModelPermit, tokens: int, status: int, headers: dict[str, str]) -> None:
    """The permit back, with what the server said it cost and the pause it asked for
    (a 429's or an overload's Retry-After holds every sibling on the model)."""
    retry_after = parse_retry_after(headers) if status == 429 or status >= 500 else None
    permit.release(tokens=tokens, retry_after=retry_after)
