# dp-proxy, served by a non-root user. docs/operations.md has the details.
#   docker build -t dp-proxy .
#   docker run --rm -p 8000:8000 -v "$PWD/config:/config:ro" -v "$PWD/data:/data:ro" \
#     -e DPPROXY_LEDGER=/var/lib/dpproxy/ledger.sqlite dp-proxy
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# EXTRAS=spark (docker-compose.yml, profile spark) adds pyspark and the Java runtime Spark's driver needs.
ARG EXTRAS=""
RUN if [ -n "$EXTRAS" ]; then apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
 && rm -rf /var/lib/apt/lists/*; fi

# Install the package from a copy of the sources, then drop the copy: only the installed package remains.
COPY pyproject.toml /src/
COPY proxy /src/proxy
COPY accountant /src/accountant
COPY mechanisms /src/mechanisms
RUN pip install "/src${EXTRAS:+[$EXTRAS]}" \
 && rm -rf /src \
 && useradd --system --uid 10001 --user-group --home-dir /var/lib/dpproxy --create-home \
      --shell /usr/sbin/nologin dpproxy

# /config: the policy (read-only mount); /data: the DuckDB files it names; /var/lib/dpproxy: a SQLite ledger.
USER dpproxy:dpproxy
WORKDIR /var/lib/dpproxy
EXPOSE 8000 5433
# 5433: the PostgreSQL protocol, served only when DPPROXY_PG_PORT=5433 (docs/wire.md)
# SIGTERM: stop accepting, finish in-flight queries, exit 0 (give it more than DPPROXY_QUERY_TIMEOUT_S).
STOPSIGNAL SIGTERM
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 \
  CMD ["python", "-c", "import sys, urllib.request; sys.exit(urllib.request.urlopen('http://127.0.0.1:8000/readyz', timeout=4).status != 200)"]
ENTRYPOINT ["dpproxy"]
CMD ["serve", "--policy", "/config/policy.toml", "--host", "0.0.0.0"]
