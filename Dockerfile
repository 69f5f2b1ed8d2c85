# a2a-gateway container image: one uvicorn worker per container, non-root (uid/gid 10001).
# Build:  docker build -t a2a-gateway .
# Run:    docker run -p 8080:8080 -p 127.0.0.1:8081:8081 \
#             -v $PWD/gateway.yaml:/etc/a2a-gateway/gateway.yaml \
#             -v a2a-gateway-data:/var/lib/a2a-gateway a2a-gateway
# Overrides: arguments after the image name replace CMD, e.g.
#             docker run a2a-gateway serve --config /etc/a2a-gateway/gateway.yaml --ledger redis://redis:6379/0
#           and the environment works too: every serve flag has an A2A_GATEWAY_* variable
#           (docker run a2a-gateway --help lists them), e.g. -e A2A_GATEWAY_UPSTREAM=http://worker:9000/
#           replaces the baked config's one upstream URL. A flag wins over its variable, a
#           variable over the config file. 8080 is client traffic, 8081 the admin listener
#           (/metrics, probes). Lint: hadolint Dockerfile (tests/deploy/test_image.py).

# ---- build: install the package and its dependencies into /install ------------------------
FROM python:3.11-slim-bookworm AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY gateway ./gateway
# `pip install .` from the build context; tests/deploy/test_image.py runs this same line.
RUN pip install --no-cache-dir --disable-pip-version-check --prefix=/install .

# ---- runtime ----------------------------------------------------------------------------------
FROM python:3.11-slim-bookworm
LABEL org.opencontainers.image.title="a2a-gateway" \
      org.opencontainers.image.description="ASGI gateway for the A2A (Agent2Agent) protocol" \
      org.opencontainers.image.licenses="Apache-2.0"
# No .pyc writes at run time (the root filesystem may be read-only); logs leave unbuffered.
# The state directory (the default SQLite ledger's, logged at start as state_dir) is the volume.
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    A2A_GATEWAY_STATE_DIR=/var/lib/a2a-gateway
COPY --from=build /install /usr/local
RUN groupadd --system --gid 10001 gateway \
    && useradd --system --no-log-init --uid 10001 --gid 10001 --no-create-home \
       --home-dir /var/lib/a2a-gateway --shell /usr/sbin/nologin gateway \
    && mkdir -p /etc/a2a-gateway /var/lib/a2a-gateway \
    && chown 10001:10001 /var/lib/a2a-gateway
# The sidecar config (worker on 127.0.0.1:9999, SQLite ledger in the volume); mount your own
# file over it. Every key: config/gateway.example.yaml.
COPY deploy/docker/gateway.yaml /etc/a2a-gateway/gateway.yaml
# The embedded SQLite ledger lives here; mount a volume to keep it across container restarts.
VOLUME /var/lib/a2a-gateway
WORKDIR /var/lib/a2a-gateway
# Numeric, so Kubernetes' runAsNonRoot can verify it without a runAsUser.
USER 10001:10001
EXPOSE 8080 8081
# /healthz (on the admin listener) answers once start-up (ledger open, first Agent Card fetch)
# is done; the start period covers a slow first card fetch. It assumes the admin port 8081.
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import urllib.request,sys; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:8081/healthz', timeout=2).status == 200 else 1)"]
ENTRYPOINT ["a2a-gateway"]
CMD ["serve", "--config", "/etc/a2a-gateway/gateway.yaml"]
