"""Reads a Strata topic's Iceberg table with pyiceberg (the independent reader of the Iceberg
tests) and prints its rows as JSON lines, sorted by partition and offset.

    iceberg_reader.py rest <catalog uri> <table> [key=value ...]
    iceberg_reader.py static <metadata location> [key=value ...]

key=value pairs are pyiceberg properties (s3.access-key-id, ...); the REST catalog's config
endpoint supplies the rest. `--filter EXPR` (before the positional arguments) applies a row
filter; `--summary` prints the current snapshot's summary properties as the first line.
"""

import json
import sys
from datetime import datetime, timedelta, timezone

from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.table import StaticTable


EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def millis(ts):
    return (ts - EPOCH) // timedelta(milliseconds=1)


def hexed(b):
    # Bytes as hex; a value_json table's own `value` field (not bytes) as it is.
    return b.hex() if isinstance(b, (bytes, bytearray)) else b


def main(argv):
    row_filter = None
    summary = False
    while argv and argv[0].startswith("--"):
        flag = argv.pop(0)
        if flag == "--filter":
            row_filter = argv.pop(0)
        elif flag == "--summary":
            summary = True
    kind = argv[0]
    if kind == "rest":
        uri, name, extra = argv[1], argv[2], argv[3:]
        props = dict(kv.split("=", 1) for kv in extra)
        table = RestCatalog("strata", uri=uri, **props).load_table(("strata", name))
    else:
        location, extra = argv[1], argv[2:]
        props = dict(kv.split("=", 1) for kv in extra)
        table = StaticTable.from_metadata(location, properties=props)
    if summary:
        snap = table.current_snapshot()
        props = {} if snap is None else dict(snap.summary.additional_properties)
        print(json.dumps({"summary": props}))
    scan = table.scan(row_filter=row_filter) if row_filter else table.scan()
    rows = scan.to_arrow().to_pylist()
    rows.sort(key=lambda r: (r["partition"], r["offset"]))
    for r in rows:
        out = {}
        for k, v in r.items():
            if k == "timestamp":
                out["timestamp_ms"] = None if v is None else millis(v)
            elif k in ("key", "value"):
                out[k] = hexed(v)
            elif k == "headers":
                out[k] = None if v is None else [[h["key"], hexed(h["value"])] for h in v]
            else:
                out[k] = v
        print(json.dumps(out, sort_keys=True, default=str))


if __name__ == "__main__":
    main(sys.argv[1:])
