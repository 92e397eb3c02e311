"""The ``agentcell`` command."""

from __future__ import annotations

import click


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="agentcell")
def cli() -> None:
    """Run every sub-agent of an LLM agent in its own OS process."""


@cli.command()
def demo() -> None:
    """An offline tour of agentcell on the built-in scripted model."""
    click.echo("agentcell demo: the agent engine is not built yet; see the README.")


def main() -> None:
    cli()
