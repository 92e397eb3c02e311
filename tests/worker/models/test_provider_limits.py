"""Provider limits kept by the parent across every child: concurrency, rates, 429 pauses.

The limiter's own rules are checked on the event loop; the promises that matter are
checked over real child processes against a local OpenAI-compatible server that counts
what reaches it: never more than K requests in flight, and one 429 with Retry-After
holds every sibling instead of letting each provoke its own.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from agentcell.orchestrator import AgentDefinition, Orchestrator, Settings
from agentcell.orchestrator.config._load import ConfigError, load_settings
from agentcell.orchestrator.config._settings import ProviderLimits
from agentcell.orchestrator.delegation._events import SubAgentProcess, SubAgentStarted
from agentcell.orchestrator.model_relay._limiter import (
    MAX_OPEN_PER_CHILD,
    ChildPermits,
    ModelLimiter,
    ProviderLimiter,
    _per_second,
)
from agentcell.protocol import Frame, PermitDone, PermitGrant, PermitRequest, RunStatus, UserMessage
from agentcell.worker.models import OpenAIChatModel, complete, request_gate
from agentcell.worker.models._base import ModelRequest
from agentcell.worker.models._http_options import HttpOptions
from conftest import SpawnRecorder
from model_servers import ModelServer, Reply

STEP_TIMEOUT_S = 60.0


async def until(condition: Callable[[], bool], what: str) -> None:
    """Wait for observable state (server counters, limiter counters), never for time."""
    try:
        async with asyncio.timeout(STEP_TIMEOUT_S):
            while not condition():  # noqa: ASYNC110 - the state lives in other threads
                await asyncio.sleep(0.005)
    except TimeoutError:
        raise AssertionError(f"timed out waiting for {what}") from None


# -- the limiter on its own ------------------------------------------------------------------


async def test_concurrency_slots_are_held_until_released() -> None:
    limiter = ModelLimiter("openai:m", ProviderLimits(max_concurrent=2))
    first, second = await limiter.acquire(), await limiter.acquire()
    third = asyncio.ensure_future(limiter.acquire())
    await until(lambda: limiter.stats.waiting == 1, "the third to queue")
    assert not third.done() and limiter.stats.in_flight == 2
    first.release()
    first.release()  # a second release gives nothing back twice
    permit = await third
    assert limiter.stats.in_flight == 2 and limiter.stats.max_in_flight == 2
    fourth = asyncio.ensure_future(limiter.acquire())
    await until(lambda: limiter.stats.waiting == 1, "the fourth to queue")
    assert not fourth.done()  # the double release did not free a slot
    second.release()
    (await fourth).release()
    permit.release()
    assert limiter.stats.in_flight == 0 and limiter.stats.granted == 4


async def test_a_cancelled_wait_keeps_no_slot() -> None:
    limiter = ModelLimiter("openai:m", ProviderLimits(max_concurrent=1))
    held = await limiter.acquire()
    waiting = asyncio.ensure_future(limiter.acquire())
    await until(lambda: limiter.stats.waiting == 1, "the second to queue")
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    held.release()
    (await asyncio.wait_for(limiter.acquire(), 5)).release()
    assert limiter.stats.in_flight == 0 and limiter.stats.waiting == 0


async def test_retry_after_pauses_every_later_request() -> None:
    limiter = ModelLimiter("openai:m", ProviderLimits(max_concurrent=4))
    loop = asyncio.get_running_loop()
    permit = await limiter.acquire()
    reported = loop.time()
    permit.release(retry_after=0.2)
    assert limiter.stats.pauses == 1 and limiter.paused_for > 0
    (await limiter.acquire()).release()
    assert loop.time() >= reported + 0.2  # granted only once the pause was over
    # Nonsense values pause nothing; a huge one is cut to the cap.
    for value in (float("nan"), float("-inf"), -1.0, 0.0):
        (await limiter.acquire()).release(retry_after=value)
    assert limiter.paused_for == 0 and limiter.stats.pauses == 1
    limiter.pause(1e9)
    assert 0 < limiter.paused_for <= 60.0


async def test_requests_per_minute_are_enforced_per_second() -> None:
    assert _per_second(600) == (10.0, 1.0)  # 10 at once, then 10 a second
    assert _per_second(30) == (1.0, 2.0)  # one every 2 s, never a minute's burst
    limiter = ModelLimiter("openai:m", ProviderLimits(requests_per_minute=600))
    for _ in range(10):
        (await asyncio.wait_for(limiter.acquire(), 1)).release()
    eleventh = asyncio.ensure_future(limiter.acquire())
    await asyncio.sleep(0)  # one turn: a free permit would have been granted by now
    assert not eleventh.done()
    (await eleventh).release()


async def test_tokens_per_minute_count_the_estimate_and_charge_the_rest() -> None:
    limiter = ModelLimiter("openai:m", ProviderLimits(tokens_per_minute=1000))
    permit = await limiter.acquire(tokens=100)
    permit.release(tokens=900)  # it cost more than guessed: 800 more are charged
    (await asyncio.wait_for(limiter.acquire(tokens=0), 1)).release()  # the next pays them
    assert limiter._tokens is not None and not limiter._tokens.has_capacity(200)
    assert limiter._tokens.has_capacity(50)
    # One request larger than the whole minute goes alone rather than never.
    big = await asyncio.wait_for(
        ModelLimiter("openai:m", ProviderLimits(tokens_per_minute=10)).acquire(tokens=10**6), 1
    )
    big.release()
    limiter.close()


def test_a_models_table_beats_its_providers() -> None:
    limiter = ProviderLimiter(
        {
            "openai": ProviderLimits(max_concurrent=8),
            "openai:gpt-4o": ProviderLimits(max_concurrent=2),
            "anthropic": ProviderLimits(),  # nothing set: not limited
        }
    )
    own = limiter.limits_for("openai:gpt-4o")
    assert own is not None and own.max_concurrent == 2
    provider = limiter.limits_for("openai:gpt-4o-mini")
    assert provider is not None and provider.max_concurrent == 8
    assert not limiter.applies("anthropic:claude") and not limiter.applies("scripted:echo")
    # Each model has its own limiter (providers limit per model).
    assert limiter.model("openai:a") is not limiter.model("openai:b")


def test_limits_come_from_the_config_file(tmp_path: Path) -> None:
    home = tmp_path / "home"
    config = home / ".config" / "agentcell" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text(
        "[limits.openai]\nmax_concurrent = 4\nrequests_per_minute = 500\n\n"
        '[limits."openai:gpt-4o"]\ntokens_per_minute = 30000\n'
    )
    settings, _ = load_settings(workdir=tmp_path, home=home, env={})
    assert settings.limits["openai"].max_concurrent == 4
    assert settings.limits["openai"].requests_per_minute == 500
    assert settings.limits["openai:gpt-4o"].tokens_per_minute == 30000
    assert Settings().limits == {}  # off by default
    config.write_text("[limits.openai]\nmax_concurent = 4\n")
    with pytest.raises(ConfigError) as info:
        load_settings(workdir=tmp_path, home=home, env={})
    assert "limits.openai.max_concurent" in str(info.value)
    config.write_text("[limits.openai]\nmax_concurrent = 0\n")
    with pytest.raises(ConfigError, match="limits.openai.max_concurrent"):
        load_settings(workdir=tmp_path, home=home, env={})


async def test_a_childs_permits_all_come_back_when_it_ends() -> None:
    """What a child holds or waits for is returned when its relay ends (a crash too)."""
    limiter = ProviderLimiter({"openai": ProviderLimits(max_concurrent=2)})
    sent: list[Frame] = []
    child = ChildPermits(limiter, sent.append, start=asyncio.ensure_future)
    for rid in (1, 2, 3):
        child.on_request(PermitRequest(request_id=rid, model="openai:m", tokens=5))
    await until(lambda: len(sent) == 2, "two grants")
    assert {f.request_id for f in sent if isinstance(f, PermitGrant) and f.granted} == {1, 2}
    model = limiter.model("openai:m")
    assert model is not None and model.stats.waiting == 1
    child.on_done(PermitDone(request_id=1))  # done with one: the third gets it
    await until(lambda: len(sent) == 3, "the third grant")
    await child.close()  # the child is gone, holding 2 and 3
    assert model.stats.in_flight == 0 and model.stats.waiting == 0
    # A withdrawn request (cancelled in the child before the grant) takes nothing.
    other = ChildPermits(limiter, sent.append, start=asyncio.ensure_future)
    blockers = [await model.acquire(), await model.acquire()]
    other.on_request(PermitRequest(request_id=7, model="openai:m"))
    await until(lambda: model.stats.waiting == 1, "the request to queue")
    other.on_done(PermitDone(request_id=7))
    for permit in blockers:
        permit.release()
    await until(lambda: model.stats.waiting == 0, "the withdrawn request to leave the queue")
    assert model.stats.in_flight == 0
    await other.close()


async def test_a_child_cannot_open_permits_without_bound() -> None:
    limiter = ProviderLimiter({"openai": ProviderLimits(max_concurrent=1)})
    sent: list[Frame] = []
    child = ChildPermits(limiter, sent.append, start=asyncio.ensure_future)
    for rid in range(MAX_OPEN_PER_CHILD + 5):
        child.on_request(PermitRequest(request_id=rid, model="openai:m"))
    child.on_request(PermitRequest(request_id=0, model="openai:m"))  # a duplicate id
    refused = [f for f in sent if isinstance(f, PermitGrant) and not f.granted]
    assert len(refused) == 6
    assert "more than 16 permits" in refused[0].reason
    assert "duplicate" in refused[-1].reason
    await child.close()
    model = limiter.model("openai:m")
    assert model is not None and model.stats.in_flight == 0 and model.stats.waiting == 0


async def test_the_http_client_takes_a_permit_per_attempt(model_server: ModelServer) -> None:
    """In-process (the main agent's path): each attempt holds a permit while it streams,
    and a 429's Retry-After is reported with the permit it came on."""
    model_server.add(Reply(status=429, retry_after="0.05"), Reply(text="fine"))
    limiter = ProviderLimiter({"openai": ProviderLimits(max_concurrent=1)})
    model = OpenAIChatModel(
        "m", http=HttpOptions(base_url=model_server.openai_base_url, max_retries=2)
    )
    token = request_gate.set(limiter)
    try:
        response = await complete(model, ModelRequest(messages=[UserMessage(content="hi")]))
    finally:
        request_gate.reset(token)
        await model.aclose()
    stats = limiter.model("openai:m").stats  # type: ignore[union-attr]
    assert response.text == "fine"
    assert stats.granted == 2 and stats.in_flight == 0 and stats.pauses == 1


# -- across real child processes -------------------------------------------------------------


def worker_agent() -> AgentDefinition:
    return AgentDefinition(
        name="worker",
        description="answers once",
        system_prompt="You are a worker.",
        tools=[],
        model="openai:gpt-test",
        source="test",
    )


def limited_orchestrator(tmp_path: Path, server: ModelServer, limits: ProviderLimits, n: int):
    settings = Settings(
        model="openai:gpt-test",
        approval="allow",
        max_workers=n,
        warm_spares=n,
        model_options={"openai": {"base_url": server.openai_base_url, "max_retries": 4}},
        limits={"openai": limits},
    )
    return Orchestrator(
        settings=settings,
        workdir=tmp_path,
        agents=[worker_agent()],
        load_agent_files=False,
        record=False,
    )


class Counter:
    """What the server sees: requests inside the responder at once, the most ever."""

    def __init__(self) -> None:
        self.lock = threading.Condition()
        self.in_flight = 0
        self.most = 0
        self.arrivals: list[float] = []
        self.released = False

    def hold(self) -> None:
        with self.lock:
            self.in_flight += 1
            self.most = max(self.most, self.in_flight)
            self.arrivals.append(time.monotonic())
            self.lock.notify_all()
            self.lock.wait_for(lambda: self.released, timeout=STEP_TIMEOUT_S)
            self.in_flight -= 1

    def release(self) -> None:
        with self.lock:
            self.released = True
            self.lock.notify_all()


async def test_never_more_than_k_in_flight_across_children(
    spawned: SpawnRecorder, model_server: ModelServer, tmp_path: Path
) -> None:
    k, n = 2, 6
    counter = Counter()

    def responder(body: dict[str, Any], api: str) -> Reply:
        counter.hold()
        return Reply(text="done")

    model_server.responder = responder
    orch = limited_orchestrator(tmp_path, model_server, ProviderLimits(max_concurrent=k), n)
    try:
        async with orch:
            mapped = asyncio.ensure_future(
                orch.map("worker", [f"p{i}" for i in range(n)], concurrency=n)
            )
            limiter = orch.runner.limiter

            def decisive() -> bool:
                # K held at the server and every other child queued in the parent — or
                # more than K reached the server (the limit failed).
                model = limiter.model("openai:gpt-test")
                queued = model.stats.waiting if model is not None else 0
                return counter.in_flight > k or (counter.in_flight == k and queued == n - k)

            try:
                await until(decisive, "K requests at the server and the rest queued")
                assert counter.in_flight == k, f"{counter.in_flight} requests in flight at once"
            finally:
                counter.release()  # from here on the server answers at once
            results = await asyncio.wait_for(mapped, STEP_TIMEOUT_S)
    finally:
        counter.release()
    assert [r.status for r in results] == [RunStatus.COMPLETED] * n, [r.error for r in results]
    assert counter.most == k
    assert len(model_server.requests) == n
    model = orch.runner.limiter.model("openai:gpt-test")
    assert model is not None and model.stats.in_flight == 0 and model.stats.granted == n


async def test_a_429_storm_pauses_the_siblings(
    spawned: SpawnRecorder, model_server: ModelServer, tmp_path: Path
) -> None:
    """K requests are held at the server while the other children queue in the parent;
    then the server starts a storm: 429 with Retry-After to every request that reaches
    it for the next ``pause`` seconds. The K in flight meet it; with the pause shared,
    every sibling waits it out instead of provoking a 429 of its own."""
    k, n, pause = 2, 6, 0.5
    lock = threading.Lock()
    storm: dict[str, float] = {}
    rejected: list[float] = []
    answered: list[float] = []
    counter = Counter()

    def responder(body: dict[str, Any], api: str) -> Reply:
        if "until" not in storm:
            counter.hold()  # until the test starts the storm
        now = time.monotonic()
        with lock:
            reject = now < storm["until"]
            (rejected if reject else answered).append(now)
        if reject:
            return Reply(status=429, retry_after=str(pause), error_message="slow down")
        return Reply(text="done")

    model_server.responder = responder
    orch = limited_orchestrator(tmp_path, model_server, ProviderLimits(max_concurrent=k), n)
    try:
        async with orch:
            prompts = [f"p{i}" for i in range(n)]
            mapped = asyncio.ensure_future(orch.map("worker", prompts, concurrency=n))
            limiter = orch.runner.limiter

            def decisive() -> bool:
                model = limiter.model("openai:gpt-test")
                queued = model.stats.waiting if model is not None else 0
                return counter.in_flight > k or (counter.in_flight == k and queued == n - k)

            try:
                await until(decisive, "K requests at the server and the rest queued")
            finally:
                storm["until"] = time.monotonic() + pause
                counter.release()
            results = await asyncio.wait_for(mapped, STEP_TIMEOUT_S)
    finally:
        storm.setdefault("until", 0.0)
        counter.release()
    assert [r.status for r in results] == [RunStatus.COMPLETED] * n, [r.error for r in results]
    # Only the K in flight met the wall; nobody was sent into the pause, so the retries
    # are bounded by K (without the shared pause every queued sibling gets its own 429).
    assert len(rejected) == k, f"{len(rejected)} requests were answered 429"
    assert len(answered) == n
    assert len(model_server.requests) == n + k
    model = orch.runner.limiter.model("openai:gpt-test")
    assert model is not None and model.stats.pauses == k and model.stats.in_flight == 0


async def test_a_child_killed_holding_a_permit_gives_it_back(
    spawned: SpawnRecorder, model_server: ModelServer, tmp_path: Path
) -> None:
    """K=1: one child's request is at the server, its sibling queued in the parent. The
    one holding the permit is SIGKILLed; the sibling must get the slot and finish."""
    counter = Counter()
    model_server.responder = lambda body, api: (counter.hold(), Reply(text="done"))[1]
    orch = limited_orchestrator(tmp_path, model_server, ProviderLimits(max_concurrent=1), 2)
    started: dict[str, str] = {}  # description -> agent id
    pids: dict[str, int] = {}  # agent id -> pid

    def watch(event: Any) -> None:
        if isinstance(event, SubAgentStarted):
            started[event.description] = event.agent_id
        elif isinstance(event, SubAgentProcess):
            pids[event.agent_id] = event.pid

    try:
        async with orch:
            orch.bus.subscribe(watch)
            mapped = asyncio.ensure_future(orch.map("worker", ["p0", "p1"], concurrency=2))

            def one_held_one_queued() -> bool:
                model = orch.runner.limiter.model("openai:gpt-test")
                return counter.in_flight == 1 and model is not None and model.stats.waiting == 1

            await until(one_held_one_queued, "one request at the server and its sibling queued")
            prompt = model_server.requests[0].body["messages"][-1]["content"]
            holder = started[f"item {int(prompt[1:])}"]
            os.kill(pids[holder], signal.SIGKILL)
            # The sibling is granted the freed slot: its request reaches the server.
            await until(lambda: len(model_server.requests) == 2, "the sibling's request")
            counter.release()
            results = await asyncio.wait_for(mapped, STEP_TIMEOUT_S)
    finally:
        counter.release()
    by_agent = {r.agent_id: r for r in results}
    assert by_agent[holder].status is RunStatus.CRASHED
    (sibling,) = [r for r in results if r.agent_id != holder]
    assert sibling.status is RunStatus.COMPLETED, sibling.error
    stats = orch.runner.limiter.model("openai:gpt-test").stats  # type: ignore[union-attr]
    assert stats.in_flight == 0 and stats.granted == 2


async def test_the_main_agent_takes_permits_like_a_child(
    spawned: SpawnRecorder, model_server: ModelServer, tmp_path: Path
) -> None:
    model_server.add("hello")
    orch = limited_orchestrator(tmp_path, model_server, ProviderLimits(max_concurrent=1), 1)
    async with orch:
        report = await orch.run("hi")
        assert report.ok, report.error
        model = orch.runner.limiter.model("openai:gpt-test")
        assert model is not None and model.stats.granted == 1 and model.stats.in_flight == 0
    # The gate was the run's own: nothing outside it is limited.
    assert request_gate.get() is None
