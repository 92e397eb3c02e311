"""The parent's key masked in what the relay hands a child (``_key_mask``): whole
values, split across chunks at every point, in header values and error words."""

from __future__ import annotations

import base64

import pytest
from agentcell.orchestrator.config._settings import Settings
from agentcell.orchestrator.model_relay._key_mask import MASK, KeyMask, header_secrets, url_secrets
from agentcell.orchestrator.model_relay._relay import ModelPools, parent_transport
from agentcell.protocol import AgentSpec
from agentcell.worker.models import ModelError, Retry
from hypothesis import given
from hypothesis import strategies as st

KEY = b"sk-mask-test-key-5150"


def streamed(mask: KeyMask, chunks: list[bytes]) -> bytes:
    return b"".join(mask.stream(chunk) for chunk in chunks) + mask.flush()


def test_the_secrets_are_the_credential_headers_values_and_their_bare_keys() -> None:
    headers = {
        "content-type": "application/json",  # not a credential, however long
        "Authorization": "Bearer sk-openai-abcdef",
        "x-api-key": "sk-ant-123456789",
        "api-key": "short",  # too short to mask anywhere
        "anthropic-version": "2023-06-01",
    }
    assert header_secrets(headers) == [
        b"Bearer sk-openai-abcdef",
        b"sk-ant-123456789",
        b"sk-openai-abcdef",
    ]
    assert header_secrets({"authorization": "Bearer  "}) == []
    assert header_secrets({"x-api-key": "1234567"}) == []  # 7 characters: too short
    assert header_secrets({"x-api-key": "12345678"}) == [b"12345678"]
    # Longest first, whatever the letters: the longer value would hold the shorter.
    assert header_secrets({"api-key": "zz sk-aaaaaaaa"}) == [b"zz sk-aaaaaaaa", b"sk-aaaaaaaa"]
    assert header_secrets({}) == []


def test_a_secret_in_one_chunk_is_masked_and_the_rest_passes_unchanged() -> None:
    mask = KeyMask([KEY])
    body = b'data: {"echo": "Bearer ' + KEY + b'", "n": 1}\n\n'
    assert mask.stream(body) == body.replace(KEY, MASK)
    assert mask.flush() == b""
    assert mask.stream(b"data: [DONE]\n\n") == b"data: [DONE]\n\n"  # nothing held back


def test_the_longest_secret_is_masked_whole() -> None:
    mask = KeyMask([KEY, b"Bearer " + KEY])
    assert mask.stream(b"Bearer " + KEY + b" and " + KEY) == MASK + b" and " + MASK
    mask = KeyMask([b"sk-aaaaaaaa", b"zz-sk-aaaaaaaa"])  # the longer sorts last by letters
    assert mask.text("<zz-sk-aaaaaaaa>") == "<[REDACTED]>"


def test_a_secret_of_the_shortest_length_masked_is_masked() -> None:
    assert KeyMask([b"12345678"]).text("a 12345678 b") == "a [REDACTED] b"
    assert KeyMask([b"1234567"]).text("a 1234567 b") == "a 1234567 b"


def test_a_tail_that_may_begin_the_key_waits_for_the_next_chunk() -> None:
    mask = KeyMask([KEY])
    assert mask.stream(b"data: sk-ma") == b"data: "  # "sk-ma" begins the key: held
    assert mask.stream(b"x-sk-") == b"sk-max-"  # not the key after all; "sk-" may be
    assert mask.stream(KEY[3:] + b"\n") == MASK + b"\n"
    assert mask.stream(b"tail s") == b"tail "
    assert mask.stream(b"s") == b"s"  # "ss": the second may begin it, the first not
    assert mask.flush() == b"s"  # the stream ended: it begins nothing
    assert mask.flush() == b""


def test_a_long_chunk_that_ends_one_byte_short_of_the_key_holds_that_tail() -> None:
    mask = KeyMask([KEY])
    assert mask.stream(b"x" * 50 + KEY[:-1]) == b"x" * 50  # the longest proper prefix
    assert mask.stream(KEY[-1:] + b"\n") == MASK + b"\n"


def test_a_key_split_one_byte_per_chunk_never_leaves_whole_or_in_part() -> None:
    mask = KeyMask([KEY])
    out = [mask.stream(KEY[i : i + 1]) for i in range(len(KEY))]
    assert out == [b""] * (len(KEY) - 1) + [MASK]  # held until whole, then masked
    assert mask.stream(b"!") == b"!"


def test_header_values_and_error_words_are_masked() -> None:
    mask = KeyMask([KEY])
    assert (
        mask.text(f"invalid key {KEY.decode()} (check it)") == "invalid key [REDACTED] (check it)"
    )
    assert mask.text("nothing to hide") == "nothing to hide"


def test_without_secrets_nothing_is_touched_or_held() -> None:
    for mask in (KeyMask([]), KeyMask([b"short"])):
        assert not mask
        assert mask.stream(b"short s") == b"short s"
        assert mask.text("short") == "short"
        assert mask.flush() == b""


@given(
    st.lists(st.sampled_from([b"", b"x", b"s", b"sk-", b"\n\n", b"sk-mask", KEY, b"Bearer "])),
    st.lists(st.integers(min_value=0, max_value=400), max_size=12),
)
def test_however_the_stream_is_cut_the_child_gets_the_masked_stream(
    parts: list[bytes], cuts: list[int]
) -> None:
    body = b"".join(parts)
    points = sorted({min(c, len(body)) for c in cuts})
    chunks = [body[a:b] for a, b in zip([0, *points], [*points, len(body)], strict=True)]
    mask = KeyMask([KEY, b"Bearer " + KEY])
    out = streamed(mask, chunks)
    assert out == streamed(KeyMask([KEY, b"Bearer " + KEY]), [body])  # whatever the cuts
    assert KEY not in out


def test_a_held_tail_as_long_as_a_secret_can_be_goes_masked_when_the_stream_ends() -> None:
    # An answer cut (or ended) one byte short of the key: its first 20 bytes are no
    # less the key's.
    mask = KeyMask([KEY])
    assert mask.stream(b"data: " + KEY[:-1]) == b"data: "
    assert mask.flush() == MASK
    mask.stream(b"x sk-mask")  # 7 bytes: a key's public prefix at most
    assert mask.flush() == b"sk-mask"


def test_a_base_urls_password_its_basic_credential_and_credential_query_values_are_secrets() -> (
    None
):
    url = (
        "https://proxyuser:p%40ssw0rd-long@proxy.example:8443/v1"
        "?api-key=azure%2Fkey-98765&api-version=2024-10-21&v=1"
    )
    found = url_secrets(url)
    assert b"azure%2Fkey-98765" in found and b"azure/key-98765" in found  # as written, as sent
    assert b"2024-10-21" not in found  # not a credential: answers may well mention it
    assert b"p%40ssw0rd-long" in found and b"p@ssw0rd-long" in found
    # The Basic credential as an HTTP client sends it: from the decoded user and password.
    assert base64.b64encode(b"proxyuser:p@ssw0rd-long") in found
    assert b"proxyuser" not in found  # a user name beside a password is no secret
    assert url_secrets("https://tok-0123456789@gateway.example/v1") == [b"tok-0123456789"] * 2
    assert url_secrets("http://127.0.0.1:8000/v1") == []
    masked = KeyMask(found).text("The API version 2024-10-21 was released")
    assert masked == "The API version 2024-10-21 was released"


async def test_a_relay_error_quoting_the_base_url_reaches_the_child_without_its_password() -> None:
    # Nothing listens on port 9 here: the parent's transport fails, in words that quote
    # the URL; what the child would be handed is masked.
    base = "http://proxyuser:proxy-pass-0123456@127.0.0.1:9/v1"
    settings = Settings(
        model="openai:test",
        model_options={"openai": {"base_url": base, "api_key": "sk-the-parents-key-1234"}},
    )
    spec = AgentSpec(agent_id="a1", agent_type="t", prompt="p", model="openai:test")
    pools = ModelPools()
    try:
        transport, secrets = parent_transport(spec, settings, pools, 0)
        with pytest.raises((Retry, ModelError)) as failure:
            await transport.open(b'{"model": "test"}')
    finally:
        await pools.aclose()
    words = str(getattr(failure.value, "cause", failure.value))
    assert "proxy-pass-0123456" in words  # the parent's own words quote it...
    shown = KeyMask(secrets).text(words)
    assert "proxy-pass-0123456" not in shown and "[REDACTED]" in shown  # ...the child's not


def test_the_shortest_secret_length_holds_for_url_values_and_held_tails() -> None:
    assert url_secrets("http://h.example/v1?key=1234567") == []  # 7: too short to mask
    assert url_secrets("http://h.example/v1?key=12345678") == [b"12345678"] * 2
    mask = KeyMask([KEY])
    assert mask.stream(b"x " + KEY[:8]) == b"x "  # exactly 8 bytes of the key held...
    assert mask.flush() == MASK  # ...are masked when the stream ends there
