// The Arrow Flight SQL JDBC driver (Maven org.apache.arrow:flight-sql-jdbc-driver) against
// EbbDB's Flight SQL port, as DBeaver and other JDBC tools use it: a login, a query, a
// prepared statement with ? parameters run twice, and DatabaseMetaData. Exits non-zero at the
// first failure.
//
//   java --add-opens=java.base/java.nio=ALL-UNNAMED -cp flight-sql-jdbc-driver.jar \
//       FlightJdbcCheck.java <port> <user> <password> <table> <tag> <value> <float field>
import java.sql.*;

public class FlightJdbcCheck {
    static void check(boolean ok, String what) {
        if (!ok) {
            System.out.println("FAILED: " + what);
            System.exit(1);
        }
        System.out.println("ok " + what);
    }

    public static void main(String[] args) throws Exception {
        String url = "jdbc:arrow-flight-sql://127.0.0.1:" + args[0] + "/?useEncryption=false";
        String table = args[3], tag = args[4], value = args[5], field = args[6];
        try (Connection c = DriverManager.getConnection(url, args[1], args[2])) {
            try (Statement s = c.createStatement();
                 ResultSet r = s.executeQuery("SELECT count(*) AS n FROM " + table)) {
                check(r.next(), "a row");
                long n = r.getLong("n");
                check(n > 0, "a count of " + n);
            }
            try (PreparedStatement p = c.prepareStatement(
                    "SELECT count(*) AS n FROM " + table + " WHERE " + tag + " = ? AND " + field + " >= ?")) {
                p.setString(1, value);
                p.setDouble(2, -1e300);
                try (ResultSet r = p.executeQuery()) {
                    check(r.next() && r.getLong("n") > 0, "a prepared statement with ? parameters");
                }
                p.setString(1, "nowhere");
                try (ResultSet r = p.executeQuery()) {
                    check(r.next() && r.getLong("n") == 0, "the same statement, other values");
                }
            }
            DatabaseMetaData md = c.getMetaData();
            boolean found = false;
            try (ResultSet t = md.getTables(null, null, "%", null)) {
                while (t.next()) {
                    found |= table.equals(t.getString("TABLE_NAME"));
                }
            }
            check(found, "getTables lists " + table);
        }
        System.out.println("FLIGHT JDBC CHECKS PASSED");
    }
}
