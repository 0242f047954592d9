"""The model-free content encoder: bounded, deterministic, and keeping ids and numbers.

The survival guarantee under test (see ``zeromem.encoding.encoder``): take the salient
tokens of a text in priority order; the longest prefix of them that fits in
``TOKEN_BUDGET`` characters when joined by spaces must all occur in the content as whole
tokens. The tests re-implement the prefix rule and the whole-token check on their own
rather than calling the module's helpers, and check separately that the tokens a generator
planted in a text are among its salient tokens, so the guarantee is not vacuous.
"""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from zeromem.encoding import (
    CONTENT_MAX_CHARS,
    ELLIPSIS,
    TOKEN_BUDGET,
    Encoder,
    ExtractiveEncoder,
    default_encoder,
    encode_value,
    guaranteed_tokens,
    salient_tokens,
)
from zeromem.schemas.memory import CONTENT_MAX_CHARS as SCHEMA_MAX

# ---------------------------------------------------------------------------------------------
# Independent re-implementations of the documented rules
# ---------------------------------------------------------------------------------------------


def prefix_within_budget(tokens: list[str], budget: int = TOKEN_BUDGET) -> list[str]:
    """The longest prefix of ``tokens`` whose space-joined length is at most ``budget``."""
    kept: list[str] = []
    for token in tokens:
        if len(" ".join([*kept, token])) > budget:
            break
        kept.append(token)
    return kept


def occurs_whole(content: str, token: str) -> bool:
    """``token`` occurs in ``content`` not touched by an ASCII letter/digit on a side where
    the token itself starts or ends with one."""
    left = r"(?<![A-Za-z0-9])" if re.match(r"[A-Za-z0-9]", token[0]) else ""
    right = r"(?![A-Za-z0-9])" if re.match(r"[A-Za-z0-9]", token[-1]) else ""
    return re.search(left + re.escape(token) + right, content) is not None


def normalised(text: str) -> str:
    return " ".join(text.split())


# ---------------------------------------------------------------------------------------------
# A seeded corpus of long texts, each with the tokens its generator planted
# ---------------------------------------------------------------------------------------------

EN_NAMES = ["Alice Chen", "Bob Martin", "Carol Diaz", "Dmitri Volkov", "Eva Novak", "Farah Khan"]
ZH_NAMES = ["张伟", "王芳", "李娜", "刘洋", "陈静", "杨磊"]
CITIES = ["Berlin", "Shanghai", "Austin", "Lagos", "Osaka", "Lyon", "深圳", "杭州"]
DOMAINS = ["example.com", "shop.example.org", "mail.acme.io"]
FILLER_EN = [
    "Thanks for the quick turnaround on this.",
    "Let me know if anything is unclear.",
    "The weather in the office has been nice all week.",
    "I talked to the team about it yesterday afternoon.",
    "Nothing else has changed since the last update.",
    "As discussed in the meeting, here is the summary.",
]
FILLER_ZH = [
    "谢谢你的帮助。",
    "有问题随时联系我。",
    "这周办公室一切正常。",
    "我们昨天讨论过这个问题。",
]


@dataclass
class Sample:
    kind: str
    text: str
    planted: list[str] = field(default_factory=list)


class Planter:
    """Random ids, numbers, dates and amounts, remembering everything it hands out."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.planted: list[str] = []

    def keep(self, token: str) -> str:
        self.planted.append(token)
        return token

    def order(self) -> str:
        return self.keep(f"t{self.rng.randrange(1, 99999)}")

    def user(self) -> str:
        return self.keep(f"u{self.rng.randrange(1000, 999999)}")

    def invoice(self) -> str:
        return self.keep(f"INV-{self.rng.randrange(2019, 2026)}-{self.rng.randrange(10000):04d}")

    def sku(self) -> str:
        return self.keep(f"SKU-{self.rng.choice('ABCDEFGH')}{self.rng.randrange(10, 999)}")

    def uid(self) -> str:
        return self.keep(str(uuid.UUID(int=self.rng.getrandbits(128))))

    def email(self) -> str:
        name = self.rng.choice(EN_NAMES).split()[0].lower()
        return self.keep(f"{name}{self.rng.randrange(100)}@{self.rng.choice(DOMAINS)}")

    def date(self) -> str:
        y, m, d = (
            self.rng.randrange(2020, 2027),
            self.rng.randrange(1, 13),
            self.rng.randrange(1, 29),
        )
        return self.keep(f"{y}-{m:02d}-{d:02d}")

    def zh_date(self) -> str:
        return self.keep(f"{self.rng.randrange(1, 13)}月{self.rng.randrange(1, 29)}日")

    def time(self) -> str:
        return self.keep(f"{self.rng.randrange(0, 24):02d}:{self.rng.randrange(60):02d}")

    def usd(self) -> str:
        return self.keep(f"${self.rng.randrange(1, 20000):,}.{self.rng.randrange(100):02d}")

    def eur(self) -> str:
        return self.keep(f"{self.rng.randrange(1, 900)}.{self.rng.randrange(100):02d} EUR")

    def yuan(self) -> str:
        return self.keep(f"{self.rng.randrange(10, 99999)}元")

    def percent(self) -> str:
        return self.keep(f"{self.rng.randrange(1, 100)}%")

    def count(self) -> str:
        return self.keep(str(self.rng.randrange(100, 100000)))

    def url(self) -> str:
        host = self.keep(f"api.{self.rng.choice(DOMAINS)}")
        return f"https://{host}/v2/orders/{self.order()}?page={self.rng.randrange(2, 9)}"


def english_chat(rng: random.Random) -> Sample:
    p = Planter(rng)
    templates: list[Callable[[], str]] = [
        lambda: f"Hi {rng.choice(EN_NAMES)}, I checked order {p.order()} for user {p.user()}.",
        lambda: f"We decided to ship {p.invoice()} on {p.date()} from {rng.choice(CITIES)}.",
        lambda: f"Please refund {p.usd()} to {rng.choice(EN_NAMES)} before {p.date()}.",
        lambda: f"The customer prefers delivery after 6pm and will call back at {p.time()}.",
        lambda: f"Can you send the receipt to {p.email()}?",
        lambda: f"Conversion went up {p.percent()} after the change in {rng.choice(CITIES)}.",
        lambda: f"The batch {p.uid()} must be reprocessed, it had {p.count()} rows.",
        lambda: rng.choice(FILLER_EN),
        lambda: rng.choice(FILLER_EN),
    ]
    text = ""
    while len(text) < 260:
        text += rng.choice(templates)() + " "
        if rng.random() < 0.15:
            text += "\n\n"
    return Sample("chat-en", text.strip(), p.planted)


def chinese_chat(rng: random.Random) -> Sample:
    p = Planter(rng)
    templates: list[Callable[[], str]] = [
        lambda: (
            f"{rng.choice(ZH_NAMES)}说我们决定在{p.zh_date()}发货，需要确认订单{p.order()}的地址。"
        ),
        lambda: f"客户喜欢顺丰快递，金额{p.yuan()}，请在周五前处理。",
        lambda: f"发票号是{p.invoice()}，用户{p.user()}希望{p.zh_date()}之前收到。",
        lambda: f"请把结果发到{p.email()}，谢谢！",
        lambda: f"这个月的转化率提高了{p.percent()}，比上个月多{p.count()}单。",
        lambda: rng.choice(FILLER_ZH),
    ]
    text = ""
    while len(text) < 230:
        text += rng.choice(templates)()
        if rng.random() < 0.2:
            text += "\n"
    return Sample("chat-zh", text.strip(), p.planted)


def mixed_chat(rng: random.Random) -> Sample:
    en, zh = english_chat(rng), chinese_chat(rng)
    return Sample("chat-mixed", en.text + "\n" + zh.text, en.planted + zh.planted)


def tool_result(rng: random.Random) -> Sample:
    p = Planter(rng)
    lines = [
        f"Order {p.order()} ({rng.choice(['paid', 'shipped', 'refunded'])})",
        f"Customer: {rng.choice(EN_NAMES)} <{p.email()}>, account {p.user()}",
        f"Invoice: {p.invoice()} issued {p.date()}, total {p.usd()}",
    ]
    for _ in range(rng.randrange(1, 6)):
        lines.append(f"  - {p.sku()} x{rng.randrange(1, 9)} @ {p.eur()}")
    lines.append(f"Tracking: {p.url()}")
    lines.append(f"Note: {rng.choice(FILLER_EN)} The client wants delivery by {p.date()}.")
    return Sample("tool", "\n".join(lines), p.planted)


def log_excerpt(rng: random.Random) -> Sample:
    p = Planter(rng)
    lines = []
    for _ in range(rng.randrange(4, 40)):
        level = rng.choice(["INFO", "INFO", "WARN", "ERROR", "DEBUG"])
        stamp = p.keep(f"{p.date()}T{p.time()}:{rng.randrange(60):02d}Z")
        p.planted.pop(-2)  # the date and time are inside the timestamp, not tokens of their own
        p.planted.pop(-2)
        lines.append(
            f"{stamp} {level} [worker-{rng.randrange(8)}] order={p.order()} "
            f"took {rng.randrange(2, 900)}ms status={rng.choice([200, 201, 404, 500])}"
        )
        if level == "ERROR":
            lines.append(f"PaymentError: card declined for {p.user()} (amount {p.eur()})")
    return Sample("log", "\n".join(lines), p.planted)


def json_payload(rng: random.Random) -> Sample:
    p = Planter(rng)
    payload = {
        "invoice": {
            "id": p.invoice(),
            "customer": {"id": p.user(), "name": rng.choice(EN_NAMES), "email": p.email()},
            "lines": [
                {"sku": p.sku(), "qty": rng.randrange(1, 5), "unit_price": p.eur()}
                for _ in range(rng.randrange(1, 6))
            ],
            "total": p.usd(),
            "due": p.date(),
            "status": rng.choice(["open", "overdue", "paid"]),
            "note": rng.choice(FILLER_EN),
            "_links": {"self": {"href": p.url()}},
        },
        "request_id": p.uid(),
    }
    style = rng.choice(["pretty", "compact", "cut"])
    if style == "compact":
        text = json.dumps(payload, ensure_ascii=False)
    else:
        text = json.dumps(payload, indent=2, ensure_ascii=False)
    if style == "cut":  # a tool result cut off mid-way: no longer valid JSON
        text = text[: max(220, len(text) * 3 // 4)]
        kept = [token for token in p.planted if token in text]
        return Sample("json-cut", text, [t for t in kept if occurs_whole(text, t)])
    return Sample(f"json-{style}", text, p.planted)


def ndjson_lines(rng: random.Random) -> Sample:
    p = Planter(rng)
    lines = [
        json.dumps(
            {
                "ts": f"{p.date()}T{rng.randrange(24):02d}:00:00Z",
                "level": rng.choice(["info", "warn", "error"]),
                "msg": rng.choice(["payment captured", "retrying webhook", "timeout"]),
                "order": p.order(),
                "latency_ms": rng.randrange(900),
            }
        )
        for _ in range(rng.randrange(3, 20))
    ]
    # The dates sit inside "2024-03-05T10:00:00Z" timestamps, which are the tokens.
    planted = [t for t in p.planted if not re.fullmatch(r"\d{4}-\d\d-\d\d", t)]
    return Sample("ndjson", "\n".join(lines), planted)


GENERATORS = [
    english_chat,
    chinese_chat,
    mixed_chat,
    tool_result,
    log_excerpt,
    json_payload,
    ndjson_lines,
]


def build_corpus(count: int = 280, seed: int = 20240601) -> list[Sample]:
    rng = random.Random(seed)
    samples = [GENERATORS[i % len(GENERATORS)](rng) for i in range(count)]
    assert all(len(normalised(s.text)) > CONTENT_MAX_CHARS for s in samples)
    return samples


CORPUS = build_corpus()

HAND_WRITTEN = [
    Sample(
        "email",
        "Hi team,\n\nAfter the review on Tuesday we decided to move the launch of Project Falcon "
        "to 2024-06-15. Alice will own the migration (ticket JIRA-4521) and Bob must finish the "
        "billing fix before then. Please keep the budget under $12,000 and send updates to "
        "ops@example.com. The staging cluster at https://staging.example.com/dashboards/falcon "
        "is ready. Let me know if there are questions about the new timeline.\n\nThanks, Carol",
        ["2024-06-15", "JIRA-4521", "$12,000", "ops@example.com", "staging.example.com"],
    ),
    Sample(
        "zh",
        "用户张伟说：我更喜欢在周末收到快递，订单号是DD20240315001，金额是358元。请在3月18日之前发货，"
        "并且需要开具发票，发票抬头是北京星辰科技有限公司。如果有问题请打电话13800138000联系我。"
        "另外上次的订单t77还没有收到，麻烦帮忙查一下物流，我们已经等了12天了，非常着急，谢谢！",
        ["DD20240315001", "358元", "3月18日", "13800138000", "t77"],
    ),
    Sample(
        "invoice-json",
        json.dumps(
            {
                "invoice": {
                    "id": "INV-2024-0042",
                    "customer": {"id": "u10086", "name": "Dana Scully", "email": "dana@fbi.gov"},
                    "lines": [{"sku": "X-1", "qty": 2, "price": 19.99}],
                    "total": 44.98,
                    "currency": "USD",
                    "due": "2024-04-01",
                    "status": "overdue",
                    "notes": "Customer asked to split the payment in two installments.",
                }
            },
            indent=2,
        ),
        ["INV-2024-0042", "u10086", "dana@fbi.gov", "X-1", "19.99", "44.98", "2024-04-01"],
    ),
    Sample(
        "traceback",
        "Traceback (most recent call last):\n"
        '  File "/srv/app/worker.py", line 88, in run\n'
        "    result = client.charge(order_id, amount)\n"
        '  File "/srv/app/client.py", line 41, in charge\n'
        '    raise PaymentError(f"card declined for {order_id}")\n'
        "PaymentError: card declined for ord_8812 (amount 49.90 EUR, attempt 3 of 5) at "
        "2024-05-02T09:14:55Z",
        ["ord_8812", "49.90 EUR", "2024-05-02T09:14:55Z"],
    ),
    Sample(
        "api",
        "HTTP 409 Conflict from POST https://billing.example.net/v1/customers/cus_9Xk2/charges "
        "request-id 7f9c2ba4-e88f-11ee-a506-0242ac120002: the charge ch_3Nq8 for US$250.00 "
        "on March 5, 2024 conflicts with ch_3Nq1 created at 14:05. Retry after 30s or use an "
        "idempotency key. Rate limit: 100 requests per 60 seconds, 97 remaining.",
        [
            "billing.example.net",
            "cus_9Xk2",
            "7f9c2ba4-e88f-11ee-a506-0242ac120002",
            "ch_3Nq8",
            "US$250.00",
            "March 5, 2024",
            "ch_3Nq1",
            "14:05",
            "30s",
        ],
    ),
]

ALL_SAMPLES = CORPUS + HAND_WRITTEN
ENCODER = ExtractiveEncoder()


def ids(samples: list[Sample]) -> list[str]:
    return [f"{i}-{s.kind}" for i, s in enumerate(samples)]


# ---------------------------------------------------------------------------------------------
# Properties over the corpus
# ---------------------------------------------------------------------------------------------


def test_corpus_is_large_and_varied() -> None:
    assert len(CORPUS) >= 200
    assert {s.kind for s in CORPUS} >= {
        "chat-en",
        "chat-zh",
        "chat-mixed",
        "tool",
        "log",
        "json-pretty",
        "json-compact",
        "json-cut",
        "ndjson",
    }


@pytest.mark.parametrize("sample", ALL_SAMPLES, ids=ids(ALL_SAMPLES))
def test_content_is_bounded_deterministic_and_non_empty(sample: Sample) -> None:
    content = ENCODER.encode(sample.text)
    assert 0 < len(content) <= CONTENT_MAX_CHARS
    assert content == ENCODER.encode(sample.text)
    assert content == ExtractiveEncoder().encode(sample.text)
    assert content == default_encoder().encode(sample.text)
    assert content.strip() == content


@pytest.mark.parametrize("sample", ALL_SAMPLES, ids=ids(ALL_SAMPLES))
def test_planted_tokens_are_salient(sample: Sample) -> None:
    """The generator's ids, dates and amounts are found, so the guarantee covers them.

    A planted token may sit inside a larger salient token ("34566" in the amount "34566单"),
    which carries it along."""
    found = salient_tokens(sample.text)
    missing = [
        token
        for token in sample.planted
        if token not in found and not any(occurs_whole(other, token) for other in found)
    ]
    assert not missing, (missing, found)


@pytest.mark.parametrize("sample", ALL_SAMPLES, ids=ids(ALL_SAMPLES))
def test_guaranteed_tokens_survive(sample: Sample) -> None:
    content = ENCODER.encode(sample.text)
    tokens = salient_tokens(sample.text)
    guaranteed = prefix_within_budget(tokens)
    assert guaranteed == guaranteed_tokens(sample.text)
    lost = [token for token in guaranteed if not occurs_whole(content, token)]
    assert not lost, (lost, content)
    if len(" ".join(tokens)) <= TOKEN_BUDGET:  # everything fits: everything survives
        assert all(occurs_whole(content, token) for token in sample.planted)


def test_the_all_tokens_fit_case_is_exercised() -> None:
    fitting = [s for s in CORPUS if len(" ".join(salient_tokens(s.text))) <= TOKEN_BUDGET]
    overflowing = [s for s in CORPUS if s not in fitting]
    assert len(fitting) >= 30 and len(overflowing) >= 30


@pytest.mark.parametrize("sample", ALL_SAMPLES, ids=ids(ALL_SAMPLES))
def test_priority_order_puts_bare_numbers_last(sample: Sample) -> None:
    """Pure integers (always tier 2 or 3) come after every token starting with a letter
    (ids, ``USD12``-style amounts, month dates: tiers 0 and 1), and integers of 3+ digits
    before shorter ones; so when space runs out, bare numbers are what is dropped."""
    tokens = salient_tokens(sample.text)
    integers = [i for i, t in enumerate(tokens) if t.isascii() and t.isdigit()]
    lettered = [i for i, t in enumerate(tokens) if re.match(r"[A-Za-z]", t)]
    if integers and lettered:
        assert max(lettered) < min(integers)
    long_ones = [i for i in integers if len(tokens[i]) >= 3]
    short_ones = [i for i in integers if len(tokens[i]) < 3]
    if long_ones and short_ones:
        assert max(long_ones) < min(short_ones)


@pytest.mark.parametrize(
    "sample", [s for s in CORPUS if s.kind in ("chat-en", "chat-zh", "chat-mixed", "log")]
)
def test_cut_text_is_marked_with_an_ellipsis(sample: Sample) -> None:
    assert ELLIPSIS in ENCODER.encode(sample.text)


def test_same_output_in_processes_with_other_hash_seeds() -> None:
    """No set or dict iteration order leaks into the content."""
    texts = [s.text for s in ALL_SAMPLES[::9]]
    here = [ENCODER.encode(t) for t in texts]
    script = (
        "import json, sys\n"
        "from zeromem.encoding import ExtractiveEncoder\n"
        "texts = json.load(sys.stdin)\n"
        "print(json.dumps([ExtractiveEncoder().encode(t) for t in texts]))\n"
    )
    for seed in ("1", "2"):
        result = subprocess.run(
            [sys.executable, "-c", script],
            input=json.dumps(texts),
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONHASHSEED": seed},
        )
        assert json.loads(result.stdout) == here


# ---------------------------------------------------------------------------------------------
# Hand-written behaviour
# ---------------------------------------------------------------------------------------------


def test_schema_limit_is_the_one_used() -> None:
    assert CONTENT_MAX_CHARS == SCHEMA_MAX == 200


def test_short_single_line_text_is_only_whitespace_normalised() -> None:
    assert ENCODER.encode("  Order   t42\tshipped  to Bob.  ") == "Order t42 shipped to Bob."
    assert ENCODER.encode("") == ""
    assert ENCODER.encode(" \n\t ") == ""
    exact = "x" * 200
    assert ENCODER.encode(exact) == exact


def test_text_that_fits_once_normalised_is_kept_whole() -> None:
    text = "Order t42\n\n\n" + " " * 500 + "ships  tomorrow\n"
    assert ENCODER.encode(text) == "Order t42 ships tomorrow"
    pretty = json.dumps({"id": "t42", "status": "shipped", "items": ["a", "b"]}, indent=40)
    assert len(pretty) > CONTENT_MAX_CHARS
    assert ENCODER.encode(pretty) == normalised(pretty)


def test_hand_written_cases_keep_their_key_tokens() -> None:
    for sample in HAND_WRITTEN:
        content = ENCODER.encode(sample.text)
        for token in sample.planted:
            assert occurs_whole(content, token), (sample.kind, token, content)


def test_the_request_or_decision_sentence_is_preferred() -> None:
    text = (
        "Good morning everyone, I hope the weekend was relaxing and the trip went well. "
        "The coffee machine on the third floor is broken again, facilities know about it. "
        "We decided to cancel the Lisbon offsite and move the budget to hiring. "
        "The parking garage will be repainted next month according to the building notice. "
        "Lunch on Friday is pizza as usual, the vegetarian options are on the left side."
    )
    assert "We decided to cancel the Lisbon offsite" in ENCODER.encode(text)
    question = (
        "I looked through the dashboards this morning and compared them with the numbers from "
        "the previous quarter, and most of the metrics look the way we expected them to look. "
        "Could you check why the refund rate in Osaka doubled last week? "
        "The rest of the regions are in line with the forecast and need no action from us."
    )
    assert "Could you check why the refund rate in Osaka doubled last week?" in (
        ENCODER.encode(question)
    )
    zh = (
        "今天开会讨论了很多事情，大家都发表了自己的看法，会议室的空调有点冷，下次记得带外套。"
        "最后我们决定下个月把服务器迁移到杭州机房。"
        "会后大家一起吃了午饭，味道还不错，价格也合理，下次还可以再去那家店。"
        "晚上下了一场大雨，回家的路上有点堵车，不过总体来说还算顺利。"
    )
    assert "我们决定下个月把服务器迁移到杭州机房" in ENCODER.encode(zh)


def test_json_is_flattened_to_key_value_fields() -> None:
    payload = {
        "order": {"id": "t42", "status": "shipped", "customer": {"name": "Bob Martin"}},
        "items": [{"sku": "A-1", "qty": 2}, {"sku": "B-7", "qty": 1}],
        "avatar_url": "https://cdn.example.com/" + "a" * 150 + ".png",
        "etag": "W/" + "f" * 120,
    }
    content = ENCODER.encode(json.dumps(payload, indent=2))
    assert content.startswith("id: t42; status: shipped; name: Bob Martin")
    assert '"' not in content and "{" not in content
    assert "sku: A-1" in content


def test_truncated_json_still_reads_as_fields() -> None:
    payload = {"data": [{"id": f"t{i}", "status": "paid", "total": f"{i}.50"} for i in range(30)]}
    text = json.dumps(payload, indent=2)[:700]
    content = ENCODER.encode(text)
    assert content.startswith("id: t0")
    assert '"' not in content


def test_log_lines_of_one_template_are_not_repeated() -> None:
    lines = [f"2024-05-01T10:{i:02d}:00Z INFO sync ok batch={i}" for i in range(40)]
    lines.insert(17, "2024-05-01T10:17:30Z ERROR sync failed: disk full on node-7")
    content = ENCODER.encode("\n".join(lines))
    assert "ERROR sync failed: disk full on node-7" in content
    assert content.count("INFO sync ok") <= 1


def test_hint_words_raise_matching_sentences() -> None:
    text = (
        "The Berlin warehouse reported normal stock levels for every product group this week. "
        "The Osaka warehouse reported normal stock levels for every product group this week. "
        "The Lagos warehouse reported normal stock levels for every product group this week."
    )
    assert "Osaka" in ENCODER.encode(text, hint="osaka stock")
    assert "Lagos" in ENCODER.encode(text, hint="lagos")


def test_ellipsis_only_when_something_was_left_out() -> None:
    assert ELLIPSIS not in ENCODER.encode("Order t42 shipped.")
    long_text = " ".join(f"Sentence number {i} says something about Berlin." for i in range(30))
    assert ELLIPSIS in ENCODER.encode(long_text)
    # A JSON document whose fields all fit once flattened (nulls carry nothing) lost nothing.
    value: dict[str, object] = {f"field_{i}": None for i in range(20)}
    value.update({"id": "t42", "status": "shipped"})
    text = json.dumps(value)
    assert len(normalised(text)) > CONTENT_MAX_CHARS
    assert ENCODER.encode(text) == "id: t42; status: shipped"


def test_words_are_not_cut_when_a_sentence_must_be_shortened() -> None:
    words = [f"word{i:03d}x" for i in range(120)]
    text = " ".join(words)  # one sentence, no punctuation, ~1300 chars
    content = ENCODER.encode(text)
    body = content.split(ELLIPSIS)[0]
    assert set(body.replace(";", " ").split()) <= set(words)


def test_surrogate_pairs_and_combining_marks_are_never_torn() -> None:
    pairs = "\ud83d\ude00" * 300  # a str holding surrogate pairs (as json.loads can produce)
    content = ENCODER.encode(pairs)
    assert len(content) <= CONTENT_MAX_CHARS
    for i, char in enumerate(content):
        if "\ud800" <= char <= "\udbff":
            assert i + 1 < len(content) and "\udc00" <= content[i + 1] <= "\udfff"
        if "\udc00" <= char <= "\udfff":
            assert i > 0 and "\ud800" <= content[i - 1] <= "\udbff"
    accents = "e\u0301" * 400
    content = ENCODER.encode(accents)
    body = content.replace(ELLIPSIS, "").replace("; ", "")
    assert body.count("e") == body.count("\u0301") > 0
    emoji = "👩\u200d💻" * 200
    body = ENCODER.encode(emoji).replace(ELLIPSIS, "").replace("; ", "")
    assert body and not body.endswith("\u200d") and not body.startswith("\u200d")


def test_token_classes() -> None:
    text = (
        "t42 u10086 INV-2024-0042 v1.2.3 10.0.0.1 #4521 +86 138-0013-8000 a3f9c2e "
        "550e8400-e29b-41d4-a716-446655440000 bob42@mail.example.com "
        "https://api.shop.com/v2/orders/t77/invoice?page=3 2024-03-05 2024-03-05T12:30:00Z "
        "3/5/2024 March 5, 2024 5 March 2024 2024年3月5日 3月5日 12:30 3pm 下午3点 $1,299.00 "
        "US$5 USD 12.50 12.5 EUR 300元 45% 35ms 2GB 5个 1st 2nd 12345 42 7 订单t99已发货"
    )
    assert len(text) > CONTENT_MAX_CHARS
    tokens = salient_tokens(text)
    for expected in [
        "t42",
        "u10086",
        "INV-2024-0042",
        "v1.2.3",
        "10.0.0.1",
        "#4521",
        "138-0013-8000",
        "a3f9c2e",
        "550e8400-e29b-41d4-a716-446655440000",
        "bob42@mail.example.com",
        "api.shop.com",
        "t77",
        "invoice",
        "3",
        "2024-03-05",
        "2024-03-05T12:30:00Z",
        "3/5/2024",
        "March 5, 2024",
        "5 March 2024",
        "2024年3月5日",
        "3月5日",
        "12:30",
        "3pm",
        "3点",
        "$1,299.00",
        "US$5",
        "USD 12.50",
        "12.5 EUR",
        "300元",
        "45%",
        "35ms",
        "2GB",
        "5个",
        "12345",
        "42",
        "7",
        "t99",
    ]:
        assert expected in tokens, expected
    assert "v2" not in tokens  # API versions inside URLs are noise
    assert "1st" not in tokens and "2nd" not in tokens
    # Tiers: ids first, then dates/times/amounts, then long numbers, then short ones.
    assert tokens.index("u10086") < tokens.index("2024-03-05") < tokens.index("12345")
    assert tokens.index("12345") < tokens.index("42")


def test_words_without_digits_are_not_tokens() -> None:
    text = "The quick brown fox jumps over the lazy dog. " * 10
    assert salient_tokens(text) == []
    content = ENCODER.encode(text)
    # Repeats are dropped; the sentence's full stop gives way to the ellipsis.
    assert content == "The quick brown fox jumps over the lazy dog" + ELLIPSIS


# ---------------------------------------------------------------------------------------------
# encode_value and pluggable encoders
# ---------------------------------------------------------------------------------------------


class RecordingEncoder:
    """A stand-in for a model-backed encoder."""

    def __init__(self, answer: str | None = None) -> None:
        self.calls: list[tuple[str, str | None]] = []
        self.answer = answer

    def encode(self, text: str, *, hint: str | None = None) -> str:
        self.calls.append((text, hint))
        return self.answer if self.answer is not None else "summary of " + text[:20]


def test_custom_encoder_satisfies_the_protocol_and_plugs_into_encode_value() -> None:
    custom = RecordingEncoder()
    assert isinstance(custom, Encoder)
    assert isinstance(ExtractiveEncoder(), Encoder)
    long_value = {"messages": [f"message {i} about order t{i}" for i in range(40)]}
    content = encode_value(long_value, encoder=custom, hint="orders")
    assert content.startswith("summary of ")
    assert len(custom.calls) == 1 and custom.calls[0][1] == "orders"
    assert "messages=message 0 about order t0" in custom.calls[0][0]
    # Short values never reach the encoder.
    assert encode_value({"id": "t42"}, encoder=custom) == "id=t42"
    assert encode_value("fine", encoder=custom) == "fine"
    assert len(custom.calls) == 1


def test_an_overlong_custom_answer_is_cut_to_the_limit() -> None:
    content = encode_value("y " * 300, encoder=RecordingEncoder("z" * 500))
    assert len(content) == CONTENT_MAX_CHARS and content.endswith(ELLIPSIS)


def test_encode_value_scalars_and_small_structures() -> None:
    assert encode_value(None) == "null"
    assert encode_value(True) == "true"
    assert encode_value(False) == "false"
    assert encode_value(42) == "42"
    assert encode_value(1.5) == "1.5"
    assert encode_value("  spaced   out\ntext ") == "spaced out text"
    assert encode_value(b"bytes") == "bytes"
    assert encode_value({"id": "t42", "qty": 2, "ok": True}) == "id=t42; qty=2; ok=true"
    assert encode_value({"order": {"id": "t42", "total": 9.5}}) == "order.id=t42; order.total=9.5"
    assert encode_value({"tags": ["a", "b"], "none": None}) == "tags=a, b; none=null"
    assert encode_value([1, 2, 3]) == "1, 2, 3"
    assert encode_value([{"sku": "A"}, {"sku": "B"}]) == "sku=A; sku=B"
    assert encode_value({"s": {"b", "a", "c"}}) == "s=a, b, c"
    assert encode_value(10**5000).startswith("0x")  # beyond the int-to-str digit limit


def test_encode_value_long_structures_keep_ids() -> None:
    value = {
        "order": {"id": "t42", "customer": "u10086", "invoice": "INV-2024-0042"},
        "lines": [{"sku": f"SKU-{i}", "desc": "a fairly long description " * 2} for i in range(8)],
    }
    content = encode_value(value)
    assert len(content) <= CONTENT_MAX_CHARS
    for token in ("t42", "u10086", "INV-2024-0042"):
        assert occurs_whole(content, token)
    assert content == encode_value(value)


def test_encode_value_sets_are_ordered_deterministically() -> None:
    assert encode_value({"s": frozenset({"b", "a", "c"})}) == encode_value(
        {"s": frozenset({"c", "b", "a"})}
    )


# ---------------------------------------------------------------------------------------------
# Arbitrary input
# ---------------------------------------------------------------------------------------------

ANY_TEXT = st.text(alphabet=st.characters(exclude_categories=()), max_size=2000)


@settings(max_examples=300, deadline=None, database=None)
@given(ANY_TEXT)
def test_any_unicode_is_bounded_and_never_raises(text: str) -> None:
    content = ENCODER.encode(text)
    assert len(content) <= CONTENT_MAX_CHARS
    assert bool(content) == bool(text.split())
    assert content == ExtractiveEncoder().encode(text)


TOKEN_LIKE = st.one_of(
    st.from_regex(r"[a-z]{1,3}[0-9]{1,6}", fullmatch=True),
    st.from_regex(r"[A-Z]{2,4}-[0-9]{4}-[0-9]{2,4}", fullmatch=True),
    st.from_regex(r"[0-9]{1,7}", fullmatch=True),
    st.from_regex(r"\$[0-9]{1,4}\.[0-9]{2}", fullmatch=True),
    st.from_regex(r"20[0-9]{2}-[01][0-9]-[0-3][0-9]", fullmatch=True),
    st.sampled_from(["Alice", "order", "shipped", "需要", "决定", "please", "Berlin", "the"]),
)
SEPARATORS = st.sampled_from([" ", ", ", ". ", "\n", "; ", "，", "。", " - ", ": "])


@settings(
    max_examples=200, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)
@given(st.lists(st.tuples(TOKEN_LIKE, SEPARATORS), min_size=1, max_size=120))
def test_guarantee_holds_for_generated_token_soup(parts: list[tuple[str, str]]) -> None:
    text = "".join(token + sep for token, sep in parts)
    content = ENCODER.encode(text)
    assert len(content) <= CONTENT_MAX_CHARS
    for token in prefix_within_budget(salient_tokens(text)):
        assert occurs_whole(content, token), (token, content)


@settings(max_examples=100, deadline=None, database=None)
@given(
    st.recursive(
        st.none()
        | st.booleans()
        | st.integers()
        | st.floats(allow_nan=False)
        | st.text(max_size=40),
        lambda children: (
            st.lists(children, max_size=6)
            | st.dictionaries(st.text(max_size=8), children, max_size=6)
        ),
        max_leaves=60,
    )
)
def test_encode_value_is_bounded_for_any_json_like_value(value: object) -> None:
    content = encode_value(value)
    assert len(content) <= CONTENT_MAX_CHARS
    assert content == encode_value(value)


# ---------------------------------------------------------------------------------------------
# Speed (a loose guard; bench/encoder_micro.py measures properly)
# ---------------------------------------------------------------------------------------------


def test_ten_kilobytes_encode_in_a_few_milliseconds() -> None:
    rng = random.Random(7)
    text = ""
    while len(text) < 10_000:
        text += english_chat(rng).text + "\n" + log_excerpt(rng).text + "\n"
    text = text[:10_000]
    ENCODER.encode(text)
    start = time.perf_counter()
    for _ in range(20):
        ENCODER.encode(text)
    per_call = (time.perf_counter() - start) / 20
    assert per_call < 0.025, f"{per_call * 1e3:.2f} ms per 10 KB call"
