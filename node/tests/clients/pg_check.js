// node-postgres (npm `pg`) against EbbDB, as Node.js services use it: a SCRAM login, a table
// created, parameterized INSERTs and SELECTs (the extended protocol with typed values), a
// count, and a refusal carried as an error with its SQLSTATE. Exits non-zero at the first
// failure.
//
//   node pg_check.js <port> <user> <password> <table>
const { Client } = require("pg");

const [port, user, password, table] = process.argv.slice(2);

function check(ok, what) {
  if (!ok) {
    console.log("FAILED:", what);
    process.exit(1);
  }
  console.log("ok", what);
}

(async () => {
  const client = new Client({ host: "127.0.0.1", port: Number(port), user, password, database: "public" });
  await client.connect();
  await client.query(`CREATE TABLE ${table} (host TAG, usage DOUBLE, n BIGINT)`);
  for (let i = 0; i < 5; i++) {
    await client.query(`INSERT INTO ${table} (time, host, usage, n) VALUES ($1, $2, $3, $4)`, [
      new Date(Date.UTC(2024, 0, 1, 0, i)),
      i % 2 === 0 ? "a" : "b",
      i + 0.5,
      i,
    ]);
  }
  const all = await client.query(`SELECT count(*) AS c FROM ${table}`);
  check(Number(all.rows[0].c) === 5, "five rows inserted with parameters");
  const a = await client.query(
    `SELECT host, usage, n, time FROM ${table} WHERE host = $1 AND usage > $2 ORDER BY time`,
    ["a", 1.0],
  );
  check(a.rows.length === 2, "a parameterized SELECT");
  check(a.rows[0].host === "a" && a.rows[0].usage === 2.5, `typed values ${JSON.stringify(a.rows[0])}`);
  check(a.rows[0].time instanceof Date, "a timestamp as a Date");
  check(a.fields.map((f) => f.name).join(",") === "host,usage,n,time", "column names");
  const v = await client.query("SELECT version() AS v, current_database() AS d");
  check(v.rows[0].d === "public" && /PostgreSQL/.test(v.rows[0].v), "version() and current_database()");
  try {
    await client.query("SELECT * FROM no_such_table");
    check(false, "an unknown table is refused");
  } catch (e) {
    check(e.code === "42P01", `an unknown table is refused with 42P01 (${e.code}: ${e.message})`);
  }
  await client.end();
  console.log("NODE-POSTGRES CHECKS PASSED");
})().catch((e) => {
  console.log("FAILED:", e);
  process.exit(1);
});
