"""What prompt caching saves on a fan-out: dollars at list prices, with and without it.

    python -m bench.cache_cost            # 32 sub-agents of one type, 5-minute TTL
    python -m bench.cache_cost --n 8 --ttl 1h --json

Runs ``Orchestrator.map`` over N prompts for one agent type (a long system prompt and the
file tools: what every sub-agent of that type sends first) against the fake Anthropic API
of ``bench.anthropic_cache_server``, which reports cache reads and writes for the request's
breakpoints as the real one does. Once with ``prompt_cache`` set, once with it off; each
run's tokens are billed at Claude Sonnet 4.5's list prices (USD per million tokens: input
3, output 15, cache read 0.30, cache write 3.75 for 5 minutes, 6 for an hour) by agentcell's
own ledger, and checked against the server's own count.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
from pathlib import Path
from typing import Any

from agentcell.orchestrator import AgentDefinition, Orchestrator, Settings
from agentcell.orchestrator.config._settings import Price

from bench.anthropic_cache_server import CachingAnthropicServer

MODEL = "anthropic:claude-sonnet-4-5"
INPUT, OUTPUT = 3.0, 15.0  # USD per million tokens (Claude Sonnet 4.5, 2026)
WRITE_FACTOR = {"5m": 1.25, "1h": 2.0, "off": 1.25}

#: A sub-agent type's instructions, long as real ones are (~6k tokens): what N of them share.
SYSTEM_PROMPT = "You review one Python file for defects and report them briefly.\n\n" + "\n".join(
    f"Rule {i}: check that every function handles case {i} (inputs, errors, resources) "
    f"and say which line breaks it, if any; never rewrite the file, only report."
    for i in range(160)
)


def price(ttl: str) -> Price:
    return Price(
        input=INPUT, output=OUTPUT, cache_read=INPUT * 0.1, cache_write=INPUT * WRITE_FACTOR[ttl]
    )


async def fan_out(n: int, prompt_cache: str, workdir: Path, concurrency: int = 8) -> dict[str, Any]:
    """One fan-out of ``n`` sub-agents; its tokens and its cost at list prices."""
    with CachingAnthropicServer() as server:
        options = {
            "base_url": server.base_url,
            "api_key": "sk-ant-fake",
            "prompt_cache": prompt_cache,
        }
        orch = Orchestrator(
            settings=Settings(
                approval="allow",
                max_workers=concurrency,
                warm_spares=1,
                model_options={"anthropic": options},
                prices={MODEL: price(prompt_cache)},
            ),
            agents=[
                AgentDefinition(
                    name="reviewer",
                    description="reviews one file",
                    system_prompt=SYSTEM_PROMPT,
                    tools=["read_file", "grep", "glob"],
                    model=MODEL,
                    source="bench",
                )
            ],
            workdir=workdir,
            load_agent_files=False,
            record=False,
        )
        async with orch:
            prompts = [f"Review src/module_{i}.py" for i in range(n)]
            results = await orch.map("reviewer", prompts, concurrency=concurrency)
        wire = server.totals()
    failed = [r.error for r in results if not r.ok]
    if failed:
        raise RuntimeError(f"{len(failed)} sub-agents failed, e.g.: {failed[0]}")
    total = orch.total_usage
    return {
        "n": n,
        "prompt_cache": prompt_cache,
        "input_tokens": total.input_tokens - total.cache_read_tokens - total.cache_write_tokens,
        "cache_read_tokens": total.cache_read_tokens,
        "cache_write_tokens": total.cache_write_tokens,
        "output_tokens": total.output_tokens,
        "cost_usd": orch.total_cost_usd,
        "server": wire,
    }


async def compare(n: int, ttl: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="agentcell-cache-cost-") as tmp:
        cached = await fan_out(n, ttl, Path(tmp))
        plain = await fan_out(n, "off", Path(tmp))
    saved = None
    if cached["cost_usd"] and plain["cost_usd"]:
        saved = 1 - cached["cost_usd"] / plain["cost_usd"]
    return {"model": MODEL, "with_cache": cached, "without_cache": plain, "saved": saved}


def table(doc: dict[str, Any]) -> str:
    rows = [
        "| run | input | cache read | cache write | output | cost (USD) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for key in ("with_cache", "without_cache"):
        r = doc[key]
        rows.append(
            f"| {r['n']} sub-agents, prompt_cache={r['prompt_cache']} | {r['input_tokens']} | "
            f"{r['cache_read_tokens']} | {r['cache_write_tokens']} | {r['output_tokens']} | "
            f"{r['cost_usd']:.4f} |"
        )
    if doc["saved"] is not None:
        rows.append(f"\nCaching saves {doc['saved']:.0%} of the fan-out's cost ({doc['model']}).")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.cache_cost", description=__doc__)
    parser.add_argument("--n", type=int, default=32, help="sub-agents in the fan-out")
    parser.add_argument("--ttl", choices=("5m", "1h"), default="5m")
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    args = parser.parse_args(argv)
    doc = asyncio.run(compare(args.n, args.ttl))
    print(json.dumps(doc, indent=2) if args.json else table(doc))


if __name__ == "__main__":
    main()
