"""dlt's ``rest_api`` source loading the benchmark's pages into PostgreSQL: the baseline.

    python bench/dlt_baseline.py --url http://127.0.0.1:PORT --dsn postgresql://…/db

Run by ``bench/sync_throughput.py --backend postgres`` as a subprocess, so that dlt's import
cost and its worker threads stay out of the other measurements. It crawls ``GET /items`` with
dlt's cursor paginator (``next_cursor`` in the body, sent back as ``?cursor=``) and loads the
records into ``<dataset>.items`` with the ``merge`` write disposition on ``id`` (an idempotent
load, as syncd's upsert is; ``--write-disposition append`` is the cheaper, non-idempotent one).

The time measured is ``pipeline.run`` (extract, normalize, load), not the import. Prints one
JSON object: ``{"records": n, "seconds": s, "dlt": version, "write_disposition": …}``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from typing import Any
from urllib.parse import urlsplit, urlunsplit


def with_password(dsn: str) -> str:
    """``dsn`` with a placeholder password when it has none: dlt refuses credentials without
    one, while a server with ``trust`` or peer authentication never asks for it."""
    parts = urlsplit(dsn)
    if parts.password is not None or parts.username is None:
        return dsn
    host = parts.netloc.rsplit("@", 1)[1]
    return urlunsplit(parts._replace(netloc=f"{parts.username}:unused@{host}"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", required=True, help="base URL of the source server")
    parser.add_argument("--dsn", required=True, help="PostgreSQL DSN to load into")
    parser.add_argument("--dataset", default="dlt_bench", help="schema to load into")
    parser.add_argument("--write-disposition", choices=("merge", "append"), default="merge")
    args = parser.parse_args()

    # No telemetry, and nothing left in the user's home directory.
    os.environ.setdefault("RUNTIME__DLTHUB_TELEMETRY", "false")
    os.environ.setdefault("RUNTIME__LOG_LEVEL", "WARNING")

    import dlt
    from dlt.sources.rest_api import rest_api_source

    config: Any = {
        "client": {
            "base_url": args.url.rstrip("/") + "/",
            "paginator": {
                "type": "cursor",
                "cursor_path": "next_cursor",
                "cursor_param": "cursor",
            },
        },
        "resources": [
            {
                "name": "items",
                "endpoint": {"path": "items", "data_selector": "data"},
                "primary_key": "id",
                "write_disposition": args.write_disposition,
            }
        ],
    }
    with tempfile.TemporaryDirectory(prefix="dlt-bench-") as pipelines_dir:
        pipeline = dlt.pipeline(
            pipeline_name="syncd_bench",
            pipelines_dir=pipelines_dir,
            destination=dlt.destinations.postgres(credentials=with_password(args.dsn)),
            dataset_name=args.dataset,
        )
        source = rest_api_source(config)
        started = time.perf_counter()
        pipeline.run(source)
        seconds = time.perf_counter() - started
        with pipeline.sql_client() as client:
            rows = client.execute_sql(f"SELECT count(*) FROM {args.dataset}.items")
        records = int(rows[0][0]) if rows else 0
    json.dump(
        {
            "records": records,
            "seconds": seconds,
            "dlt": dlt.__version__,
            "write_disposition": args.write_disposition,
        },
        sys.stdout,
    )
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
