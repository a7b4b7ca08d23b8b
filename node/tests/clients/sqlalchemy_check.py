"""SQLAlchemy 2 with psycopg 3, pandas.read_sql and SQLAlchemy's inspector against EbbDB, as
notebooks and Superset use them; psycopg's text and binary parameters. Exits non-zero at the
first failure.

python sqlalchemy_check.py <port> <user> <password> <table>
"""
import sys
from datetime import datetime, timezone

import pandas
import psycopg
import sqlalchemy

port, user, password, table = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]


def check(ok, what):
    if not ok:
        print("FAILED:", what, flush=True)
        sys.exit(1)
    print("ok", what, flush=True)


# psycopg 3 directly: server-side parameters, text and binary.
with psycopg.connect(
    host="127.0.0.1", port=port, user=user, password=password, dbname="public"
) as conn:
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute(f"CREATE TABLE {table} (host TAG, usage DOUBLE, n BIGINT)")
        t0 = datetime(2024, 1, 1, tzinfo=timezone.utc)
        rows = [(t0.replace(minute=i), f"h{i % 3}", i * 0.5, i) for i in range(30)]
        cur.executemany(
            f"INSERT INTO {table} (time, host, usage, n) VALUES (%s, %s, %s, %s)", rows
        )
    for binary in (False, True):
        with conn.cursor(binary=binary) as cur:
            cur.execute(
                f"SELECT count(*), sum(n) FROM {table} WHERE host = %s AND n >= %s",
                ("h1", 10),
            )
            got = cur.fetchone()
            check(got == (7, 10 + 13 + 16 + 19 + 22 + 25 + 28), f"psycopg binary={binary}: {got}")

url = f"postgresql+psycopg://{user}:{password}@127.0.0.1:{port}/public"
engine = sqlalchemy.create_engine(url)
with engine.connect() as conn:
    version = conn.execute(sqlalchemy.text("select pg_catalog.version()")).scalar()
    check(version.startswith("PostgreSQL"), f"version(): {version}")
    n = conn.execute(
        sqlalchemy.text(f"SELECT count(*) FROM {table} WHERE n < :n"), {"n": 5}
    ).scalar()
    check(n == 5, f"bound parameter: {n}")

frame = pandas.read_sql(f"SELECT time, host, usage FROM {table} ORDER BY time", engine)
check(len(frame) == 30 and list(frame.columns) == ["time", "host", "usage"], "pandas.read_sql")
check(frame["usage"].sum() == sum(i * 0.5 for i in range(30)), "pandas values")

inspector = sqlalchemy.inspect(engine)
check(inspector.default_schema_name == "public", f"default schema {inspector.default_schema_name}")
names = inspector.get_table_names()
check(table in names, f"get_table_names {names}")
schemas = inspector.get_schema_names()
check(schemas == ["public"], f"get_schema_names {schemas}")
columns = {c["name"]: c for c in inspector.get_columns(table)}
check(list(columns) == ["time", "host", "usage", "n"], f"get_columns {list(columns)}")
check(
    isinstance(columns["usage"]["type"], sqlalchemy.types.Float)
    and isinstance(columns["n"]["type"], sqlalchemy.types.BigInteger)
    and isinstance(columns["host"]["type"], sqlalchemy.types.Text)
    and isinstance(columns["time"]["type"], sqlalchemy.types.DateTime),
    f"column types {[str(c['type']) for c in columns.values()]}",
)
check(
    not columns["time"]["nullable"] and columns["usage"]["nullable"],
    "column nullability",
)
check(all(c["default"] is None for c in columns.values()), "no column defaults")
pk = inspector.get_pk_constraint(table)
check(pk["constrained_columns"] == [], f"get_pk_constraint {pk}")
check(inspector.get_indexes(table) == [], "get_indexes")
check(inspector.get_unique_constraints(table) == [], "get_unique_constraints")
check(inspector.get_foreign_keys(table) == [], "get_foreign_keys")
reflected = sqlalchemy.Table(table, sqlalchemy.MetaData(), autoload_with=engine)
check(list(reflected.columns.keys()) == ["time", "host", "usage", "n"], "Table reflection")
with engine.connect() as conn:
    rows = conn.execute(
        sqlalchemy.select(reflected.c.host, sqlalchemy.func.count())
        .where(reflected.c.n >= 10)
        .group_by(reflected.c.host)
        .order_by(reflected.c.host)
    ).all()
    check([tuple(r) for r in rows] == [("h0", 6), ("h1", 7), ("h2", 7)], f"select of a reflected table {rows}")
print("SQLALCHEMY CHECKS PASSED")
