"""The ``agentcell`` command's entry point (also ``python -m agentcell``).

It is tiny on purpose: Ctrl-C while the program is still importing (a second or so on a
slow machine) ends it quietly with exit code 130 instead of a ``KeyboardInterrupt``
traceback. Once the command line is loaded, its own handling takes over.
"""

from __future__ import annotations

import os
import signal


def _quiet_interrupt(signum: int, frame: object) -> None:
    os.write(2, b"\n")
    os._exit(130)


def main() -> None:
    previous = signal.signal(signal.SIGINT, _quiet_interrupt)
    from agentcell.orchestrator.cli import main as cli_main

    signal.signal(signal.SIGINT, previous)
    cli_main()


if __name__ == "__main__":
    main()
