"""The examples run on a fresh machine: each starts its own stack. Run here in short mode,
all three at once, as subprocesses (exactly as a reader would run them)."""

from __future__ import annotations

import asyncio
import re
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SCRIPTS = ["function_calling.py", "langgraph_agent.py", "mcp_session.py"]


async def _run(script: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(EXAMPLES / script),
        "--short",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), 90)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    return proc.returncode or 0, out.decode(), err.decode()


@pytest.mark.timeout(120)
async def test_examples_run_and_report_savings() -> None:
    results = await asyncio.gather(*(_run(script) for script in SCRIPTS))
    for script, (code, out, err) in zip(SCRIPTS, results, strict=True):
        assert code == 0, f"{script} failed:\n{out}\n{err}"
        saved = re.search(r"^tokens saved: (-?\d+)$", out, re.MULTILINE)
        assert saved is not None, f"{script} printed no savings:\n{out}"
        assert int(saved.group(1)) > 0, f"{script}:\n{out}"
