"""Imported last by the raw floor's fork server: freeze what is loaded.

Objects the fork server has when it forks are shared with every child until written to;
the collector's first pass in a child would write to all of them (copying every page),
unless they are frozen out of its reach first. agentcell's fork server does the same.
"""

import gc

gc.freeze()
