"""Run one zeromem service process for the reliability suite:

    python -m tests.reliability.service_main worker [INDEX COUNT]
    python -m tests.reliability.service_main serve

The same entry points `zeromem worker` and `zeromem serve` call (``run_worker``,
``run_read_services``) with settings from the ZEROMEM_* environment, without going
through the CLI's argument parser: the scenarios test the services, and stay runnable
while the CLI's subcommands are being changed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys

from zeromem.settings import Settings


async def _main(argv: list[str]) -> None:
    settings = Settings.from_env()
    if argv[0] == "worker":
        from zeromem.worker.service import run_worker

        # INDEX COUNT: static shards; none: dynamic membership
        static = (int(argv[1]), int(argv[2])) if len(argv) > 2 else None
        service = run_worker(settings, static)
    elif argv[0] == "serve":
        from zeromem.serve import run_read_services

        service = run_read_services(settings)
    else:
        raise SystemExit(f"unknown service {argv[0]!r}")
    task = asyncio.ensure_future(service)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):  # SIGTERM: a clean stop (SIGKILL is the crash)
        loop.add_signal_handler(sig, task.cancel)
    with contextlib.suppress(asyncio.CancelledError):
        await task


if __name__ == "__main__":
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(process)d %(name)s %(levelname)s %(message)s"
    )
    try:
        import uvloop  # what the real services run on
    except ImportError:
        asyncio.run(_main(sys.argv[1:]))
    else:
        uvloop.run(_main(sys.argv[1:]))
