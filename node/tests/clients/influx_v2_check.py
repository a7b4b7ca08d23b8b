"""The InfluxDB v2 Python client (`influxdb-client`) writing to EbbDB with an API token, as
Telegraf-era scripts and services do: points built with its Point API and line protocol text,
in batches through its synchronous write API, with nanosecond and second precision. The caller
checks what was stored. Exits non-zero at the first failure.

python influx_v2_check.py <http url> <token> <bucket>
"""
import sys
from datetime import datetime, timezone

from influxdb_client import InfluxDBClient, Point, WritePrecision
from influxdb_client.client.write_api import SYNCHRONOUS

url, token, bucket = sys.argv[1], sys.argv[2], sys.argv[3]

with InfluxDBClient(url=url, token=token, org="ebb") as client:
    write = client.write_api(write_options=SYNCHRONOUS)
    points = [
        Point("weather")
        .tag("city", f"c{i % 3}")
        .field("temp", 20.0 + i)
        .field("rain", i % 2 == 0)
        .time(datetime(2024, 1, 1, 0, i, tzinfo=timezone.utc), WritePrecision.NS)
        for i in range(10)
    ]
    write.write(bucket=bucket, record=points)
    write.write(
        bucket=bucket,
        record="weather,city=c9 temp=1.5,rain=false 1704067200",
        write_precision=WritePrecision.S,
    )
    # A refused write raises, with the server's reason.
    try:
        write.write(bucket=bucket, record='weather,city=c0 temp="hot" 1704067200', write_precision=WritePrecision.S)
        print("FAILED: a string for a float column was accepted")
        sys.exit(1)
    except Exception as e:  # ApiException
        if "float" not in str(e):
            print("FAILED: unexpected refusal:", e)
            sys.exit(1)
print("INFLUX V2 CHECKS PASSED")
