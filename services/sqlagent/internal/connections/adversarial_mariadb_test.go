package connections_test

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/services/sqlagent/internal/connections"
	"github.com/agentmesh/agentmesh/services/sqlagent/internal/safety"
)

// mariaAttacks are statements a read job must not let change anything.
// They come from the MariaDB documentation: "Miscellaneous Functions"
// (GET_LOCK, RELEASE_LOCK, RELEASE_ALL_LOCKS, SLEEP, BENCHMARK),
// "String Functions" (LOAD_FILE), "SELECT INTO OUTFILE/DUMPFILE",
// "SELECT ... FOR UPDATE" and "LOCK IN SHARE MODE", "HANDLER",
// "User-Defined Variables", "SET", "Sequences" (NEXT VALUE FOR, NEXTVAL,
// SETVAL), "Comment Syntax" (executable and version-gated comments, "-- "
// and #), "String Literals" (backslash escapes, introducers, X'..' and N'..'),
// "Identifier Names" (backticks), "KILL", "EXECUTE IMMEDIATE", "ANALYZE
// statement", "DELETE ... RETURNING", stored functions, procedures and
// views, and every statement that is not a plain query.
var mariaAttacks = []attack{
	// Functions with effects beyond the query.
	{"get_lock", "SELECT GET_LOCK('atk', 0)"},
	{"get_lock backticked", "SELECT `GET_LOCK`('atk', 0)"},
	{"get_lock lower case", "SELECT get_lock('atk', 0)"},
	{"get_lock with a space", "SELECT GET_LOCK ('atk', 0)"},
	{"get_lock after a comment", "SELECT GET_LOCK/**/('atk', 0)"},
	{"get_lock in WHERE", "SELECT AlbumId FROM Album WHERE GET_LOCK('atk', 0) LIMIT 1"},
	{"get_lock in ORDER BY", "SELECT AlbumId FROM Album ORDER BY GET_LOCK('atk', 0) LIMIT 1"},
	{"get_lock in a subquery", "SELECT (SELECT GET_LOCK('atk', 0))"},
	{"get_lock in a derived table", "SELECT * FROM (SELECT GET_LOCK('atk', 0) AS x) d"},
	{"get_lock in a CTE", "WITH a AS (SELECT GET_LOCK('atk', 0) AS x) SELECT * FROM a"},
	{"get_lock in a UNION", "SELECT 1 UNION SELECT GET_LOCK('atk', 0)"},
	{"get_lock in VALUES", "VALUES (GET_LOCK('atk', 0))"},
	{"get_lock in IF", "SELECT IF(1, GET_LOCK('atk', 0), 0)"},
	{"get_lock in a window", "SELECT SUM(GET_LOCK('atk', 0)) OVER () FROM Album LIMIT 1"},
	{"get_lock in JSON_OBJECT", "SELECT JSON_OBJECT('a', GET_LOCK('atk', 0))"},
	{"release_lock", "SELECT RELEASE_LOCK('atk')"},
	{"release_all_locks", "SELECT RELEASE_ALL_LOCKS()"},
	{"sleep", "SELECT SLEEP(0.01)"},
	{"benchmark", "SELECT BENCHMARK(1000, MD5('x'))"},
	{"load_file", "SELECT LOAD_FILE('/etc/hostname')"},
	{"master_pos_wait", "SELECT MASTER_POS_WAIT('log', 4, 0.01)"},
	{"master_gtid_wait", "SELECT MASTER_GTID_WAIT('0-1-1', 0.01)"},
	{"sequence next value", "SELECT NEXT VALUE FOR order_seq"},
	{"sequence nextval", "SELECT NEXTVAL(order_seq)"},
	{"sequence setval", "SELECT SETVAL(order_seq, 100)"},
	{"sequence previous value", "SELECT PREVIOUS VALUE FOR order_seq"},
	// Files.
	{"into outfile", "SELECT * FROM target INTO OUTFILE '{dir}/out.txt'"},
	{"into dumpfile", "SELECT 'x' INTO DUMPFILE '{dir}/dump.bin'"},
	{"into outfile before FROM", "SELECT * INTO OUTFILE '{dir}/out2.txt' FROM target"},
	{"into outfile with options", "SELECT * FROM target INTO OUTFILE '{dir}/out3.csv' FIELDS TERMINATED BY ',' LINES TERMINATED BY '\\n'"},
	{"into outfile after a union", "SELECT 1 UNION SELECT 2 INTO OUTFILE '{dir}/out4.txt'"},
	{"into a variable", "SELECT 1 INTO @x"},
	{"load data", "LOAD DATA INFILE '{dir}/keep.txt' INTO TABLE target"},
	{"load data local", "LOAD DATA LOCAL INFILE '/etc/hostname' INTO TABLE notes"},
	{"load xml", "LOAD XML INFILE '{dir}/keep.xml' INTO TABLE target"},
	// Locks.
	{"for update", "SELECT * FROM target FOR UPDATE"},
	{"for update nowait", "SELECT * FROM target FOR UPDATE NOWAIT"},
	{"for update skip locked", "SELECT * FROM target FOR UPDATE SKIP LOCKED"},
	{"lock in share mode", "SELECT * FROM target LOCK IN SHARE MODE"},
	{"for update in a subquery", "SELECT * FROM (SELECT * FROM target FOR UPDATE) s"},
	{"lock tables", "LOCK TABLES target WRITE"},
	{"handler open", "HANDLER target OPEN"},
	{"handler read", "HANDLER target READ FIRST"},
	// Variables and settings.
	{"variable assignment", "SELECT @x := 1"},
	{"variable assignment in WHERE", "SELECT AlbumId FROM Album WHERE (@n := AlbumId) > 0 LIMIT 1"},
	{"set variable", "SET @x = 1"},
	{"set global", "SET GLOBAL max_connections = 7"},
	{"set session", "SET SESSION sql_mode = 'ANSI_QUOTES'"},
	{"set statement", "SET STATEMENT max_statement_time = 1 FOR DELETE FROM target"},
	{"system variable", "SELECT @@GLOBAL.secure_file_priv"},
	// Comment and literal forms that hide code.
	{"executable comment", "SELECT 1 /*! , GET_LOCK('atk', 0) */"},
	{"versioned executable comment", "SELECT 1 /*!50000 , GET_LOCK('atk', 0) */"},
	{"mariadb executable comment", "SELECT 1 /*M!100100 , GET_LOCK('atk', 0) */"},
	{"executable comment with a statement", "SELECT 1 /*! ; DELETE FROM target */"},
	{"executable comment into outfile", "SELECT 1 /*! INTO OUTFILE '{dir}/exec.txt' */"},
	{"version gate with a string across its end", "SELECT 1 /*!999999 'x */, GET_LOCK('atk', 0), '*/"},
	{"version gate hiding a call's parenthesis", "SELECT GET_LOCK /*!999999 x */ ('atk', 0)"},
	{"executable comment with seven version digits", "SELECT 1 /*!1000000 , GET_LOCK('atk', 0) */"},
	{"hash comment then statement", "SELECT 1 # x\n; DELETE FROM target"},
	{"dash comment then statement", "SELECT 1 -- x\n; DELETE FROM target"},
	{"double dash is minus", "SELECT 1 --1\n, GET_LOCK('atk', 0)"},
	{"backslash string", "SELECT 'a\\', GET_LOCK('atk', 0) -- '"},
	{"backslash before a quote", "SELECT 'a\\'', GET_LOCK('atk', 0) -- '"},
	{"double-quoted string", `SELECT "a", GET_LOCK('atk', 0)`},
	{"introducer", "SELECT _utf8mb4'x', GET_LOCK('atk', 0)"},
	{"hex literal", "SELECT X'41', GET_LOCK('atk', 0)"},
	{"national string", "SELECT N'x', GET_LOCK('atk', 0)"},
	// Objects that hide functions with effects.
	{"view over get_lock", "SELECT * FROM v_lock"},
	// Federated tables: the remote server runs what their definition names.
	{"federated table over a view that locks", "SELECT * FROM ft_lock"},
	{"federated table over a view that writes", "SELECT * FROM ft_write"},
	{"federated table", "SELECT id FROM ft_target"},
	{"view over a federated table", "SELECT * FROM v_federated"},
	{"federated table in a subquery", "SELECT COUNT(*) FROM Album WHERE AlbumId IN (SELECT id FROM ft_target)"},
	{"view qualified", "SELECT * FROM Chinook.v_lock"},
	{"view backticked", "SELECT * FROM `v_lock`"},
	{"view over that view", "SELECT * FROM v_nested"},
	{"view over a stored function", "SELECT * FROM v_via_function"},
	{"view in a subquery", "SELECT (SELECT COUNT(*) FROM v_lock)"},
	{"view in a join", "SELECT a.Title FROM Album a JOIN v_lock v ON v.AlbumId = a.AlbumId LIMIT 1"},
	{"stored function over get_lock", "SELECT f_lock()"},
	{"stored function qualified", "SELECT Chinook.f_lock()"},
	{"stored function backticked", "SELECT `Chinook`.`f_lock`()"},
	{"stored function over sleep", "SELECT f_sleep(0.01)"},
	{"stored function over a stored function", "SELECT f_via()"},
	{"stored function that writes", "SELECT f_write()"},
	{"stored function that writes, labelled READS SQL DATA", "SELECT f_write_mislabeled()"},
	{"stored function advancing a sequence", "SELECT f_seq()"},
	{"stored function setting a variable", "SELECT f_var()"},
	{"unknown function", "SELECT no_such_function(1)"},
	// Statements that are not plain queries.
	{"delete", "DELETE FROM target"},
	{"delete returning", "DELETE FROM target RETURNING id"},
	{"insert returning", "INSERT INTO target VALUES (9, 'x') RETURNING id"},
	{"insert select", "INSERT INTO target SELECT 10, 'y'"},
	{"replace", "REPLACE INTO target VALUES (1, 'z')"},
	{"update", "UPDATE target SET v = 'x'"},
	{"multi-table delete", "DELETE t FROM target t JOIN notes n ON n.id = t.id"},
	{"update a MyISAM table", "UPDATE notes SET v = 'm'"},
	{"truncate", "TRUNCATE TABLE target"},
	{"drop", "DROP TABLE target"},
	{"create table select", "CREATE TABLE evil AS SELECT 1 AS x"},
	{"create temporary table", "CREATE TEMPORARY TABLE tmp AS SELECT 1 AS x"},
	{"alter", "ALTER TABLE target ADD COLUMN z INT"},
	{"rename", "RENAME TABLE target TO moved"},
	{"create function soname", "CREATE FUNCTION evil RETURNS INTEGER SONAME 'evil.so'"},
	{"install soname", "INSTALL SONAME 'ha_blackhole'"},
	{"grant", "GRANT ALL ON *.* TO 'reader'@'%'"},
	{"create user", "CREATE USER 'evil'@'%'"},
	{"call", "CALL p_wipe()"},
	{"do", "DO GET_LOCK('atk', 0)"},
	{"execute immediate", "EXECUTE IMMEDIATE 'DELETE FROM target'"},
	{"prepare", "PREPARE s FROM 'DELETE FROM target'"},
	{"analyze statement runs it", "ANALYZE DELETE FROM target"},
	{"analyze table", "ANALYZE TABLE target"},
	{"optimize table", "OPTIMIZE TABLE target"},
	{"repair table", "REPAIR TABLE notes"},
	{"flush", "FLUSH TABLES"},
	{"kill", "KILL {victim}"},
	{"kill query", "KILL QUERY {victim}"},
	{"shutdown", "SHUTDOWN"},
	{"begin", "BEGIN"},
	{"commit then delete", "COMMIT; DELETE FROM target"},
	{"two statements", "SELECT 1; DELETE FROM target"},
	{"xa start", "XA START 'x'"},
	{"procedure analyse", "SELECT * FROM target PROCEDURE ANALYSE()"},
	{"show", "SHOW GRANTS"},
	{"explain", "EXPLAIN SELECT 1"},
	{"create event", "CREATE EVENT e ON SCHEDULE EVERY 1 SECOND DO DELETE FROM target"},
	{"create trigger", "CREATE TRIGGER tr BEFORE INSERT ON target FOR EACH ROW SET NEW.v = 'x'"},
	// Single calls that do not look at the statement timeout's kill.
	{"encrypt with many rounds", "SELECT LENGTH(ENCRYPT('x', '$6$rounds=1000$salt'))"},
	{"extractvalue xpath", "SELECT ExtractValue('<r><a>x</a></r>', 'count(//a[count(//a)>0])')"},
	{"updatexml xpath", "SELECT UpdateXML('<r><a>x</a></r>', '//a', '<b/>')"},
	// A function body with SET GLOBAL, called and through a view.
	{"stored function sets a global", "SELECT f_glob()"},
	{"view over a function that sets a global", "SELECT * FROM v_glob"},
	// Another database's functions, whose bodies resolve names there.
	{"another database's function over a view of get_lock", "SELECT other.f_cross()"},
	{"another database's function calling its own same-named function", "SELECT other.f_cross_shadow()"},
	// The mysql schema: password hashes, other servers' passwords.
	{"password hashes", "SELECT User, Host, authentication_string FROM mysql.user"},
	{"password hashes, global_priv", "SELECT User, Host, Priv FROM mysql.global_priv"},
	{"federated server password", "SELECT Server_name, Password FROM mysql.servers"},
}

// mariaLegitimate are analyst queries on Chinook that must run.
var mariaLegitimate = []attack{
	{"top artists", "SELECT ar.Name, COUNT(*) AS albums FROM Artist ar JOIN Album al ON al.ArtistId = ar.ArtistId GROUP BY ar.Name ORDER BY albums DESC LIMIT 10"},
	{"two columns of one name", "SELECT ar.Name, g.Name FROM Track t JOIN Album al ON al.AlbumId = t.AlbumId JOIN Artist ar ON ar.ArtistId = al.ArtistId JOIN Genre g ON g.GenreId = t.GenreId LIMIT 5"},
	{"cte", "WITH sales AS (SELECT CustomerId, SUM(Total) AS spent FROM Invoice GROUP BY CustomerId) SELECT c.FirstName, c.LastName, s.spent FROM sales s JOIN Customer c ON c.CustomerId = s.CustomerId ORDER BY s.spent DESC LIMIT 5"},
	{"recursive cte", "WITH RECURSIVE chain AS (SELECT EmployeeId, ReportsTo, 1 AS depth FROM Employee WHERE ReportsTo IS NULL UNION ALL SELECT e.EmployeeId, e.ReportsTo, c.depth + 1 FROM Employee e JOIN chain c ON e.ReportsTo = c.EmployeeId) SELECT * FROM chain"},
	{"row_number", "SELECT * FROM (SELECT GenreId, Name, ROW_NUMBER() OVER (PARTITION BY GenreId ORDER BY Milliseconds DESC) AS rn FROM Track) t WHERE rn = 1"},
	{"rank", "SELECT BillingCountry, Total, RANK() OVER (PARTITION BY BillingCountry ORDER BY Total DESC) AS r FROM Invoice LIMIT 20"},
	{"dense_rank and ntile", "SELECT TrackId, DENSE_RANK() OVER (ORDER BY UnitPrice), NTILE(4) OVER (ORDER BY TrackId) FROM Track LIMIT 10"},
	{"running total", "SELECT InvoiceDate, Total, SUM(Total) OVER (ORDER BY InvoiceDate, InvoiceId) AS running FROM Invoice LIMIT 20"},
	{"moving average", "SELECT InvoiceId, AVG(Total) OVER (ORDER BY InvoiceId ROWS BETWEEN 2 PRECEDING AND CURRENT ROW) FROM Invoice LIMIT 10"},
	{"lag lead", "SELECT InvoiceId, Total - LAG(Total) OVER (ORDER BY InvoiceId), LEAD(Total) OVER (ORDER BY InvoiceId) FROM Invoice LIMIT 10"},
	{"first_value", "SELECT DISTINCT GenreId, FIRST_VALUE(Name) OVER (PARTITION BY GenreId ORDER BY Name) FROM Track"},
	{"median window", "SELECT DISTINCT BillingCountry, MEDIAN(Total) OVER (PARTITION BY BillingCountry) FROM Invoice"},
	{"percentile_cont", "SELECT DISTINCT PERCENTILE_CONT(0.5) WITHIN GROUP (ORDER BY Total) OVER () FROM Invoice"},
	{"case", "SELECT Name, CASE WHEN Milliseconds > 300000 THEN 'long' WHEN Milliseconds > 180000 THEN 'medium' ELSE 'short' END AS length FROM Track LIMIT 10"},
	{"if and ifnull", "SELECT IF(Company IS NULL, 'private', Company), IFNULL(State, '-'), COALESCE(Fax, Phone) FROM Customer LIMIT 5"},
	{"with rollup", "SELECT BillingCountry, BillingCity, SUM(Total) FROM Invoice GROUP BY BillingCountry, BillingCity WITH ROLLUP LIMIT 20"},
	{"having", "SELECT CustomerId, COUNT(*) AS n FROM Invoice GROUP BY CustomerId HAVING n > 6 ORDER BY n DESC"},
	{"group_concat", "SELECT AlbumId, GROUP_CONCAT(Name ORDER BY TrackId SEPARATOR ', ') FROM Track GROUP BY AlbumId LIMIT 3"},
	{"count distinct", "SELECT COUNT(DISTINCT BillingCountry), COUNT(DISTINCT CustomerId) FROM Invoice"},
	{"json object and array", "SELECT JSON_OBJECT('artist', Name, 'id', ArtistId), JSON_ARRAY(ArtistId, Name) FROM Artist LIMIT 5"},
	{"json arrayagg", "SELECT ar.Name, JSON_ARRAYAGG(al.Title) FROM Artist ar JOIN Album al ON al.ArtistId = ar.ArtistId GROUP BY ar.Name LIMIT 5"},
	{"json extract and value", `SELECT JSON_EXTRACT('{"a": [1, 2, 3]}', '$.a[1]'), JSON_VALUE('{"b": "x"}', '$.b')`},
	{"json_table", `SELECT j.n FROM JSON_TABLE('[{"n": 1}, {"n": 2}]', '$[*]' COLUMNS (n INT PATH '$.n')) AS j`},
	{"date functions", "SELECT DATE_FORMAT(InvoiceDate, '%Y-%m') AS ym, YEAR(InvoiceDate), MONTH(InvoiceDate), DAYNAME(InvoiceDate), QUARTER(InvoiceDate) FROM Invoice LIMIT 5"},
	{"date arithmetic", "SELECT InvoiceId, DATE_ADD(InvoiceDate, INTERVAL 30 DAY) AS due, DATEDIFF(InvoiceDate, '2009-01-01'), TIMESTAMPDIFF(MONTH, '2009-01-01', InvoiceDate) FROM Invoice LIMIT 5"},
	{"now and unix time", "SELECT NOW() > InvoiceDate, CURDATE(), UNIX_TIMESTAMP(InvoiceDate), FROM_UNIXTIME(0) FROM Invoice LIMIT 3"},
	{"monthly totals", "SELECT DATE_FORMAT(InvoiceDate, '%Y-%m-01') AS month, ROUND(SUM(Total), 2) FROM Invoice GROUP BY month ORDER BY month LIMIT 12"},
	{"string functions", "SELECT UPPER(Name), LOWER(Name), LENGTH(Name), CHAR_LENGTH(Name), LEFT(Name, 3), RIGHT(Name, 2), SUBSTRING(Name, 2, 3), REVERSE(Name) FROM Artist LIMIT 5"},
	{"concat and replace", "SELECT CONCAT(FirstName, ' ', LastName), CONCAT_WS(', ', City, Country), REPLACE(Phone, ' ', ''), LPAD(CustomerId, 5, '0'), TRIM(' x ') FROM Customer LIMIT 5"},
	{"instr locate substring_index", "SELECT INSTR(Email, '@'), LOCATE('.', Email), SUBSTRING_INDEX(Email, '@', -1) FROM Customer LIMIT 5"},
	{"regexp and like", "SELECT Name FROM Track WHERE Name REGEXP '^Love' OR Name LIKE 'A%' LIMIT 10"},
	{"regexp_replace", "SELECT REGEXP_REPLACE(Name, '[aeiou]', '') FROM Artist LIMIT 3"},
	{"field elt find_in_set", "SELECT FIELD('b', 'a', 'b'), ELT(2, 'a', 'b'), FIND_IN_SET('b', 'a,b,c')"},
	{"greatest least mod div", "SELECT GREATEST(1, 2, 3), LEAST(4, 5), MOD(TrackId, 7), TrackId DIV 100, TrackId % 3 FROM Track LIMIT 5"},
	{"numeric rounding", "SELECT ROUND(AVG(Total), 2), ROUND(STDDEV(Total), 3), VARIANCE(Total), MAX(Total), MIN(Total), FORMAT(SUM(Total), 2) FROM Invoice"},
	{"casts", "SELECT CAST(Total AS CHAR), CAST('42' AS SIGNED), CAST(Total AS DECIMAL(10,1)), CONVERT(InvoiceDate, DATE) FROM Invoice LIMIT 3"},
	{"hashes and hex", "SELECT MD5(Name), SHA2(Name, 256), HEX(Name), TO_BASE64(Name) FROM Genre LIMIT 3"},
	{"null-safe equality", "SELECT COUNT(*) FROM Customer WHERE State <=> NULL"},
	{"between and in", "SELECT COUNT(*) FROM Track WHERE Milliseconds BETWEEN 200000 AND 300000 AND GenreId IN (1, 2, 3)"},
	{"exists", "SELECT Name FROM Artist ar WHERE EXISTS (SELECT 1 FROM Album al WHERE al.ArtistId = ar.ArtistId) LIMIT 5"},
	{"not in", "SELECT Name FROM Artist WHERE ArtistId NOT IN (SELECT ArtistId FROM Album) LIMIT 5"},
	{"union", "SELECT Country FROM Customer UNION SELECT Country FROM Employee ORDER BY 1"},
	{"intersect and except", "(SELECT BillingCountry FROM Invoice EXCEPT SELECT Country FROM Employee) UNION (SELECT 'USA' INTERSECT SELECT Country FROM Customer)"},
	{"distinct and offset", "SELECT DISTINCT Composer FROM Track WHERE Composer IS NOT NULL ORDER BY Composer LIMIT 5 OFFSET 10"},
	{"values", "VALUES (1, 'one'), (2, 'two')"},
	{"information_schema", "SELECT TABLE_NAME, COUNT(*) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = 'Chinook' GROUP BY TABLE_NAME ORDER BY 1"},
	{"backticks and a keyword column", "SELECT `Name` AS `delete`, 'DROP TABLE x; SLEEP(1)' AS note FROM `Genre` LIMIT 2"},
	{"comments of every form", "SELECT 1 -- a comment\n, 2 # another\n, 3 /* a third */"},
	{"double minus", "SELECT 5 --1"},
	{"harmless executable comment", "SELECT Name /*!50000 , GenreId */ FROM Genre LIMIT 1"},
	{"literals", "SELECT _utf8mb4'x', X'41', N'text', 'it''s', 'a\\nb', 0x42, b'101'"},
	{"stored function without SQL", "SELECT Name, f_discount(UnitPrice) FROM Track LIMIT 3"},
	{"view", "SELECT * FROM v_artist_albums ORDER BY albums DESC LIMIT 3"},
	{"rand and uuid", "SELECT RAND() >= 0, UUID() IS NOT NULL"},
	{"is_free_lock reads", "SELECT IS_FREE_LOCK('atk')"},
	{"recursive CTE with a column list", "WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c WHERE n < 5) SELECT n FROM c"},
}

// TestMariaDBAdversarial runs every attack twice against one MariaDB
// server (the read user holding every privilege, the worst case): through
// the whole chain (the token check, then the registry's server-side check,
// read-only transaction and discarded session), and straight into the
// registry (its locks alone). Before and after each run it reads the
// state an attack could change; any difference fails the test. Then every
// analyst query must run through the whole chain, and the calibration
// shows the state check sees what the attacks would have done.
func TestMariaDBAdversarial(t *testing.T) {
	t.Parallel()
	lab := startMariaLab(t)
	reg := openRegistry(t, connections.Spec{Name: "wh", Dialect: connections.MySQL, DSN: lab.dsn})
	ctx := context.Background()
	attacker := lab.openAttacker(t)
	s := attackSuite{
		dialect: safety.MySQL,
		expand:  lab.expand,
		query:   func(q string) (*connections.Result, error) { return reg.Query(ctx, "wh", q, 100, 5*time.Second) },
		state:   func() serverState { return lab.state(t) },
	}
	s.runAll(t, "MariaDB", mariaAttacks, mariaLegitimate, mariaCalibration, func(q string) error {
		// "; " separates statements run one after the other.
		for _, st := range strings.Split(q, "; ") {
			if _, err := attacker.ExecContext(ctx, st); err != nil {
				return err
			}
		}
		return nil
	})
}

// mariaCalibration are attacks run with no guard at all, on a session of
// the all-privileged user, each with an effect the state check must see.
// Each leaves its effect in place, so they run last.
var mariaCalibration = []string{
	"SELECT GET_LOCK('atk', 0)",
	"SELECT 1 INTO OUTFILE '{dir}/calibration.txt'",
	"SELECT NEXTVAL(order_seq)",
	"SELECT f_write()",
	"DELETE FROM target WHERE id = 1",
	"SET GLOBAL max_connections = 77",
	"CREATE TABLE evil AS SELECT 1 AS x",
	"CREATE FUNCTION evil() RETURNS INT NO SQL RETURN 1",
	"GRANT INSERT ON Chinook.* TO 'reader'@'%'",
	"START TRANSACTION; SELECT * FROM target FOR UPDATE",
	"KILL {victim}",
}

// openAttacker opens an unguarded session of the all-privileged user for
// the calibration.
func (lab *mariaLab) openAttacker(t *testing.T) *sql.Conn {
	t.Helper()
	db, err := sql.Open("mysql", lab.dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	conn, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(context.Background(), "SELECT 1"); err != nil {
		t.Fatal(err)
	}
	return conn
}

// TestMariaDBClientCharsetIsPinned: under GBK the last byte of 中 and a
// backslash read as one character, so the server ends a string where the
// token check does not, and what the check took for a string ran as code
// (LOAD_FILE returned a server file to a DSN with charset=gbk). A read
// session's client character set is utf8mb4 whatever the DSN says: the
// same text is a string.
func TestMariaDBClientCharsetIsPinned(t *testing.T) {
	t.Parallel()
	lab := startMariaLab(t)
	secret := "server-side secret file"
	if err := os.WriteFile(filepath.Join(lab.srv.Files, "secret.txt"), []byte(secret+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sep := "?"
	if strings.Contains(lab.dsn, "?") {
		sep = "&"
	}
	reg := openRegistry(t, connections.Spec{Name: "wh", Dialect: connections.MySQL, DSN: lab.dsn + sep + "charset=gbk"})
	q := lab.expand("SELECT '\u4e2d\\\\' ', LOAD_FILE('{dir}/secret.txt') AS f -- '\n")
	checked, err := safety.Check(q, safety.MySQL)
	if err != nil {
		t.Fatalf("the token check refused the text (it reads it as strings): %v", err)
	}
	res, err := reg.Query(context.Background(), "wh", checked, 10, 5*time.Second)
	if err != nil {
		return // refused or failed: nothing read
	}
	for _, row := range res.Rows {
		for _, v := range row {
			if s, ok := v.(string); ok && strings.Contains(s, secret) {
				t.Fatalf("a GBK connection read a server file through a string the check saw: %v", res.Rows)
			}
		}
	}
}

// TestMariaDBSchemaLeavesOutFederatedTables: the schema the model writes
// SQL from lists no federated table, since a read of one is refused.
func TestMariaDBSchemaLeavesOutFederatedTables(t *testing.T) {
	t.Parallel()
	lab := startMariaLab(t)
	reg := openRegistry(t, connections.Spec{Name: "wh", Dialect: connections.MySQL, DSN: lab.dsn})
	checkSchemaNames(t, reg, "wh", []string{"ft_lock", "ft_write", "ft_target"}, []string{"v_federated", "Album", "notes"})
}
