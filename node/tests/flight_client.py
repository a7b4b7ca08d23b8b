"""The real ADBC Flight SQL driver (PyPI `adbc-driver-flightsql`) against an EbbDB server.

Run by the `flight` integration tests: python3 flight_client.py URI. The server holds table
`cpu` in database `public` (hosts h0..h9, 300,000 rows written by the test), users `admin`
(password `ADMIN_PW` from the environment) and `reader` (READ on public, password `r-pass`).
Prints one line per check and exits non-zero on the first failure.
"""

import os
import sys

import adbc_driver_flightsql
import adbc_driver_flightsql.dbapi as flight
import adbc_driver_manager
import pyarrow as pa

URI = sys.argv[1]
ROWS = int(sys.argv[2])


def connect(user, password, database=None):
    kwargs = {"username": user, "password": password}
    if database:
        kwargs["adbc.flight.sql.rpc.call_header.database"] = database
    return flight.connect(URI, db_kwargs=kwargs)


def check(what, cond, detail=""):
    if not cond:
        print(f"FAILED: {what} {detail}", flush=True)
        sys.exit(1)
    print(f"ok: {what}", flush=True)


admin = connect("admin", os.environ["ADMIN_PW"])
cur = admin.cursor()

# A query.
cur.execute("SELECT count(*) AS n, count(DISTINCT host) AS hosts FROM cpu")
row = cur.fetchone()
check("count through Flight SQL", row == (ROWS, 10), row)

# Parameters: a prepared statement bound with $1, run twice with different values.
cur.execute("SELECT host, count(*) AS n FROM cpu WHERE host = $1 GROUP BY host", parameters=("h3",))
check("a parameter", cur.fetchall() == [("h3", ROWS // 10)])
cur.execute("SELECT host, count(*) AS n FROM cpu WHERE host = $1 GROUP BY host", parameters=("h7",))
check("the same statement, another value", cur.fetchall() == [("h7", ROWS // 10)])
cur.execute("SELECT count(*) FROM cpu WHERE usage >= $1 AND host = $2", parameters=(50.0, "h1"))
n = cur.fetchone()[0]
check("two parameters of two types", 0 < n < ROWS // 10, n)
# The driver's own placeholder style (DB-API qmark), and a computed column whose nullability
# the FlightInfo announces as the data carries it.
check("the driver's paramstyle", flight.paramstyle == "qmark", flight.paramstyle)
cur.execute("SELECT count(*) FROM cpu WHERE usage >= ? AND host = ?", parameters=(50.0, "h1"))
check("? placeholders", cur.fetchone()[0] == n)
cur.execute("SELECT 1 + ?", parameters=(41,))
check("select 1 + ?", cur.fetchone()[0] == 42)
cur.execute("SELECT 1 + $1", parameters=(41,))
check("select 1 + $1", cur.fetchone()[0] == 42)
cur.execute("SELECT '?' AS q, 1 + ? AS v", parameters=(1,))
check("a ? inside a string is text", cur.fetchone() == ("?", 2))

# A large result streams in batches.
cur.execute("SELECT time, host, usage FROM cpu")
reader = cur.fetch_record_batch()
batches, rows = 0, 0
for batch in reader:
    batches += 1
    rows += batch.num_rows
check("a large result, streamed", rows == ROWS and batches > 1, (rows, batches))

# Catalog metadata: GetSqlInfo, GetTables (with schemas), GetDbSchemas.
info = admin.adbc_get_info()
check("GetSqlInfo names the server", info.get("vendor_name") == "EbbDB", info)
schema = admin.adbc_get_table_schema("cpu", db_schema_filter="public")
check(
    "a table's schema",
    schema.field("usage").type == pa.float64() and schema.field("host").type == pa.string(),
    schema,
)
objects = admin.adbc_get_objects(depth="tables").read_all().to_pylist()
tables = {
    (s["db_schema_name"], t["table_name"])
    for c in objects
    for s in c["catalog_db_schemas"] or []
    for t in s["db_schema_tables"] or []
}
check("GetTables lists public.cpu", ("public", "cpu") in tables, sorted(tables)[:10])
check("the table types", "TABLE" in admin.adbc_get_table_types())

# Another database through the call header.
other = connect("admin", os.environ["ADMIN_PW"], database="other")
oc = other.cursor()
oc.execute("SELECT count(*) FROM mem")
check("the database header", oc.fetchone()[0] == 3)
oc.close()
other.close()

# DDL EbbDB plans itself, and a table it creates.
cur.execute("CREATE TABLE made_here (site TAG, level DOUBLE) WITH (retention = '30d')")
cur.execute("SELECT count(*) FROM made_here")
check("CREATE TABLE through Flight SQL", cur.fetchone()[0] == 0)

# An update: a DELETE's rows.
cur.execute("DELETE FROM cpu WHERE host = 'h9'")
answer = cur.fetchall()
# On a cluster a row per shard, with a leading `shard` column.
col = [d[0] for d in cur.description].index("rows_deleted")
check("a DELETE answers with its rows", sum(r[col] for r in answer) == ROWS // 10, answer)
cur.execute("SELECT count(*) FROM cpu")
check("a DELETE through Flight SQL", cur.fetchone()[0] == ROWS - ROWS // 10)
cur.close()
admin.close()

# Access control: the same front door as HTTP and PostgreSQL.
try:
    connect("admin", "wrong password").cursor().execute("SELECT 1")
    check("a wrong password is refused", False)
except adbc_driver_manager.Error as e:
    check("a wrong password is refused", "UNAUTHENTICATED" in str(e) or "Unauthenticated" in str(e), e)

reader = connect("reader", "r-pass")
rc = reader.cursor()
rc.execute("SELECT count(*) FROM cpu")
check("a reader reads", rc.fetchone()[0] == ROWS - ROWS // 10)
try:
    rc.execute("DELETE FROM cpu WHERE host = 'h1'")
    rc.fetchall()
    check("a reader may not delete", False)
except adbc_driver_manager.Error as e:
    check("a reader may not delete", "PERMISSION_DENIED" in str(e) or "ermission" in str(e), e)
try:
    rc.execute("SELECT count(*) FROM other.mem")
    rc.fetchall()
    check("a reader of public may not read other", False)
except adbc_driver_manager.Error as e:
    check("a reader of public may not read other", "ermission" in str(e) or "PERMISSION" in str(e), e)
rc.close()
reader.close()
print("all checks passed", flush=True)
