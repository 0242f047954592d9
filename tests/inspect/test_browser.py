"""The inspector in a real browser: headless Chromium (Debian's, driven by Playwright,
which never downloads one), against the real servers of the test fixtures.

Runs with ``make test-browser`` (``ZEROMEM_BROWSER_TESTS=1``), which installs Chromium
with apt-get and Playwright with pip. Screenshots of every view, at 1280 px and on a
phone's width, go to ``ZEROMEM_ARTIFACTS`` (default ``test-artifacts/browser``);
``make inspector-screenshots`` copies one of each view to ``docs/inspector/``.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.inspect.conftest import Inspector
from zeromem import naming
from zeromem.bus import connect_nats

pytestmark = pytest.mark.skipif(
    os.environ.get("ZEROMEM_BROWSER_TESTS") != "1",
    reason="browser tests run with `make test-browser`",
)

CHROMIUM = os.environ.get("ZEROMEM_CHROMIUM", "/usr/bin/chromium")
# The flags of a quiet, self-contained headless run: nothing fetched, nothing synced.
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
ARTIFACTS = Path(os.environ.get("ZEROMEM_ARTIFACTS", "test-artifacts/browser"))
WIDE = {"width": 1280, "height": 860}
PHONE = {"width": 390, "height": 844}
LIVE_WITHIN_S = 1.0  # the bound: a change shows on the page within a second of a put


@pytest.fixture(scope="module")
def artifacts() -> Path:
    shutil.rmtree(ARTIFACTS, ignore_errors=True)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS


@pytest.fixture
async def browser() -> AsyncIterator[Any]:
    from playwright.async_api import async_playwright

    async with async_playwright() as playwright:
        chromium = await playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        try:
            yield chromium
        finally:
            await chromium.close()


async def logged_in(browser: Any, inspector: Inspector, who: str, viewport: dict[str, int]) -> Any:
    """A page of a new browser context, logged in through the login form."""
    context = await browser.new_context(viewport=viewport, device_scale_factor=1)
    page = await context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    page.errors = errors
    await page.goto(inspector.base + "/login")
    await page.fill("input[name=token]", inspector.tokens[who])
    await page.click("button[type=submit]")
    await page.wait_for_load_state("networkidle")
    return page


# What a support agent's memory of one user and one task looks like after a few days.
CONVERSATION = (
    "asked which language the invoice for October is in",
    "answered in English by mistake; the user asked again for Chinese",
    "asked for the invoice export as CSV instead of PDF",
    "the user says the language setting in the portal keeps resetting to English",
    "shared the order number 88-1042 for the missing invoice",
    "asked whether VAT is included in the monthly plan price",
    "complained that the export took more than ten minutes yesterday",
    "wants invoices sent to the finance mailbox, not to their own address",
    "asked to split the annual invoice into four quarterly invoices",
    "confirmed the billing address in Lisbon is correct",
    "asked how to download all 2026 invoices at once",
    "prefers a short summary first, details only when asked",
)
TOOL_RESULTS = (
    "exported 400 invoices to CSV v2 in 41 s, 3 skipped for missing tax id",
    "tax id lookup failed for 3 customers, retried with the EU registry",
    "export job 7731 resumed after a worker restart at row 812",
    "uploaded invoices-2026-10.csv to the finance bucket, 1.2 MB",
    "validation: 1,200 rows, 0 duplicate invoice numbers, totals match the ledger",
    "sent the export link to finance@, delivery confirmed",
)


async def seed(inspector: Inspector) -> None:
    """A small fleet's memories: two users, a task, decisions, a sensitive memory, one
    archived, and recalls by three agents (the savings)."""
    planner = await inspector.agent(inspector.a, "planner")
    await planner.put(
        "user:u10086:pref_lang",
        {"lang": "zh"},
        content="prefers answers in Chinese",
        type="user_preference",
        tags=["lang"],
    )
    await planner.put(
        "user:u10086:city",
        "Lisbon",
        content="lives in Lisbon since spring",
        references=["user:u10086:pref_lang"],
        ttl=7 * 86400,
    )
    await planner.put(
        "user:u10086:tone",
        "brief",
        content="wants short answers, no small talk",
        type="user_preference",
    )
    await planner.put("user:u10086:api_token", "sk-live-123", content="token for the billing API")
    await planner.put(
        "user:u10086:login",
        {"user": "ana", "password": "hunter2"},
        content="login for the billing portal, answer in Chinese",
    )
    for i, text in enumerate(CONVERSATION):
        await planner.put(f"user:u10086:msg{i:02d}", i, content=text, type="message")
    for i, text in enumerate(TOOL_RESULTS):
        await planner.put(
            f"task:t42:step{i:02d}",
            {"ok": True, "step": i},
            content=text,
            type="tool_result",
            tags=["billing"],
        )
    await planner.put(
        "task:t42:status",
        "running",
        content="invoice export running",
        type="task_state",
        tags=["billing"],
    )
    await planner.put(
        "task:t42:decision",
        "csv",
        content="decided: export invoices as CSV v2",
        type="decision",
        tags=["billing"],
    )
    await planner.put("user:u2:pref_lang", "en", content="prefers English", type="user_preference")
    await planner.put(
        "session:s1:draft", "x", content="a draft from an old session", wait="applied"
    )
    await planner.archive("session:s1", older_than=time.time() + 1)
    await planner.patch(
        "task:t42:status", {"rows": 1200}, content="invoice export at 1,200 rows", wait="applied"
    )
    await planner.feedback("user:u10086:pref_lang", "important", wait="applied")
    coder = await inspector.agent(inspector.a, "coder")
    reviewer = await inspector.agent(inspector.a, "reviewer")
    turns = (
        (planner, "which language should I answer in", ["user:u10086"]),
        (coder, "invoice export format", ["task:t42"]),
        (reviewer, "what did we decide", ["task:t42", "user:u10086"]),
    )
    for turn in range(6):
        for agent, query, owners in turns:
            await agent.recall(
                query, owners=owners, k=3, budget=120, history_tokens=1500 + 400 * turn
            )


async def load_all(page: Any, more: str, rows: str) -> list[str]:
    """Click the "more" button (an htmx request for the next page) until there is none;
    the rows' data-key or data-owner, in page order."""
    for _ in range(50):
        button = page.locator(more)
        if not await button.count():
            break
        count = await page.locator(rows).count()
        await button.click()
        await page.locator(rows).nth(count).wait_for()
    return await page.eval_on_selector_all(
        rows, "els => els.map(e => e.dataset.key || e.dataset.owner)"
    )


async def shot(page: Any, artifacts: Path, name: str) -> None:
    await page.evaluate("window.scrollTo(0, 0)")  # the sticky header at the top of the shot
    await page.wait_for_timeout(300)  # fonts and the last swap settled
    await page.screenshot(path=str(artifacts / f"{name}.png"), full_page=True)


async def fits(page: Any, width: int) -> None:
    """Usable on that width: the document scrolls vertically only (tables scroll inside
    their cards)."""
    overflow = await page.evaluate("document.documentElement.scrollWidth")
    assert overflow <= width + 1, f"{page.url} is {overflow} px wide on a {width} px screen"


async def test_browse_recall_live_and_dead_letters_in_chromium(
    inspector: Inspector, browser: Any, artifacts: Path
) -> None:
    await seed(inspector)
    t = f"/t/{inspector.a}"
    page = await logged_in(browser, inspector, "a", WIDE)

    # --- memories: from the owners to one memory ----------------------------------------
    assert page.url.endswith(f"{t}/memories")
    owners = await load_all(page, "#owner-list li.more button", ".owner")
    assert owners == ["task:t42", "user:u10086", "user:u2"]  # the archived session: not live
    await page.click('.owner[data-owner="user:u10086"] a')
    await page.wait_for_selector('tr.memory-row[data-key="user:u10086:api_token"]')
    keys = await load_all(page, "#memory-rows tr.more button", "tr.memory-row")
    assert len(keys) == 17 and keys == sorted(keys)  # every memory of the owner, in key order
    masked = await page.inner_text('tr.memory-row[data-key="user:u10086:api_token"] td.content')
    assert masked == "masked"
    await shot(page, artifacts, "memories")
    await page.click('tr.memory-row[data-key="user:u10086:city"] td.key a')
    await page.wait_for_selector("#history-list li")
    assert await page.inner_text("#content") == "lives in Lisbon since spring"
    assert "expires" in await page.inner_text("#ttl")
    versions = await page.eval_on_selector_all(
        "#history-list li", "els => els.map(e => e.dataset.version)"
    )
    assert versions == ["1"]
    await page.click("#references a.ref")  # a reference is a link to its memory
    await page.wait_for_selector("#history-list li")
    assert (await page.get_attribute("#memory", "data-key")) == "user:u10086:pref_lang"
    await shot(page, artifacts, "memory")

    # --- recall playground: the bars and the reasons are the API's explain reply ---------
    await page.goto(inspector.base + f"{t}/recall")
    await page.fill("input[name=q]", "which language should I answer the invoice question in")
    await page.fill("input[name=owners]", "user:u10086")
    await page.fill("input[name=k]", "4")
    await page.fill("input[name=budget]", "60")
    await page.select_option("#strategy", "no_decay")  # decay is 1.0: the two recalls agree
    await page.click("#run-recall")
    await page.wait_for_selector("#candidates li.candidate")
    drawn = await page.eval_on_selector_all(
        "#candidates li.candidate",
        """els => els.map(e => ({
        key: e.dataset.key, decision: e.dataset.decision,
        bars: Object.fromEntries([...e.querySelectorAll('.bar')].map(b =>
            [b.dataset.factor, [parseFloat(b.dataset.value), b.style.width]])),
        tokens: parseInt(e.querySelector('.tokens').dataset.tokens)}))""",
    )
    query = page.url.split("?", 1)[1]
    api = await (await page.request.get(inspector.base + f"/api{t}/recall?{query}")).json()
    reply, rows = api["explain"]["reply"], api["explain"]["rows"]
    assert [d["key"] for d in drawn] == [c["key"] for c in reply["candidates"]]
    assert [d["decision"] for d in drawn] == [c["decision"] for c in reply["candidates"]]
    decisions = {d["decision"] for d in drawn}
    assert "kept" in decisions and ({"cut: over budget", "cut: below top k"} & decisions), decisions
    for d, c, row in zip(drawn, reply["candidates"], rows, strict=True):
        assert d["tokens"] == c["tokens"]
        for factor in ("relevance", "decay", "feedback"):
            value, width = d["bars"][factor]
            assert value == pytest.approx(c[factor], abs=1e-9), (c["key"], factor)
            assert float(width.rstrip("%")) == pytest.approx(row["width"][factor], abs=0.01)
    assert await page.inner_text("#tokens") == f"{reply['tokens']:,}"
    assert "hunter2" not in await page.content()
    await shot(page, artifacts, "recall")

    # --- live: a put shows up within a second; a bad command shows as a dead letter -----
    await page.goto(inspector.base + f"{t}/live?scope=task:t42:*")
    await page.wait_for_selector("#changes-status.on")
    await page.wait_for_selector("#dead-status.on")
    writer = await inspector.agent(inspector.a, "coder")
    sent = time.monotonic()
    await writer.put("task:t42:status", "done", content="invoice export done: 1,200 rows")
    await page.wait_for_selector(
        '#changes tr.change[data-key="task:t42:status"]', timeout=LIVE_WITHIN_S * 5000
    )
    took = time.monotonic() - sent
    assert took < LIVE_WITHIN_S, f"the change showed after {took:.2f}s"
    (artifacts / "live-latency.txt").write_text(f"{took:.3f}\n")
    await send_bad_command(inspector, "coder")
    await page.wait_for_selector("#dead tr.dead-letter", timeout=10_000)
    assert (await page.inner_text("#dead tr.dead-letter td.reason")).startswith("invalid")
    await writer.put(
        "task:t42:decision", "csv", content="decided: keep CSV, add a JSON export", type="decision"
    )
    await page.wait_for_selector('#changes tr.change[data-key="task:t42:decision"]')
    await shot(page, artifacts, "live")

    # --- savings ----------------------------------------------------------------------
    await page.goto(inspector.base + f"{t}/savings?period=1h")
    await page.wait_for_selector("#chart-total canvas")
    await page.wait_for_selector("#chart-agents canvas")
    # the fleet's agents, and the page's own viewer: the playground's recalls are recorded
    # under the agent of the token, like any other
    series = await page.get_attribute("#chart-agents", "data-series")
    assert series == "coder,planner,reviewer,viewer"
    planner_row = await page.inner_text('#totals tr[data-agent="planner"]')
    assert planner_row.split()[1] == "6"  # six recalls by the planner
    await shot(page, artifacts, "savings")
    assert not page.errors, page.errors

    # --- on a phone's width ------------------------------------------------------------
    phone = await logged_in(browser, inspector, "a", PHONE)
    for name, path in (
        ("memories", f"{t}/memories?prefix=user:u10086:"),
        ("memory", f"{t}/memory?key=user:u10086:pref_lang"),
        ("recall", f"{t}/recall?{query}"),
        ("live", f"{t}/live?scope=task:*"),
        ("savings", f"{t}/savings?period=1h"),
    ):
        await phone.goto(inspector.base + path)
        await phone.wait_for_load_state("networkidle")
        await fits(phone, PHONE["width"])
        await shot(phone, artifacts, f"phone-{name}")
    assert not phone.errors, phone.errors


async def send_bad_command(inspector: Inspector, agent: str) -> None:
    """A message on the tenant's command subject that is not a command (as the operator:
    the agent's own SDK would refuse to build it)."""
    nc = await connect_nats(inspector.settings, name="test-bad-command")
    try:
        shard = naming.shard_for(inspector.a, "task:t42", inspector.settings.shards)
        await nc.jetstream().publish(
            naming.command_subject(inspector.a, shard, agent), b"\x93 not a command"
        )
    finally:
        await nc.close()


async def test_operator_views_in_chromium(
    inspector: Inspector, browser: Any, artifacts: Path
) -> None:
    await seed(inspector)
    page = await logged_in(browser, inspector, "operator", WIDE)
    assert page.url.endswith("/tenants")
    await page.wait_for_selector(f'a.tile[href="/t/{inspector.a}/memories"]')
    await page.goto(inspector.base + "/ops")
    await page.wait_for_selector("#shard-table tbody tr")
    rows = await page.eval_on_selector_all("#shard-table tbody tr", "els => els.length")
    assert rows == inspector.settings.shards
    await page.wait_for_selector("#dead-status.on")
    before = await page.eval_on_selector_all("#dead tr.dead-letter", "els => els.length")
    await send_bad_command(inspector, "planner")
    await page.locator("#dead tr.dead-letter").nth(before).wait_for(timeout=10_000)
    assert (await page.inner_text("#dead tr.dead-letter td.reason")).startswith("invalid")
    await page.wait_for_timeout(2200)  # one refresh of the shard table by htmx
    assert await page.eval_on_selector_all("#shard-table tbody tr", "els => els.length") == rows
    await shot(page, artifacts, "operations")
    assert not page.errors, page.errors
    # a tenant's token is refused the operator views, in the browser too
    tenant = await logged_in(browser, inspector, "b", WIDE)
    response = await tenant.goto(inspector.base + "/ops")
    assert response.status == 403
    response = await tenant.goto(inspector.base + f"/t/{inspector.a}/memories")
    assert response.status == 403
    await asyncio.sleep(0)
