"""OpenTelemetry for zeromem: every instrument in one place, and its configuration.

The instruments prove what zeromem is for: tokens recall injected against what injecting
every memory (or the agent's whole history) would have cost, and the write path's cost
in LLM tokens, which is zero and is reported as zero.
"""

from zeromem.telemetry.instruments import Telemetry, attributes
from zeromem.telemetry.setup import configure_telemetry

__all__ = ["Telemetry", "attributes", "configure_telemetry"]
