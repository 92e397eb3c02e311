"""Model strings → models: ``openai:NAME``, ``anthropic:NAME``, ``scripted:NAME``."""

from __future__ import annotations

from typing import Any

from agentcell.worker.models._base import Model, ModelError, ModelErrorKind
from agentcell.worker.models._scripted import SCRIPTED_MODELS

PROVIDERS = ("openai", "anthropic", "scripted")


def resolve_model(spec: str, options: dict[str, Any] | None = None) -> Model:
    """Build the model a model string names. ``options`` go to the provider's constructor,
    flat as a config's ``[model_options.PROVIDER]`` holds them: ``HttpOptions``' fields
    (``base_url``, ``api_key``, ``timeout``, ``transport``, …) as its ``http``."""
    provider, sep, name = spec.partition(":")
    options = dict(options or {})
    if not sep or not name:
        raise ModelError(
            ModelErrorKind.CONFIG,
            f"model {spec!r} has no provider: write PROVIDER:NAME, e.g. openai:gpt-4o-mini, "
            "anthropic:claude-sonnet-4-5 or scripted:echo",
        )
    if provider == "openai":
        from agentcell.worker.models._http_options import HttpOptions
        from agentcell.worker.models._openai import OpenAIChatModel

        return OpenAIChatModel(name, http=HttpOptions.take(options), **options)
    if provider == "anthropic":
        from agentcell.worker.models._anthropic import AnthropicModel
        from agentcell.worker.models._http_options import HttpOptions

        return AnthropicModel(name, http=HttpOptions.take(options), **options)
    if provider == "scripted":
        factory = SCRIPTED_MODELS.get(name)
        if factory is None:
            known = ", ".join(sorted(SCRIPTED_MODELS))
            raise ModelError(
                ModelErrorKind.CONFIG, f"no scripted model named {name!r} (built in: {known})"
            )
        model: Model = factory()
        return model
    raise ModelError(
        ModelErrorKind.CONFIG,
        f"unknown model provider {provider!r} in {spec!r}: use one of {', '.join(PROVIDERS)}",
    )
