"""Teams of sub-agents that talk to each other through mailboxes (empty so far)."""
