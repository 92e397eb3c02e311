"""The README's TOML examples load as written: each ```toml block, copied as it stands
into ``~/.config/agentcell/config.toml``, is read the way agentcell reads a user's file
and loads with no problem."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from agentcell.orchestrator.config._load import load_settings, user_config_path
from agentcell.orchestrator.config._settings import Settings
from places import ROOT

README = ROOT / "README.md"
DOCS = ROOT / "docs"
_TOML_BLOCK = re.compile(r"^```toml\n(.*?)^```$", flags=re.S | re.M)


def toml_blocks(path: Path) -> list[str]:
    return _TOML_BLOCK.findall(path.read_text())


def configuration_example() -> str:
    """The first ```toml block under the README's "## Configuration" heading."""
    text = README.read_text()
    heading = re.search(r"^## Configuration$", text, flags=re.M)
    assert heading is not None, "README.md has no '## Configuration' heading"
    section = text[heading.end() :]
    section = section[: m.start()] if (m := re.search(r"^## ", section, flags=re.M)) else section
    found = _TOML_BLOCK.search(section)
    assert found is not None, "README.md: no ```toml block under '## Configuration'"
    return found.group(1)


def load_as_user_config(text: str, tmp_path: Path) -> Settings:
    """``text`` as the user's own config file, loaded as `agentcell run` loads it."""
    home = tmp_path / "home"
    config = user_config_path(home, env={})
    config.parent.mkdir(parents=True)
    config.write_text(text)
    workdir = tmp_path / "work"
    workdir.mkdir()
    settings, sources = load_settings(workdir=workdir, home=home, env={})
    assert str(config) in sources
    return settings


def test_the_configuration_example_loads_with_every_key_where_it_is_meant(
    tmp_path: Path,
) -> None:
    settings = load_as_user_config(configuration_example(), tmp_path)
    # The keys written after the tables' are top-level settings, not a limit's keys.
    assert settings.max_processes == 512 and settings.tmp_size_mb == 512
    assert settings.sandbox == "workspace" and settings.network is False
    assert settings.limits["openai:gpt-4o"].model_dump(exclude_none=True) == {"max_concurrent": 2}
    assert settings.max_workers == 32 and settings.subagent_timeout_s == 600
    assert settings.budgets.max_subagents == 500
    assert settings.prices["openai:gpt-4o-mini"].output == 0.60


def _every_block() -> list[tuple[str, int]]:
    files = [README, *sorted(DOCS.glob("*.md"))]
    return [(path.name, i) for path in files for i in range(len(toml_blocks(path)))]


def test_the_readme_has_toml_examples() -> None:
    assert len(toml_blocks(README)) >= 5


@pytest.mark.parametrize(("name", "index"), _every_block())
def test_every_toml_example_loads_as_a_user_config(name: str, index: int, tmp_path: Path) -> None:
    path = README if name == README.name else DOCS / name
    load_as_user_config(toml_blocks(path)[index], tmp_path)
