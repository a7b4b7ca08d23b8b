// The PostgreSQL JDBC driver (pgjdbc) against EbbDB, as DBeaver, Metabase and Spark use it:
// typed prepared statements, a batch INSERT, and DatabaseMetaData. Prints one line per check;
// exits non-zero at the first failure.
//
// java -cp postgresql.jar JdbcCheck.java <port> <user> <password> <table>
import java.sql.*;
import java.util.*;

public class JdbcCheck {
    static void check(boolean ok, String what) {
        if (!ok) {
            System.err.println("FAILED: " + what);
            System.exit(1);
        }
        System.out.println("ok " + what);
    }

    public static void main(String[] a) throws Exception {
        String url = "jdbc:postgresql://127.0.0.1:" + a[0] + "/public";
        Properties p = new Properties();
        p.setProperty("user", a[1]);
        p.setProperty("password", a[2]);
        String table = a[3];
        try (Connection c = DriverManager.getConnection(url, p)) {
            DatabaseMetaData md = c.getMetaData();
            check(md.getDatabaseProductName().equals("PostgreSQL") && md.getDatabaseProductVersion().equals("16.6"),
                    "product " + md.getDatabaseProductVersion());
            try (Statement s = c.createStatement()) {
                s.execute("CREATE TABLE " + table + " (host TAG, usage DOUBLE, n BIGINT, ok BOOLEAN, note TEXT)");
            }
            // A batch INSERT of typed parameters.
            long t0 = 1700000000000L;
            try (PreparedStatement ps = c.prepareStatement(
                    "INSERT INTO " + table + " (time, host, usage, n, ok, note) VALUES (?, ?, ?, ?, ?, ?)")) {
                for (int i = 0; i < 50; i++) {
                    ps.setTimestamp(1, new Timestamp(t0 + i * 1000L));
                    ps.setString(2, "h" + (i % 5));
                    ps.setDouble(3, i * 1.5);
                    ps.setLong(4, i);
                    ps.setBoolean(5, i % 2 == 0);
                    ps.setString(6, "it's " + i);
                    ps.addBatch();
                }
                int[] counts = ps.executeBatch();
                check(counts.length == 50, "batch insert of 50 rows");
            }
            // Typed parameters in a query, run twice (the driver switches to a named statement).
            try (PreparedStatement ps = c.prepareStatement(
                    "SELECT count(*), sum(n), max(usage) FROM " + table + " WHERE host = ? AND n >= ? AND time >= ?")) {
                for (int round = 0; round < 6; round++) {
                    ps.setString(1, "h1");
                    ps.setLong(2, 10);
                    ps.setTimestamp(3, new Timestamp(t0));
                    try (ResultSet rs = ps.executeQuery()) {
                        check(rs.next() && rs.getLong(1) == 8 && rs.getLong(2) == 11 + 16 + 21 + 26 + 31 + 36 + 41 + 46
                                && rs.getDouble(3) == 46 * 1.5, "prepared query round " + round);
                    }
                }
            }
            try (PreparedStatement ps = c.prepareStatement("SELECT note, ok, time FROM " + table + " WHERE n = ?")) {
                ps.setInt(1, 3);
                try (ResultSet rs = ps.executeQuery()) {
                    check(rs.next() && rs.getString(1).equals("it's 3") && !rs.getBoolean(2)
                            && rs.getTimestamp(3).getTime() == t0 + 3000, "text, boolean and timestamp columns");
                }
            }
            // DatabaseMetaData, as a navigator reads it.
            boolean found = false;
            try (ResultSet rs = md.getTables(null, null, "%", new String[] {"TABLE"})) {
                while (rs.next()) {
                    if (rs.getString("TABLE_NAME").equals(table)) {
                        found = rs.getString("TABLE_SCHEM").equals("public");
                    }
                }
            }
            check(found, "getTables lists " + table + " in schema public");
            List<String> cols = new ArrayList<>();
            Map<String, Integer> types = new HashMap<>();
            try (ResultSet rs = md.getColumns(null, "public", table, "%")) {
                while (rs.next()) {
                    cols.add(rs.getString("COLUMN_NAME"));
                    types.put(rs.getString("COLUMN_NAME"), rs.getInt("DATA_TYPE"));
                }
            }
            check(cols.containsAll(List.of("time", "host", "usage", "n", "ok", "note")), "getColumns " + cols);
            check(types.get("usage") == Types.DOUBLE && types.get("n") == Types.BIGINT
                    && types.get("time") == Types.TIMESTAMP && types.get("host") == Types.VARCHAR,
                    "getColumns types " + types);
            List<String> schemas = new ArrayList<>();
            try (ResultSet rs = md.getSchemas()) {
                while (rs.next()) {
                    schemas.add(rs.getString("TABLE_SCHEM"));
                }
            }
            check(schemas.contains("public"), "getSchemas " + schemas);
            try (ResultSet rs = md.getPrimaryKeys(null, "public", table)) {
                int n = 0;
                while (rs.next()) {
                    n++;
                }
                check(n == 0, "getPrimaryKeys");
            }
            int typeRows = 0;
            try (ResultSet rs = md.getTypeInfo()) {
                while (rs.next()) {
                    typeRows++;
                }
            }
            check(typeRows > 10, "getTypeInfo " + typeRows + " types");
            try (ResultSet rs = md.getCatalogs()) {
                check(rs.next(), "getCatalogs");
            }
            try (Statement s = c.createStatement(); ResultSet rs = s.executeQuery("SELECT * FROM " + table + " LIMIT 1")) {
                ResultSetMetaData rm = rs.getMetaData();
                check(rm.getColumnCount() == 6, "result set metadata");
            }
        }
        System.out.println("JDBC CHECKS PASSED");
    }
}
