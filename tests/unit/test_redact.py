"""The redactor on every secret shape of tests/secret_shapes.py, and on the look-alikes it
must leave alone (the end-to-end version is tests/integration/test_redaction.py)."""

from __future__ import annotations

import msgpack
import pytest

from tests.secret_shapes import ORDINARY, ORDINARY_NAMES, SHAPES, Shape
from zeromem.lifecycle.redact import Redactor, install_log_redaction, normal_name
from zeromem.worker.analysis import default_engine

REDACTOR = Redactor()


def _everything(value: object) -> str:
    """Every string and key of ``value``, as one text (keys of any type, bytes decoded)."""
    return msgpack.unpackb(msgpack.packb(value), raw=False, strict_map_key=False).__repr__()


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: s.label)
def test_no_shape_survives_redaction(shape: Shape) -> None:
    assert shape.secret in _everything(shape.value)  # the table holds what it claims
    if shape.how == "content":
        assert shape.secret not in REDACTOR.text(shape.value)
    else:
        assert shape.secret not in _everything(REDACTOR.value(shape.value))


@pytest.mark.parametrize("shape", [s for s in SHAPES if s.how == "put"], ids=lambda s: s.label)
def test_content_derived_from_a_value_holds_no_secret(shape: Shape) -> None:
    content = default_engine().derive_content(shape.value)
    assert shape.secret not in content
    assert "[redacted]" in content


def test_ordinary_fields_are_kept_next_to_redacted_ones() -> None:
    assert REDACTOR.value({"password": "x", "city": "Basel", "n": 3, "ok": True}) == {
        "password": "[redacted]",
        "city": "Basel",
        "n": 3,
        "ok": True,
    }


@pytest.mark.parametrize("text", ORDINARY)
def test_look_alikes_are_not_redacted(text: str) -> None:
    assert REDACTOR.text(text) == text


@pytest.mark.parametrize("name", ORDINARY_NAMES)
def test_ordinary_names_are_not_sensitive(name: str) -> None:
    assert not REDACTOR.name_is_sensitive(name)


def test_names_are_matched_in_their_normal_form() -> None:
    assert normal_name("X-Auth-Token") == "_x_auth_token_"
    assert normal_name("awsSecretAccessKey") == "_aws_secret_access_key_"
    assert REDACTOR.field_is_sensitive(b"db_pwd")
    assert not REDACTOR.field_is_sensitive(42)


def test_a_deployments_own_pattern_still_sees_the_name_as_written() -> None:
    own = Redactor(r"^internal_note$")
    assert own.name_is_sensitive("internal_note")
    assert own.text("internal_note=abc other=1") == "internal_note=[redacted] other=1"
    assert not own.name_is_sensitive("password")  # the deployment chose its own list


def test_redacting_twice_changes_nothing() -> None:
    once = REDACTOR.text("token=sk-abc123 and Authorization: Bearer ab12cd34ef56")
    assert REDACTOR.text(once) == once
    assert once == "token=[redacted] and Authorization: [redacted] [redacted]"


def test_a_pem_block_cut_off_before_its_end_is_redacted_to_the_end() -> None:
    cut = "key: -----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA"
    assert "b3BlbnNzaC1" not in REDACTOR.text(cut)


def test_log_records_are_scrubbed_of_shapes_too(caplog: pytest.LogCaptureFixture) -> None:
    import logging

    install_log_redaction(REDACTOR)
    with caplog.at_level(logging.INFO):
        logging.getLogger("zeromem.test").info("calling with %s", "Bearer ab12cd34ef56gh")
    assert "ab12cd34ef56gh" not in caplog.records[-1].getMessage()
