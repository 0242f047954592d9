"""Micro-benchmark of the default encoder: time per ``encode`` call on ~1 KB and ~10 KB inputs.

Run: ``.venv/bin/python bench/encoder_micro.py [--repeat N]``

Inputs are built deterministically (seeded) in the shapes a memory service sees: English
prose (an ASCII-only string), a chat message mixing English and Chinese, a log excerpt, a
pretty-printed JSON API response and NDJSON log lines. Each is cut to the target size on a
line (or word) boundary; the JSON is shrunk by whole records so that it stays valid. For
every shape and size the script prints the best and the median time per call over several
rounds (the best is the cost of the code, the median includes the machine's noise) and the
length of the content produced.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from collections.abc import Callable

from zeromem.encoding import CONTENT_MAX_CHARS, ExtractiveEncoder

_NAMES = ["Alice", "Bob", "Chen Wei", "Dmitri", "Eva", "Farah", "Guo Jing", "Hiro"]
_CITIES = ["Berlin", "Shanghai", "Austin", "Lagos", "Osaka", "Lyon"]


def _chat(rng: random.Random) -> str:
    sentences = [
        "Hi {n}, thanks for checking order t{i} for user u{u}.",
        "We decided to ship INV-2024-{i:04d} on 2024-0{m}-1{d} from {c}.",
        "Please refund ${a}.{c2:02d} to {n} before Friday, it is urgent.",
        "The customer prefers delivery after 6pm and will call back at 10:30.",
        "我们决定在{m}月{d}日发货，需要确认订单t{i}的地址。",
        "客户喜欢顺丰快递，金额{a}元，请在周五前处理。",
        "Do you want me to escalate ticket #{u} to {n}?",
        "Nothing else changed in the warehouse this week, the weather was fine.",
    ]
    out = []
    for _ in range(200):
        out.append(
            rng.choice(sentences).format(
                n=rng.choice(_NAMES),
                c=rng.choice(_CITIES),
                i=rng.randrange(1, 9999),
                u=rng.randrange(10000, 99999),
                m=rng.randrange(1, 9),
                d=rng.randrange(0, 9),
                a=rng.randrange(5, 5000),
                c2=rng.randrange(0, 100),
            )
        )
    return " ".join(out)


def _prose(rng: random.Random) -> str:
    """English only, few ids: the common "long message" case (an ASCII-only string)."""
    sentences = [
        "Thanks for the update on the migration, {n}, the team reviewed it this morning.",
        "We decided to move the launch to {d} after the review with {n} in {c}.",
        "Please keep the budget under ${a},000 and send the notes to ops@example.com.",
        "The staging cluster in {c} is ready and the dashboards look healthy.",
        "Could you check why the refund rate doubled last week in {c}?",
        "Most of the other metrics look the way we expected them to look this quarter.",
        "The parking garage will be repainted next month according to the notice.",
    ]
    out = []
    for _ in range(200):
        out.append(
            rng.choice(sentences).format(
                n=rng.choice(_NAMES),
                c=rng.choice(_CITIES),
                d=f"2024-0{rng.randrange(1, 9)}-1{rng.randrange(9)}",
                a=rng.randrange(2, 90),
            )
        )
    return " ".join(out)


def _log(rng: random.Random) -> str:
    levels = ["INFO", "INFO", "INFO", "WARN", "ERROR", "DEBUG"]
    lines = []
    for k in range(300):
        lines.append(
            f"2024-05-{rng.randrange(1, 29):02d}T12:{k % 60:02d}:{rng.randrange(60):02d}Z "
            f"{rng.choice(levels)} [worker-{rng.randrange(8)}] order=t{rng.randrange(9999)} "
            f"took {rng.randrange(2, 900)}ms status={rng.choice([200, 201, 404, 500])} "
            f"path=/api/v2/orders/t{rng.randrange(9999)}"
        )
    return "\n".join(lines)


def _json(rng: random.Random) -> str:
    orders = [
        {
            "id": f"t{rng.randrange(99999)}",
            "customer": {"id": f"u{rng.randrange(10**5)}", "name": rng.choice(_NAMES)},
            "status": rng.choice(["paid", "shipped", "refunded"]),
            "total": {"amount": round(rng.uniform(1, 900), 2), "currency": "USD"},
            "created_at": f"2024-0{rng.randrange(1, 9)}-1{rng.randrange(9)}T08:00:00Z",
            "html_url": f"https://shop.example.com/orders/t{rng.randrange(99999)}",
            "items": [{"sku": f"SKU-{rng.randrange(999)}", "qty": rng.randrange(1, 5)}],
        }
        for _ in range(80)
    ]
    return json.dumps({"data": orders, "page": 1}, indent=2)


def _ndjson(rng: random.Random) -> str:
    return "\n".join(
        json.dumps(
            {
                "ts": f"2024-05-01T10:{k % 60:02d}:00Z",
                "level": rng.choice(["info", "warn", "error"]),
                "msg": rng.choice(["payment captured", "retrying webhook", "timeout talking to"]),
                "order": f"t{rng.randrange(9999)}",
                "latency_ms": rng.randrange(900),
            }
        )
        for k in range(200)
    )


def _cut(text: str, size: int) -> str:
    """The longest prefix of ``text`` ending at a line (or word) boundary within ``size``."""
    if len(text) <= size:
        return text
    cut = text.rfind("\n", 0, size)
    if cut < size // 2:
        cut = text.rfind(" ", 0, size)
    return text[:cut]


def _time_per_call(fn: Callable[[], object], calls: int, rounds: int) -> tuple[float, float]:
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        samples.append((time.perf_counter() - start) / calls)
    return min(samples), statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7, help="rounds per measurement")
    args = parser.parse_args()

    encoder = ExtractiveEncoder()
    shapes = {"prose": _prose, "chat": _chat, "log": _log, "json": _json, "ndjson": _ndjson}
    print(f"{'input':<14}{'chars':>7}{'best µs':>10}{'median µs':>11}{'out':>5}")
    for size in (1_000, 10_000):
        for name, build in shapes.items():
            rng = random.Random(f"{name}-{size}")
            text = build(rng)
            # JSON cut mid-document would no longer parse: shrink the document instead.
            while name == "json" and len(text) > size:
                data = json.loads(text)
                data["data"] = data["data"][:-1]
                text = json.dumps(data, indent=2)
            text = text if name == "json" else _cut(text, size)
            out = encoder.encode(text)
            assert len(out) <= CONTENT_MAX_CHARS
            calls = 2000 if size <= 1000 else 300
            best, median = _time_per_call(lambda t=text: encoder.encode(t), calls, args.repeat)
            label = f"{name}-{size // 1000}KB"
            print(f"{label:<14}{len(text):>7}{best * 1e6:>10.1f}{median * 1e6:>11.1f}{len(out):>5}")


if __name__ == "__main__":
    main()
