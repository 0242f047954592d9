"""The instruments, declared once. Attributes are bounded: tenant, agent, op, shard,
outcome; never a key or free text (a key per series would explode any backend). Tenant
and agent values come from clients, so they are bounded in number too: ``Telemetry``
names the first ``Limits.metric_tenants`` tenants and, per tenant, the first
``Limits.metric_agents`` agents it sees, and counts any later one as ``_other`` (50
recalls with unique 200 KB reader strings once grew a Prometheus page from 2 MB to
222 MB)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterable

from opentelemetry import metrics, trace
from opentelemetry.metrics import CallbackOptions, Meter, MeterProvider, Observation

SCOPE = "zeromem"

# Buckets for latencies in seconds: sub-millisecond to tens of seconds.
_LATENCY_BUCKETS = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
)
_BATCH_BUCKETS = (1, 2, 5, 10, 25, 50, 100, 250, 500, 1000)


def attributes(tenant: str, agent: str = "", **more: str | int) -> dict[str, str | int]:
    attrs: dict[str, str | int] = {"zeromem.tenant": tenant}
    if agent:
        attrs["zeromem.agent"] = agent
    attrs.update(more)
    return attrs


OTHER = "_other"  # the attribute value of a tenant or an agent past the bound


class Telemetry:
    """Every zeromem instrument, on one meter. Built from a MeterProvider so tests can read
    real values through an in-memory reader; with none, the global (no-op unless the
    application configured OpenTelemetry) provider is used."""

    def __init__(
        self,
        meter_provider: MeterProvider | None = None,
        tracer_provider: trace.TracerProvider | None = None,
        *,
        max_tenants: int = 1000,
        max_agents: int = 100,
    ) -> None:
        self._providers = [p for p in (meter_provider, tracer_provider) if p is not None]
        meter: Meter = (meter_provider or metrics.get_meter_provider()).get_meter(SCOPE)
        self.tracer = (tracer_provider or trace.get_tracer_provider()).get_tracer(SCOPE)
        self._lag: dict[int, int] = {}
        self.max_tenants = max_tenants
        self.max_agents = max_agents
        self._agents: dict[str, set[str]] = {}  # tenant -> agents named in attributes

        # --- the write path ---
        self.commands_published = meter.create_counter(
            "zeromem.commands.published",
            unit="{command}",
            description="Commands an agent published (SDK side)",
        )
        self.commands = meter.create_counter(
            "zeromem.commands",
            unit="{command}",
            description="Commands handled by the workers, by op and outcome "
            "(applied, conflict, rejected, duplicate, dead_letter)",
        )
        self.write_llm_tokens = meter.create_counter(
            "zeromem.write.llm_tokens",
            unit="{token}",
            description="LLM tokens spent on writing memory: zero by construction, "
            "reported so the zero is visible next to the recall figures",
        )
        self.apply_duration = meter.create_histogram(
            "zeromem.command.apply.duration",
            unit="s",
            description="From the agent's publish to the worker's apply, once per command "
            "message (a batch message's commands were published together)",
            explicit_bucket_boundaries_advisory=_LATENCY_BUCKETS,
        )
        self.batch_size = meter.create_histogram(
            "zeromem.worker.batch.size",
            unit="{command}",
            description="Commands per batch a worker applied in one round trip",
            explicit_bucket_boundaries_advisory=_BATCH_BUCKETS,
        )
        meter.create_observable_gauge(
            "zeromem.shard.pending",
            callbacks=[self._observe_lag],
            unit="{command}",
            description="Commands waiting in a shard's consumer (lag)",
        )

        # --- memories ---
        self.memories_stored = meter.create_up_down_counter(
            "zeromem.memories.stored",
            unit="{memory}",
            description="Live memories created minus removed",
        )
        self.memories_expired = meter.create_counter(
            "zeromem.memories.expired",
            unit="{memory}",
            description="Memories removed because their time to live passed",
        )
        self.memories_archived = meter.create_counter(
            "zeromem.memories.archived",
            unit="{memory}",
            description="Memories moved to the archive tier",
        )

        # --- recall: the token savings ---
        self.recalls = meter.create_counter(
            "zeromem.recall.requests", unit="{request}", description="Recalls answered"
        )
        self.tokens_injected = meter.create_counter(
            "zeromem.recall.tokens.injected",
            unit="{token}",
            description="Tokens of the context blocks recall returned",
        )
        self.tokens_baseline = meter.create_counter(
            "zeromem.recall.tokens.baseline",
            unit="{token}",
            description="Tokens of every memory that passed the filters: "
            "what injecting everything would have cost",
        )
        self.tokens_saved = meter.create_counter(
            "zeromem.recall.tokens.saved",
            unit="{token}",
            description="Baseline tokens minus injected tokens",
        )
        self.history_tokens = meter.create_counter(
            "zeromem.agent.history.tokens",
            unit="{token}",
            description="Tokens of an agent's full conversation history, as the agent "
            "reports them: what carrying the history would have cost",
        )
        self.recall_duration = meter.create_histogram(
            "zeromem.recall.duration",
            unit="s",
            description="Recall service time",
            explicit_bucket_boundaries_advisory=_LATENCY_BUCKETS,
        )

    # --- helpers the services call -------------------------------------------------------

    def bound(self, max_tenants: int, max_agents: int) -> None:
        """Set the bounds on attribute values (from ``Limits``; a service calls it)."""
        self.max_tenants, self.max_agents = max_tenants, max_agents

    def tenant(self, tenant: str) -> str:
        """``tenant`` as an attribute value: itself, or ``_other`` past the bound."""
        if tenant in self._agents:
            return tenant
        if len(self._agents) >= self.max_tenants:
            return OTHER
        self._agents[tenant] = set()
        return tenant

    def agent(self, tenant: str, agent: str) -> str:
        """``agent`` of ``tenant`` as an attribute value (``_other`` past the bound)."""
        agents = self._agents.get(self.tenant(tenant))
        if agents is None or agent in agents:
            return agent if agents is not None else OTHER
        if len(agents) >= self.max_agents:
            return OTHER
        agents.add(agent)
        return agent

    def attributes(self, tenant: str, agent: str = "", **more: str | int) -> dict[str, str | int]:
        """``attributes``, with tenant and agent bounded."""
        label = self.tenant(tenant)
        return attributes(label, self.agent(tenant, agent) if agent else "", **more)

    def set_lag(self, shard: int, pending: int) -> None:
        self._lag[shard] = pending

    def _observe_lag(self, _options: CallbackOptions) -> Iterable[Observation]:
        return [
            Observation(pending, {"zeromem.shard": shard}) for shard, pending in self._lag.items()
        ]

    async def shutdown(self, limit_s: float = 2.0) -> None:
        """Export what is still in hand and stop the exporters, giving up after ``limit_s``.
        Without it a stopping service loses its last export interval of counts (a minute by
        default: a short-lived pod's token savings), and an OTLP reader whose collector is
        gone keeps retrying for as long as the process lives. The exporters block and cannot
        be cancelled, so they stop in a daemon thread that a stopping process leaves behind
        at the deadline. A provider this object did not get (the global one) is the
        application's to stop."""
        providers = self._providers
        if not providers:
            return

        def stop_all() -> None:
            for provider in providers:
                stop = getattr(provider, "shutdown", None)
                if stop is not None:  # the API's no-op providers have none
                    with contextlib.suppress(Exception):
                        stop()

        stopping = threading.Thread(target=stop_all, name="telemetry-shutdown", daemon=True)
        stopping.start()
        await asyncio.to_thread(stopping.join, limit_s)

    def record_recall(
        self, tenant: str, agent: str, injected: int, baseline: int, seconds: float
    ) -> None:
        attrs = self.attributes(tenant, agent)
        self.recalls.add(1, attrs)
        self.tokens_injected.add(injected, attrs)
        self.tokens_baseline.add(baseline, attrs)
        self.tokens_saved.add(max(0, baseline - injected), attrs)
        self.recall_duration.record(seconds, attrs)
