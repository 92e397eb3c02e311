"""What a run writes about itself, from the agent's own process.

_transcript   one JSON Lines transcript per agent, written through a private descriptor
_chain        every line chained and keyed, so that no rewrite goes unseen
_redact       secrets kept out of records and progress output
"""
