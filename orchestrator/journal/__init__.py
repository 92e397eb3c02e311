"""A run's journal: what the parent must not lose when it dies.

_journal   the journal of one run, as the parent writes it while the run goes
_file      the file: append-only records, each whole or seen to be cut
_delta     a model request kept as what the agent's previous one did not have
_place     where journals live (outside every workdir), the live run's lock, a run's state
_replay    a killed run's journal read back as what its resume serves again
_main_model  the main agent's answers and tool calls journaled, and replayed
"""
