"""``agentcell trust``: honour a project's own configuration (it may only tighten until then)."""

from __future__ import annotations

from pathlib import Path

import click
from agentcell.orchestrator.config._load import user_config_path
from agentcell.orchestrator.config._trust import revoke, trust, trusted_folders


def run_trust(folder: Path | None, *, list_them: bool, revoke_folder: Path | None) -> None:
    user = user_config_path()
    if list_them:
        folders = trusted_folders(user)
        for path in folders:
            click.echo(path)
        if not folders:
            click.echo("no trusted folders", err=True)
        return
    if revoke_folder is not None:
        if not revoke(revoke_folder, user):
            raise ValueError(f"{revoke_folder} is not trusted (see 'agentcell trust --list')")
        click.echo(f"no longer trusted: {revoke_folder.resolve()}")
        return
    stored = trust(folder or Path("."), user)
    click.echo(f"trusted: {stored} (its agentcell.toml and agent files now apply in full)")
