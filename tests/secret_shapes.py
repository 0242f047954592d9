"""Secrets in the shapes agents write them, each with the text that must never leave in an
audit record, a log line, an exported span or content derived from a value.

Shared by the redactor's unit tests (tests/unit/test_redact.py) and the end-to-end test on a
running stack (tests/integration/test_redaction.py). Every secret is distinct, so a leak
names its shape. The values are made up: none is a real credential.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Shape:
    label: str
    value: Any  # the value (a put) or the merge patch (a patch) that carries the secret
    secret: str
    how: str = "put"  # "put": in a value; "patch": in a patch; "content": in given content


def _named(name: Any, secret: str) -> Shape:
    return Shape(f"field {name!r}", {name: secret, "city": "Basel"}, secret)


def _inside(label: str, text: str, secret: str, how: str = "put") -> Shape:
    return Shape(label, {"note": text} if how != "content" else text, secret, how)


SHAPES: tuple[Shape, ...] = (
    # --- by name, at the top level --------------------------------------------------------
    _named("password", "pw-Alder-7781"),
    _named("passwd", "pw-Birch-1290"),
    _named("pwd", "pw-Cedar-5521"),
    _named("passphrase", "correct horse battery 4411"),
    _named("secret", "sc-Dogwood-3310"),
    _named("client_secret", "sc-Elm-8802"),
    _named("api_key", "ak-Fir-2231"),
    _named("apiKey", "ak-Ginkgo-7710"),
    _named("X-Api-Key", "ak-Hazel-9913"),
    _named("access_key", "ak-Ivy-6604"),
    _named("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMIxK7MDENGbPxRfiCYzz"),
    _named("private_key", "pk-Juniper-1177"),
    _named("token", "tk-Larch-4450"),
    _named("authToken", "tk-Maple-3391"),
    _named("refresh_token", "tk-Nutmeg-7120"),
    _named("bearer", "br-Oak-2268"),
    _named("auth", "au-Pine-5519"),
    _named("Authorization", "au-Quince-8843"),
    _named("credential", "cr-Rowan-6637"),
    _named("cookie", "ck-Spruce-2294"),
    _named("session_id", "ss-Teak-7781"),
    _named("ssn", "ss-Umbrella-1102"),
    _named("pin", "pin-Violet-4321"),
    # --- by name, deeper, in lists, with keys that are not strings --------------------------
    Shape("nested field", {"db": {"host": "db1", "password": "pw-Willow-3380"}}, "pw-Willow-3380"),
    Shape(
        "field in a list of maps",
        {"accounts": [{"user": "ada", "token": "tk-Xylo-9021"}]},
        "tk-Xylo-9021",
    ),
    Shape("bytes key", {b"password": "pw-Yew-6610", "city": "Basel"}, "pw-Yew-6610"),
    Shape("integer key above a secret", {7: {"api_key": "ak-Zelkova-4402"}}, "ak-Zelkova-4402"),
    Shape("bytes key, mixed map", {b"api_key": "ak-Acacia-3019", 2: "two"}, "ak-Acacia-3019"),
    Shape("sensitive field in a patch", {"password": "pw-Banyan-2207"}, "pw-Banyan-2207", "patch"),
    # --- by shape, whatever the field is called ---------------------------------------------
    _inside("token=... inside a patch", "token=sk-HHH1 rotated", "sk-HHH1", "patch"),
    _inside("sk- API key", "use sk-proj-Cypress8842kq for the eval", "sk-proj-Cypress8842kq"),
    _inside("AWS access key id", "key AKIAIOSFODNN7EXAMPLE in us-east-1", "AKIAIOSFODNN7EXAMPLE"),
    _inside(
        "JWT",
        "session jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhZGEifQ.c2lnbmF0dXJl77",
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhZGEifQ.c2lnbmF0dXJl77",
    ),
    _inside("bearer header", "sent Authorization: Bearer ya29.Dahlia-a0Xk71", "ya29.Dahlia-a0Xk71"),
    _inside("basic credential", "header Basic YWRhOkVib255LTc3MjE=", "YWRhOkVib255LTc3MjE="),
    _inside(
        "PEM private key",
        "-----BEGIN RSA PRIVATE KEY-----\nMIIEowFigTree9915\n-----END RSA PRIVATE KEY-----",
        "MIIEowFigTree9915",
    ),
    _inside(
        "password in a URL", "db at postgres://ada:Gardenia-5510@db1:5432/app", "Gardenia-5510"
    ),
    _inside(
        "GitHub token",
        "push with ghp_Hemlock0123456789abcdefABCDEF01",
        "ghp_Hemlock0123456789abcdefABCDEF01",
    ),
    _inside("GitLab token", "ci uses glpat-Iris4455667788aabbccdd", "glpat-Iris4455667788aabbccdd"),
    _inside("Slack token", "bot xoxb-1234-Jasmine-5678abcd", "xoxb-1234-Jasmine-5678abcd"),
    _inside("Stripe key", "billing sk_live_Kapok0011223344", "sk_live_Kapok0011223344"),
    _inside(
        "Google API key",
        "maps AIzaSyLaurel-0123456789abcdefghijklmnopq",
        "AIzaSyLaurel-0123456789abcdefghijklmnopq",
    ),
    _inside("card number", "paid with 4111 1111 1111 1111 yesterday", "4111 1111 1111 1111"),
    _inside("card number, dashes", "card 5555-5555-5555-4444 on file", "5555-5555-5555-4444"),
    _inside("US social security number", "ssn on form: 078-05-1120", "078-05-1120"),
    _inside(
        "API key in given content",
        "the eval key is sk-Magnolia7781 keep it",
        "sk-Magnolia7781",
        "content",
    ),
    _inside(
        "pair in given content", "db password=Mimosa-0091 for staging", "Mimosa-0091", "content"
    ),
)

# Text that looks a little like a secret and is not one: kept word for word.
ORDINARY: tuple[str, ...] = (
    "The author of the report is Ada; she owns 12 bearer bonds.",
    "max_tokens=512, tokens_used: 340, sessions: 3",
    "Basic training starts on 2026-03-14 at 09:30.",
    "task-1234 was moved to sprint 7; phone 555-123-4567",
    "order number 1234567890123456 shipped",  # fails the Luhn check: not a card
    "pi is 3.14159265358979323846",
    "city: Basel; spinner: on; passenger: Lin",
)

ORDINARY_NAMES: tuple[str, ...] = (
    "author",
    "max_tokens",
    "tokens_used",
    "sessions",
    "passenger",
    "spinner",
    "city",
    "keyboard",
)
