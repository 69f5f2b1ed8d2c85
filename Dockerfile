# a2a-gateway container image: one uvicorn worker per container, non-root.
# Build:  docker build -t a2a-gateway .
# Run:    docker run -p 8080:8080 -v $PWD/gateway.yaml:/etc/a2a-gateway/gateway.yaml \
#             -v a2a-gateway-data:/var/lib/a2a-gateway a2a-gateway
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY gateway ./gateway
RUN pip install --no-cache-dir --prefix=/install .

FROM python:3.11-slim
COPY --from=build /install /usr/local
RUN useradd --system --uid 10001 --no-create-home gateway \
    && mkdir -p /etc/a2a-gateway /var/lib/a2a-gateway \
    && chown gateway /var/lib/a2a-gateway \
    && printf 'listen:\n  host: 0.0.0.0\n  port: 8080\nupstreams:\n  - name: worker\n    url: http://127.0.0.1:9999/\nledger:\n  url: sqlite:////var/lib/a2a-gateway/ledger.db\n' \
       > /etc/a2a-gateway/gateway.yaml
# The embedded SQLite ledger lives here; mount a volume to keep it across container restarts.
VOLUME /var/lib/a2a-gateway
WORKDIR /var/lib/a2a-gateway
USER gateway
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=3s --retries=3 \
    CMD ["python", "-c", "import urllib.request,sys; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:8080/healthz', timeout=2).status == 200 else 1)"]
ENTRYPOINT ["a2a-gateway"]
CMD ["serve", "--config", "/etc/a2a-gateway/gateway.yaml"]
