"""Process settings from DPPROXY_* environment variables, validated at start-up."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="DPPROXY_", frozen=True, extra="ignore")

    policy: Path = Path("policy.toml")
    ledger: Path | None = None  # overrides the policy's ledger path
    host: str = "127.0.0.1"
    port: int = Field(8000, ge=1, le=65535)
    query_timeout_s: float = Field(30.0, gt=0, le=3600)
    threads: int = Field(2, ge=1, le=256)
    memory_limit: str = "2GB"
