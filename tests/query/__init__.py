"""Tests of proxy/query/: parse, analyse, price, rewrite and release, against DuckDB where SQL runs."""
