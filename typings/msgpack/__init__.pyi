# The part of msgpack's API zeromem calls: msgpack ships no type information (no py.typed,
# no stubs package). Read by mypy only ([tool.mypy] mypy_path).
from typing import Any

class Packer:
    def __init__(
        self, *, use_bin_type: bool = ..., autoreset: bool = ..., **options: Any
    ) -> None: ...
    def pack(self, obj: Any) -> bytes: ...

def unpackb(packed: bytes, **options: Any) -> Any: ...
