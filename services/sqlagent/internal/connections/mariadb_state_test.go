package connections_test

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"

	"github.com/agentmesh/agentmesh/services/sqlagent/internal/mariadbtest"
)

// mariaLab is a MariaDB server set up for attacks: the Chinook data, a
// table, a sequence and a MyISAM table to tamper with, objects a database
// owner might have made that hide functions with effects (views, stored
// functions, a procedure), an idle "victim" session to kill, and the one
// directory the server may write files to.
type mariaLab struct {
	srv *mariadbtest.Server
	// dsn logs in as "am", who holds every privilege (the worst read user
	// there is); readerDSN as "reader", who may only SELECT on Chinook.
	dsn, readerDSN string
	observer       *sql.DB
	victim         *sql.Conn
	victimID       int64
}

// mariaLabSetup is the SQL the lab runs after the Chinook script.
var mariaLabSetup = []string{
	`USE Chinook`,
	`CREATE TABLE target (id INT PRIMARY KEY, v VARCHAR(20)) ENGINE=InnoDB`,
	`INSERT INTO target VALUES (1, 'a'), (2, 'b')`,
	`CREATE TABLE notes (id INT PRIMARY KEY, v VARCHAR(20)) ENGINE=MyISAM`,
	`INSERT INTO notes VALUES (1, 'n')`,
	`CREATE SEQUENCE order_seq`,
	// A view and a stored function over a named lock, and what hides them.
	`CREATE VIEW v_lock AS SELECT AlbumId, GET_LOCK('atk', 0) AS took FROM Album`,
	`CREATE VIEW v_nested AS SELECT AlbumId FROM v_lock`,
	`CREATE FUNCTION f_lock() RETURNS INT NO SQL RETURN GET_LOCK('atk', 0)`,
	`CREATE FUNCTION f_sleep(s DOUBLE) RETURNS INT NO SQL RETURN SLEEP(s)`,
	`CREATE FUNCTION f_via() RETURNS INT NO SQL RETURN f_lock()`,
	`CREATE VIEW v_via_function AS SELECT f_lock() AS took`,
	// Bodies of several statements: the client's delimiter changes for
	// them (the setup joins its entries with ";", which ends DELIMITER).
	"DELIMITER //\nCREATE FUNCTION f_write() RETURNS INT MODIFIES SQL DATA BEGIN INSERT INTO notes VALUES (99, 'w'); RETURN 1; END //\nDELIMITER ",
	"DELIMITER //\nCREATE FUNCTION f_write_mislabeled() RETURNS INT READS SQL DATA BEGIN UPDATE notes SET v = 'x'; RETURN 1; END //\nDELIMITER ",
	"CREATE FUNCTION f_seq() RETURNS BIGINT NO SQL RETURN NEXTVAL(order_seq)",
	"DELIMITER //\nCREATE FUNCTION f_var() RETURNS INT NO SQL BEGIN SET @leak = 1; RETURN 1; END //\nDELIMITER ",
	"CREATE PROCEDURE p_wipe() DELETE FROM target",
	// A function body that changes the server for everyone, and one of
	// another database whose unqualified names the server resolves there,
	// not in the session's database.
	"DELIMITER //\nCREATE FUNCTION f_glob() RETURNS INT NO SQL BEGIN SET GLOBAL max_connections = 7; RETURN 1; END //\nDELIMITER ",
	`CREATE VIEW v_glob AS SELECT f_glob() AS x`,
	`CREATE DATABASE other`,
	`CREATE VIEW other.v_hidden AS SELECT GET_LOCK('atk', 0) AS took`,
	`CREATE FUNCTION other.f_cross() RETURNS INT READS SQL DATA RETURN (SELECT took FROM v_hidden LIMIT 1)`,
	`CREATE FUNCTION other.f_discount(x DECIMAL(10,2)) RETURNS INT NO SQL RETURN GET_LOCK('atk', 0)`,
	`CREATE FUNCTION other.f_cross_shadow() RETURNS INT NO SQL RETURN f_discount(1)`,
	// A federated server's password, in mysql.servers.
	`CREATE SERVER remote FOREIGN DATA WRAPPER mysql OPTIONS (HOST '127.0.0.1', USER 'r', PASSWORD 'RemotePw1')`,
	// Harmless objects a legitimate query may use.
	`CREATE FUNCTION f_discount(x DECIMAL(10,2)) RETURNS DECIMAL(10,2) DETERMINISTIC NO SQL RETURN x * 0.9`,
	`CREATE VIEW v_artist_albums AS SELECT ar.Name, COUNT(*) AS albums FROM Artist ar JOIN Album al ON al.ArtistId = ar.ArtistId GROUP BY ar.Name`,
	// A user who may only read Chinook.
	`CREATE USER 'reader'@'%' IDENTIFIED BY ''`,
	`GRANT SELECT, SHOW VIEW ON Chinook.* TO 'reader'@'%'`,
}

// startMariaLab starts the lab's server.
func startMariaLab(t *testing.T) *mariaLab {
	t.Helper()
	chinook := mariadbtest.Chinook(t)
	srv := mariadbtest.Start(t, append([]string{chinook}, mariaLabSetup...)...)
	lab := &mariaLab{srv: srv, dsn: srv.DSN("am", "Chinook"), readerDSN: srv.DSN("reader", "Chinook")}
	var err error
	if lab.observer, err = sql.Open("mysql", srv.DSN("am", "Chinook")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lab.observer.Close() })
	// One connection: the observer's session settings stay put.
	lab.observer.SetMaxOpenConns(1)
	ctx := context.Background()
	if _, err := lab.observer.ExecContext(ctx, "SET SESSION group_concat_max_len = 16777216"); err != nil {
		t.Fatal(err)
	}
	victimDB, err := sql.Open("mysql", srv.DSN("am", "Chinook"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = victimDB.Close() })
	if lab.victim, err = victimDB.Conn(ctx); err != nil {
		t.Fatal(err)
	}
	if err := lab.victim.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&lab.victimID); err != nil {
		t.Fatal(err)
	}
	// Federated tables (FederatedX) over this same server: reading one
	// runs a query on the remote side, over views and functions no check
	// here can see. (The state leaves them out: a checksum would read them.)
	remote := fmt.Sprintf("mysql://am@127.0.0.1:%d/Chinook/", srv.Port)
	for _, st := range []string{
		`INSTALL SONAME 'ha_federatedx'`,
		`CREATE VIEW v_fwrite AS SELECT f_write() AS x`,
		`CREATE TABLE ft_lock (AlbumId INT, took INT) ENGINE=FEDERATED CONNECTION='` + remote + `v_lock'`,
		`CREATE TABLE ft_write (x INT) ENGINE=FEDERATED CONNECTION='` + remote + `v_fwrite'`,
		`CREATE TABLE ft_target (id INT, v VARCHAR(20)) ENGINE=FEDERATED CONNECTION='` + remote + `target'`,
		`CREATE VIEW v_federated AS SELECT AlbumId FROM ft_lock`,
		// Creating ft_write read the remote view once, which wrote.
		`DELETE FROM notes WHERE id = 99`,
	} {
		if _, err := lab.observer.ExecContext(ctx, st); err != nil {
			t.Fatalf("%s: %v", st, err)
		}
	}
	return lab
}

// expand fills the placeholders of an attack: {victim} (the victim's
// connection id), {dir} (the directory the server may write to).
func (lab *mariaLab) expand(sqlText string) string {
	return strings.NewReplacer("{victim}", fmt.Sprint(lab.victimID), "{dir}", lab.srv.Files).Replace(sqlText)
}

// state reads everything the attacks could change: every table's
// checksum, the schema, routines, views, triggers and events, the
// sequence, the accounts and their privileges, chosen global settings,
// the named lock the attacks go for, rows of target another session
// locks, the victim's liveness, and the files in the
// server's file directory.
func (lab *mariaLab) state(t *testing.T) serverState {
	t.Helper()
	ctx := context.Background()
	st := serverState{}
	one := func(aspect, q string) {
		var v sql.NullString
		if err := lab.observer.QueryRowContext(ctx, q).Scan(&v); err != nil {
			t.Fatalf("state %s: %v", aspect, err)
		}
		st[aspect] = v.String
	}
	rows, err := lab.observer.QueryContext(ctx, `SELECT CONCAT('`+"`"+`', TABLE_SCHEMA, '`+"`.`"+`', TABLE_NAME, '`+"`"+`') FROM information_schema.TABLES
		WHERE TABLE_TYPE IN ('BASE TABLE', 'SEQUENCE') AND TABLE_SCHEMA NOT IN ('mysql', 'information_schema', 'performance_schema', 'sys')
			AND ENGINE <> 'FEDERATED' ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	var tables []string
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			t.Fatal(err)
		}
		tables = append(tables, name)
	}
	rows.Close()
	for _, tbl := range tables {
		var name string
		var sum sql.NullString
		if err := lab.observer.QueryRowContext(ctx, "CHECKSUM TABLE "+tbl+" EXTENDED").Scan(&name, &sum); err != nil {
			t.Fatalf("state %s: %v", tbl, err)
		}
		st["table "+tbl] = sum.String
	}
	one("schema", `SELECT MD5(GROUP_CONCAT(CONCAT_WS(':', TABLE_SCHEMA, TABLE_NAME, COLUMN_NAME, COLUMN_TYPE) ORDER BY TABLE_SCHEMA, TABLE_NAME, ORDINAL_POSITION))
		FROM information_schema.COLUMNS WHERE TABLE_SCHEMA NOT IN ('mysql', 'information_schema', 'performance_schema', 'sys')`)
	one("databases", `SELECT GROUP_CONCAT(SCHEMA_NAME ORDER BY 1) FROM information_schema.SCHEMATA`)
	one("routines", `SELECT GROUP_CONCAT(CONCAT(ROUTINE_SCHEMA, '.', ROUTINE_NAME) ORDER BY 1) FROM information_schema.ROUTINES WHERE ROUTINE_SCHEMA <> 'sys'`)
	one("views", `SELECT GROUP_CONCAT(CONCAT(TABLE_SCHEMA, '.', TABLE_NAME) ORDER BY 1) FROM information_schema.VIEWS WHERE TABLE_SCHEMA <> 'sys'`)
	one("triggers and events", `SELECT CONCAT((SELECT COUNT(*) FROM information_schema.TRIGGERS), '/', (SELECT COUNT(*) FROM information_schema.EVENTS))`)
	one("accounts", `SELECT MD5(GROUP_CONCAT(CONCAT_WS(':', GRANTEE, PRIVILEGE_TYPE, IS_GRANTABLE) ORDER BY 1)) FROM information_schema.USER_PRIVILEGES`)
	one("grants", `SELECT MD5(CONCAT((SELECT COALESCE(GROUP_CONCAT(CONCAT_WS(':', GRANTEE, TABLE_SCHEMA, PRIVILEGE_TYPE) ORDER BY 1), '') FROM information_schema.SCHEMA_PRIVILEGES),
		(SELECT COALESCE(GROUP_CONCAT(CONCAT_WS(':', GRANTEE, TABLE_NAME, PRIVILEGE_TYPE) ORDER BY 1), '') FROM information_schema.TABLE_PRIVILEGES)))`)
	one("settings", `SELECT CONCAT_WS('|', @@GLOBAL.max_connections, @@GLOBAL.general_log, @@GLOBAL.sql_mode, @@GLOBAL.read_only,
		@@GLOBAL.event_scheduler, @@GLOBAL.max_statement_time, @@GLOBAL.log_bin_trust_function_creators, @@GLOBAL.wait_timeout)`)
	one("named lock", `SELECT COALESCE(IS_USED_LOCK('atk'), 'free')`)
	// Row locks on target, by a probe: rows that another session locks
	// are skipped. (information_schema.INNODB_TRX is a cache refreshed at
	// most every 0.1 s, too slow for a check after every attack.)
	tx, err := lab.observer.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var free, all int
	err = tx.QueryRowContext(ctx, `SELECT (SELECT COUNT(*) FROM (SELECT id FROM target FOR UPDATE SKIP LOCKED) f), (SELECT COUNT(*) FROM target)`).Scan(&free, &all)
	_ = tx.Rollback()
	if err != nil {
		t.Fatalf("state row locks: %v", err)
	}
	st["row locks on target"] = fmt.Sprint(all - free)
	var alive int
	if err := lab.victim.QueryRowContext(ctx, "SELECT 1").Scan(&alive); err != nil {
		st["victim"] = "dead: " + err.Error()
	} else {
		st["victim"] = "alive"
	}
	st["file dir"] = listDir(t, lab.srv.Files)
	return st
}
