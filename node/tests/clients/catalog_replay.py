"""The catalog queries DBeaver and Metabase send (catalog_queries.json), replayed against EbbDB
with their parameters bound server-side as pgjdbc binds them. Every query must run; the ones a
tool builds its tree from must find the table and its columns with PostgreSQL's type names.
Exits non-zero at the first failure.

python catalog_replay.py <port> <user> <password> <database> <table>
"""
import json
import os
import sys

import psycopg

port, user, password, db, table = sys.argv[1:6]
doc = json.load(open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "catalog_queries.json")))

conn = psycopg.connect(host="127.0.0.1", port=port, user=user, password=password, dbname=db, autocommit=True)
cur = conn.cursor()
cur.execute("SELECT oid FROM pg_catalog.pg_namespace WHERE nspname = current_schema()")
ns = cur.fetchone()[0]
cur.execute("SELECT c.oid FROM pg_catalog.pg_class c WHERE c.relname = %s", (table,))
oid = cur.fetchone()[0]
values = {"@db": db, "@table": table, "@oid": oid, "@ns": ns}
raw = psycopg.RawCursor(conn)


def numbered(sql):
    """`?` outside quotes as `$1`, `$2`, ... (what pgjdbc sends)."""
    out, n, quote = [], 0, None
    for ch in sql:
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "?":
            n += 1
            out.append(f"${n}")
            continue
        out.append(ch)
    return "".join(out)


answers = {}
for q in doc["queries"]:
    params = [values.get(p, p) if isinstance(p, str) else p for p in q["params"]]
    try:
        sql = q["sql"].replace("<schema>", db).replace("<table>", table)
        raw.execute(numbered(sql), params, prepare=True)
        answers[q["id"]] = raw.fetchall() if raw.description else []
    except Exception as e:  # noqa: BLE001 - the failure is the report
        print(f"FAILED: {q['id']} ({q['what']}): {e}", flush=True)
        sys.exit(1)
    print("ok", q["id"], len(answers[q["id"]]), "rows", flush=True)


def check(ok, what):
    if not ok:
        print("FAILED:", what, flush=True)
        sys.exit(1)
    print("ok", what, flush=True)


check(table in [r[2] for r in answers["D15"]], f"DBeaver's tables of the schema: {answers['D15']}")
check(len(answers["D17"]) >= 2, f"DBeaver's columns: {answers['D17']}")
check((db, table) in [(r[0], r[1]) for r in answers["M5"]], f"Metabase's tables: {answers['M5']}")
types = {r[0]: r[1] for r in answers["M9"]}
check(types.get("time") == "timestamp", f"Metabase's column types: {types}")
print("CATALOG REPLAY PASSED")
