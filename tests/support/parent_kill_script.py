"""Run by test_parent_kill: own a pool with busy children and grandchildren, then wait.

Prints one JSON line with every pid it made, then blocks until it is killed.
"""

from __future__ import annotations

import asyncio
import json
import sys


async def main() -> None:
    from agentcell.orchestrator.backends._forkserver import WorkerPool
    from agentcell.orchestrator.backends._starters import forkserver_pid
    from pool_util import first_frame, start

    pool = await WorkerPool(max_workers=8, warm=2).start()
    await pool.warmed()
    children, grandchildren = [], []
    for i in range(4):
        lease = await pool.acquire()
        op = "grandchild" if i % 2 else "hang"
        await lease.send(start(op, then="hang", own_group=i == 3))
        notice = await first_frame(lease)
        children.append(lease.pid)
        if op == "grandchild":
            grandchildren.append(int(notice.event.message.split()[-1]))  # type: ignore[union-attr]
    spares = [pid for pid in pool.pids() if pid not in children]
    report = {
        "children": children,
        "spares": spares,
        "grandchildren": grandchildren,
        "forkserver": forkserver_pid(),
    }
    print(json.dumps(report), flush=True)
    await asyncio.Event().wait()  # until SIGKILL


if __name__ == "__main__":
    sys.path.insert(0, sys.argv[1])
    asyncio.run(main())
