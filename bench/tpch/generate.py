"""TPC-H data for bench/tpch/run.py and tests/bench/test_tpch.py: `tpchgen-cli` (PyPI, pinned in pyproject's test
extra) writes Parquet at a scale factor, loaded into one DuckDB file, `<dir>/tpch.duckdb` (the file policy.toml
names, relative to it: `data/tpch.duckdb`).

    python bench/tpch/generate.py [--scale 0.1] [--dir bench/tpch/data]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import duckdb

TABLES = ("customer", "orders", "lineitem", "nation", "region", "part", "supplier", "partsupp")
HERE = Path(__file__).resolve().parent


def generate(scale: float, directory: Path) -> Path:
    """`directory/tpch.duckdb` at `scale`, generated unless a file of that scale is already there."""
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / "tpch.duckdb"
    stamp = directory / "scale.txt"
    if target.is_file() and stamp.is_file() and stamp.read_text().strip() == repr(scale):
        return target
    cli = shutil.which("tpchgen-cli") or str(Path(sys.executable).with_name("tpchgen-cli"))
    with tempfile.TemporaryDirectory(dir=directory) as parquet:
        subprocess.run([cli, "parquet", "-s", repr(scale), "--output-dir", parquet], check=True,
                       stdout=subprocess.DEVNULL)
        target.unlink(missing_ok=True)
        con = duckdb.connect(str(target))
        try:
            for table in TABLES:
                con.execute(f"CREATE TABLE {table} AS SELECT * FROM read_parquet(?)", [f"{parquet}/{table}.parquet"])
            con.execute("CHECKPOINT")
        finally:
            con.close()
    stamp.write_text(repr(scale) + "\n")
    return target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=0.1)
    parser.add_argument("--dir", type=Path, default=HERE / "data")
    args = parser.parse_args()
    print(generate(args.scale, args.dir))


if __name__ == "__main__":
    main()
