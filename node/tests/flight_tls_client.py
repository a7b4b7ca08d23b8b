"""ADBC over Flight SQL with TLS: python3 flight_tls_client.py URI CA_FILE. A client trusting
the CA reads; a plain-text client is refused. Prints `all checks passed`."""

import sys

import adbc_driver_flightsql.dbapi as flight
import adbc_driver_manager

uri, ca = sys.argv[1], open(sys.argv[2]).read()
options = {"adbc.flight.sql.client_option.tls_root_certs": ca}
with flight.connect(uri, db_kwargs=options) as conn, conn.cursor() as cur:
    cur.execute("SELECT count(*) FROM cpu")
    assert cur.fetchone()[0] == 2
print("ok: a query over TLS", flush=True)
try:
    plain = uri.replace("grpc+tls://", "grpc://")
    with flight.connect(plain) as conn, conn.cursor() as cur:
        cur.execute("SELECT 1")
        cur.fetchall()
    print("FAILED: a plain-text client was served", flush=True)
    sys.exit(1)
except adbc_driver_manager.Error:
    print("ok: a plain-text client is refused", flush=True)
print("all checks passed", flush=True)
