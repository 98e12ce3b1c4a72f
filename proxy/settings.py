"""Process settings from DPPROXY_* environment variables, validated at start-up."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from accountant.ledger.charges import Waits

MAX_ANSWERS = 4096  # DPPROXY_ANSWER_MEMORY's largest value: at most 4 194 304 remembered rows per store


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="DPPROXY_", frozen=True, extra="ignore")

    policy: Path = Path("policy.toml")
    ledger: str | None = None  # overrides the policy's ledger: a SQLite path, sqlite:///PATH or postgresql://…
    host: str = "127.0.0.1"
    port: int = Field(8000, ge=1, le=65535)
    query_timeout_s: float = Field(30.0, gt=0, le=3600)
    threads: int = Field(2, ge=1, le=256)
    memory_limit: str = "8GB"  # 2GB ran out on the 10M-row demo workload
    store_dir: Path | None = None  # bounding stores and their key (docs/operations.md); default: the ledger's directory
    # SQL texts whose exact rows each bounding store remembers (docs/privacy.md §10.7.1); 0: every answer scans
    answer_memory: int = 64  # histogram_cache.ANSWERS (settings sit below the store's room)
    # operations (docs/operations.md)
    metrics_token: SecretStr | None = None  # a bearer token that may read /metrics (besides admin keys)
    log_format: Literal["json", "text"] = "json"
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    rejections_kept: int = Field(500, ge=1, le=100_000)  # recent rejections kept per process (dashboard)
    readiness_timeout_s: float = Field(2.0, gt=0, le=60)  # per /readyz check (ledger, each engine)
    # the ledger's waits (docs/operations.md, "Ledger waits"): past one, a 503 `ledger_busy` with Retry-After
    ledger_lock_timeout_s: float = Field(5.0, gt=0, le=600)  # for a lock (or a pooled connection)
    ledger_statement_timeout_s: float = Field(10.0, gt=0, le=600)  # for one statement of an admit (PostgreSQL)
    ledger_idle_timeout_s: float = Field(5.0, gt=0, le=600)  # a session idle in a transaction is ended (PostgreSQL)
    # the largest request body read (proxy/http/middleware/body_gate.py); larger ones get 413 without being read
    max_body_bytes: int = Field(64 * 1024, ge=1024, le=16 * 1024 * 1024)
    query_workers: int = Field(2, ge=1, le=64)  # threads that run queries and previews (proxy/run/query_pool.py)
    # server processes of `dpproxy serve` (--workers): replicas on one port, sharing the ledger and the stores
    workers: int = Field(1, ge=1, le=64)
    # the PostgreSQL protocol (docs/wire.md): off unless a port is set; TLS unless plaintext is allowed for loopback
    pg_port: int | None = Field(None, ge=1, le=65535)
    pg_tls_cert: Path | None = None
    pg_tls_key: Path | None = None
    pg_allow_plaintext_loopback: bool = False
    pg_max_connections: int = Field(100, ge=1, le=10_000)  # open PostgreSQL-protocol connections per process
    interactive_docs: bool = False  # serve /docs and /redoc (third-party scripts from a CDN; see docs/operations.md)

    @property
    def ledger_waits(self) -> Waits:
        """The bounds of every ledger wait, as the ledgers take them."""
        return Waits(self.ledger_lock_timeout_s, self.ledger_statement_timeout_s, self.ledger_idle_timeout_s)

    @field_validator("ledger", mode="before")
    @classmethod
    def _address(cls, value: object) -> object:
        return os.fspath(value) if isinstance(value, os.PathLike) else value

    @field_validator("pg_port", "pg_tls_cert", "pg_tls_key", mode="before")
    @classmethod
    def _unset(cls, value: object) -> object:
        """Empty means unset (compose passes `${DPPROXY_PG_PORT:-}`)."""
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("answer_memory", mode="before")
    @classmethod
    def _answers(cls, value: object) -> object:
        """A whole number of texts from 0 (never remember) to MAX_ANSWERS, named as the operator sets it."""
        text = str(value).strip()
        if isinstance(value, bool) or not text.isdigit() or int(text) > MAX_ANSWERS:
            raise ValueError(f"DPPROXY_ANSWER_MEMORY must be a whole number from 0 (every answer scans) to "
                             f"{MAX_ANSWERS}, not {value!r}")
        return int(text)

    @field_validator("metrics_token", mode="before")
    @classmethod
    def _token(cls, value: object) -> object:
        """Empty means unset (compose passes `${DPPROXY_METRICS_TOKEN:-}`); a set token must be hard to guess."""
        text = value.get_secret_value() if isinstance(value, SecretStr) else value
        if text is None or (isinstance(text, str) and not text.strip()):
            return None
        if isinstance(text, str) and len(text.strip()) < 16:
            raise ValueError("DPPROXY_METRICS_TOKEN must have at least 16 characters (e.g. `openssl rand -hex 16`)")
        return text
