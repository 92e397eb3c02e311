"""What machine and software a run was measured on."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import psutil

_ROOT = Path(__file__).resolve().parent.parent

PACKAGES = (
    "agentcell",
    "msgspec",
    "multiprocess",
    "httpx",
    "httpcore",
    "psutil",
    "uvloop",
    "deepagents",
    "langchain",
    "langgraph",
    "langchain-openai",
    "openai-agents",
    "openai",
    "pydantic-ai-slim",
    "pydantic",
    "matplotlib",
)


def describe() -> dict[str, Any]:
    versions = {}
    for package in PACKAGES:
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = None
    return {
        "cpus": os.cpu_count(),
        "cpu_model": _cpu_model(),
        "memory_gib": psutil.virtual_memory().total / 2**30,
        "python": platform.python_version(),
        "implementation": sys.implementation.name,
        "platform": platform.platform(terse=True),
        "load_average": os.getloadavg(),
        "packages": versions,
        "commit": _git("rev-parse", "--short", "HEAD"),
        "uncommitted_changes": bool(_git("status", "--porcelain", "--untracked-files=no")),
    }


def _git(*args: str) -> str:
    try:
        done = subprocess.run(["git", *args], capture_output=True, text=True, cwd=_ROOT, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout.strip()


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()
