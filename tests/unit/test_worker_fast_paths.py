"""The worker's faster stand-ins give exactly what the code they replace gives."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from nats.aio.client import Client as NatsClient

from zeromem.bus import _Client

_HEADER_BYTES = st.lists(
    st.one_of(
        st.binary(max_size=12),
        st.sampled_from(
            [
                b"Nats-Msg-Id: abc",
                b"Zm-Reply:_INBOX.x.y",
                b"a b: c",
                b"\x1cX: y",
                b" Name :\tv ",
                b": empty",
                b"K:",
                b"\xffbad: v",
                b"V: \xff\xfe",
                b"Status: 404",
                b"no colon",
            ]
        ),
    ),
    max_size=6,
).map(b"\r\n".join)


@given(_HEADER_BYTES)
def test_header_parse_matches_nats_py(raw: bytes) -> None:
    assert _Client._parse_header_lines(raw) == NatsClient._parse_header_lines(raw)
