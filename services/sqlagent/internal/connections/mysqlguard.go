package connections

import (
	"cmp"
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"strings"

	"github.com/go-sql-driver/mysql"

	"github.com/agentmesh/agentmesh/services/sqlagent/internal/safety"
)

// The MariaDB/MySQL locks: the server's parser, its function registry and
// its catalog, then a read-only transaction on a session that is thrown
// away.
//
// A READ ONLY transaction refuses every table write (MariaDB refuses even
// temporary tables), but not GET_LOCK, SLEEP, SELECT ... INTO OUTFILE, or a
// view or stored function that calls them. So before a statement runs:
//
//  1. The server prepares "SELECT 1 FROM DUAL WHERE EXISTS (<stmt>)"
//     (COM_STMT_PREPARE: parsed and resolved, nothing executed). A subquery
//     holds nothing but a query: no second statement, no INTO, no
//     PROCEDURE, no DELETE ... RETURNING, no SHOW or administration
//     statement; and the server lexes the text itself, executable comments
//     included. A statement with bind parameters is refused.
//  2. Every name the statement mentions is looked up (safety.Refs reads
//     them, in every reading of its executable comments). A call must be
//     a built-in the server lists (information_schema.KEYWORDS and
//     SQL_FUNCTIONS, MariaDB 10.6 and later) and not one with effects
//     beyond the query (mysqlDenied), or a stored function of the
//     database that is not declared MODIFIES SQL DATA and whose body
//     passes the same check (its names resolved in the function's own
//     database, as the server resolves them; SET GLOBAL refused); a
//     loadable function (CREATE FUNCTION ... SONAME) is neither and is
//     refused. The query may not name a table of the mysql schema
//     (password hashes, other servers' passwords). A name that is a view has its
//     definition checked the same way, so a view over GET_LOCK is refused
//     like the call. Names are matched without case and whether or not
//     they are used as tables, so a column named like a dangerous view
//     refuses the query: the check errs on the side of refusing. A table
//     whose rows come from outside the database (remoteEngines:
//     FEDERATED, CONNECT, SPIDER, SPHINX) is refused, named or behind a
//     view.
//  3. The statement runs in START TRANSACTION READ ONLY, with a statement
//     timeout (max_statement_time on MariaDB, max_execution_time on MySQL)
//     and sql_select_limit as the row cap, in a session whose sql_mode is
//     pinned (no ANSI_QUOTES, no NO_BACKSLASH_ESCAPES: the server reads
//     quotes as package safety does) and whose client character set is
//     utf8mb4 (under GBK, Big5 or SJIS a multibyte character swallows a
//     backslash, so the server would end a string elsewhere). The transaction is rolled back and
//     the connection closed, not pooled: user locks, variables, temporary
//     tables and prepared statements end with the session.
//
// What it cannot see: a stored function's body that its owner hid (the
// read user lacks the privilege to read it: refused, not guessed), and
// what a built-in does beyond its name. MySQL (not MariaDB) does not list
// its native functions; there an unqualified call that is not a stored
// function is taken for a built-in, and AuditReadRoles says so. The
// least-privilege read user is the lock for the rest.

// mysqlDenied are built-in MariaDB/MySQL functions whose effects outlive
// the query or reach outside it; lock 2 keeps its own list (see
// stableRefused for why).
var mysqlDenied = map[string]string{
	"get_lock":                   "it takes a named lock",
	"release_lock":               "it releases a named lock",
	"release_all_locks":          "it releases named locks",
	"sleep":                      "it sleeps",
	"benchmark":                  "it burns CPU on purpose",
	"load_file":                  "it reads files on the database server",
	"master_pos_wait":            "it waits on replication",
	"source_pos_wait":            "it waits on replication",
	"master_gtid_wait":           "it waits on replication",
	"wsrep_sync_wait_upto_gtid":  "it waits on replication",
	"wait_for_executed_gtid_set": "it waits on replication",
	"binlog_gtid_pos":            "it reads the binary log files",
	"nextval":                    "it advances a sequence",
	"setval":                     "it changes a sequence",
	"lastval":                    "it reads session state of a sequence",
	"encrypt":                    "its crypt(3) rounds run on after the statement timeout",
	"extractvalue":               "its XPath evaluation runs on after the statement timeout",
	"updatexml":                  "its XPath evaluation runs on after the statement timeout",
}

// mysqlSecretSchema is the schema whose tables a query may not name: it
// holds password hashes (user, global_priv), other servers' passwords
// (servers) and routine bodies (proc). Only a privileged read user can
// read it; the least-privilege one is the first lock.
const mysqlSecretSchema = "mysql"

// mysqlBodyWords are words a stored function body reached by a query may
// not hold: they run other code, reach files or change data. (A READ ONLY
// transaction refuses table writes anyway; these are refused for a clear
// message and for what it does not cover.)
var mysqlBodyWords = map[string]bool{
	"CALL": true, "PREPARE": true, "EXECUTE": true, "OUTFILE": true, "DUMPFILE": true, "LOAD": true,
	"HANDLER": true, "LOCK": true, "GRANT": true, "REVOKE": true, "INSERT": true, "UPDATE": true,
	"DELETE": true, "CREATE": true, "DROP": true, "ALTER": true, "TRUNCATE": true, "RENAME": true,
	"KILL": true, "FLUSH": true, "SHUTDOWN": true, "PURGE": true,
	// SET GLOBAL (and MySQL's PERSIST) changes the server for everyone; a
	// READ ONLY transaction does not stop it. (SET SESSION ends with the
	// job's session.)
	"GLOBAL": true, "PERSIST": true, "PERSIST_ONLY": true,
}

// mysqlSQLMode is the sql_mode of a read session: the server then reads
// "..." as a string and a backslash as an escape, as package safety does.
const mysqlSQLMode = "STRICT_TRANS_TABLES,ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION"

// mysqlBuiltins are the names the server's grammar and function registry
// know; natives is nil when the server does not list its functions.
type mysqlBuiltins struct {
	keywords, natives map[string]bool
}

// loadBuiltins loads (once per connection) what the server lists.
func (c *conn) loadBuiltins(ctx context.Context, conn *sql.Conn) (*mysqlBuiltins, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.builtins != nil {
		return c.builtins, nil
	}
	b := &mysqlBuiltins{keywords: map[string]bool{}}
	if err := eachString(ctx, conn, `SELECT WORD FROM information_schema.KEYWORDS`, func(s string) { b.keywords[strings.ToLower(s)] = true }); err != nil {
		return nil, err
	}
	natives := map[string]bool{}
	if err := eachString(ctx, conn, `SELECT FUNCTION FROM information_schema.SQL_FUNCTIONS`, func(s string) { natives[strings.ToLower(s)] = true }); err == nil {
		b.natives = natives
	}
	c.builtins = b
	return b, nil
}

// eachString runs a one-column query on conn.
func eachString(ctx context.Context, conn *sql.Conn, q string, fn func(string)) error {
	rows, err := conn.QueryContext(ctx, q)
	if err != nil {
		return dbError(err)
	}
	defer rows.Close()
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return dbError(err)
		}
		fn(s)
	}
	return dbError(rows.Err())
}

// checkMySQL runs locks 1 and 2 above on query, on conn (a read session of
// c). It returns a *RefusedError when the statement may not run, ErrQuery
// with the server's message when the server rejects it.
func (c *conn) checkMySQL(ctx context.Context, conn *sql.Conn, query string) error {
	var params int
	err := conn.Raw(func(dc any) error {
		p, ok := dc.(driver.ConnPrepareContext)
		if !ok {
			return fmt.Errorf("%w: the MySQL driver cannot prepare", ErrUnavailable)
		}
		st, err := p.PrepareContext(ctx, "SELECT 1 FROM DUAL WHERE EXISTS (\n"+query+"\n)")
		if err != nil {
			return err
		}
		params = st.NumInput()
		return st.Close()
	})
	if err != nil {
		// ER_PARSE_ERROR: not one query (a second statement, INTO, a
		// statement that is no SELECT, or plain bad syntax).
		var me *mysql.MySQLError
		if errors.As(err, &me) && me.Number == 1064 {
			return refuse("the server does not read it as a single query: %s", me.Message)
		}
		return dbError(err)
	}
	if params > 0 {
		return refuse("bind parameters are not supported")
	}
	b, err := c.loadBuiltins(ctx, conn)
	if err != nil {
		return err
	}
	var db sql.NullString
	if err := conn.QueryRowContext(ctx, `SELECT DATABASE()`).Scan(&db); err != nil {
		return dbError(err)
	}
	ch := &mysqlChecker{conn: conn, b: b, seen: map[string]bool{}}
	return ch.text(ctx, query, "the query", false, db.String, 0)
}

// mysqlChecker follows one statement's names through the catalog.
type mysqlChecker struct {
	conn *sql.Conn
	b    *mysqlBuiltins
	// seen holds "view:db.name" and "function:db.name" already checked.
	seen map[string]bool
}

// text checks the names in src, which is what (for messages); body marks
// a stored function body (statements, not a query). db is the database
// src's unqualified names are resolved in, as the server resolves them:
// the session's for the query, the function's own for its body, the
// view's own for its definition.
func (ch *mysqlChecker) text(ctx context.Context, src, what string, body bool, db string, depth int) error {
	if depth > maxCatalogRounds {
		return refuse("the query's views and functions nest too deeply to check")
	}
	refs, vars, err := safety.Refs(src, safety.MySQL)
	if err != nil {
		return refuse("cannot read %s: %v", what, err)
	}
	if vars {
		return refuse("variables and bind parameters are not allowed (in %s)", what)
	}
	var tables []safety.Ref
	for i, r := range refs {
		if r.Word == "FOR" && i+1 < len(refs) && (refs[i+1].Word == "UPDATE" || refs[i+1].Word == "SHARE") ||
			r.Word == "LOCK" && i+1 < len(refs) && refs[i+1].Word == "IN" {
			return refuse("row locking (FOR UPDATE, LOCK IN SHARE MODE) is not allowed (in %s)", what)
		}
		if (r.Word == "NEXT" || r.Word == "PREVIOUS") && i+1 < len(refs) && refs[i+1].Word == "VALUE" {
			return refuse("%s VALUE FOR reads or advances a sequence (in %s)", r.Word, what)
		}
		if body && mysqlBodyWords[r.Word] {
			return refuse("%s holds %s", what, r.Word)
		}
		if r.Call {
			if err := ch.call(ctx, r, what, db, depth); err != nil {
				return err
			}
			continue
		}
		if depth == 0 && strings.EqualFold(cmp.Or(r.Schema, db), mysqlSecretSchema) {
			return refuse("tables of the %s schema may not be read: it holds password hashes and other servers' passwords", mysqlSecretSchema)
		}
		tables = append(tables, r)
	}
	return ch.views(ctx, tables, what, db, depth)
}

// call decides on one function call of text resolved in db.
func (ch *mysqlChecker) call(ctx context.Context, r safety.Ref, what, db string, depth int) error {
	name := strings.ToLower(r.Name)
	if r.Schema == "" {
		if reason, ok := mysqlDenied[name]; ok {
			return refuse("function %s() is not allowed: %s (in %s)", name, reason, what)
		}
		if ch.b.keywords[name] || ch.b.natives[name] {
			return nil
		}
	}
	schema := cmp.Or(r.Schema, db)
	key := "function:" + strings.ToLower(schema+"."+name)
	if ch.seen[key] {
		return nil
	}
	ch.seen[key] = true
	var access, def sql.NullString
	err := ch.conn.QueryRowContext(ctx, `SELECT SQL_DATA_ACCESS, ROUTINE_DEFINITION FROM information_schema.ROUTINES
		WHERE ROUTINE_TYPE = 'FUNCTION' AND LOWER(ROUTINE_SCHEMA) = LOWER(?) AND LOWER(ROUTINE_NAME) = LOWER(?)`, schema, r.Name).Scan(&access, &def)
	switch {
	case err == sql.ErrNoRows && r.Schema == "" && ch.b.natives == nil:
		// MySQL does not list its native functions: taken for one.
		return nil
	case err == sql.ErrNoRows:
		return refuse("function %s() is neither a built-in nor a stored function of %s (a loadable function may do anything) (in %s)", r.Name, schema, what)
	case err != nil:
		return dbError(err)
	case access.String == "MODIFIES SQL DATA":
		return refuse("stored function %s.%s() is declared MODIFIES SQL DATA (in %s)", schema, r.Name, what)
	case !def.Valid || def.String == "":
		return refuse("the body of stored function %s.%s() cannot be read by this user, so it cannot be checked (in %s)", schema, r.Name, what)
	}
	return ch.text(ctx, def.String, fmt.Sprintf("stored function %s.%s()", schema, r.Name), true, schema, depth+1)
}

// views checks the definition of every view among names, resolved in db.
func (ch *mysqlChecker) views(ctx context.Context, names []safety.Ref, what, db string, depth int) error {
	type key struct{ schema, name string }
	var want []key
	for _, r := range names {
		schema := cmp.Or(r.Schema, db)
		k := key{strings.ToLower(schema), strings.ToLower(r.Name)}
		if k.schema == "" || ch.seen["view:"+k.schema+"."+k.name] {
			continue
		}
		ch.seen["view:"+k.schema+"."+k.name] = true
		want = append(want, k)
	}
	if len(want) == 0 {
		return nil
	}
	var conds []string
	var args []any
	for _, k := range want {
		conds = append(conds, "(LOWER(TABLE_SCHEMA) = ? AND LOWER(TABLE_NAME) = ?)")
		args = append(args, k.schema, k.name)
	}
	where := strings.Join(conds, " OR ")
	if err := ch.remoteTables(ctx, where, args, what); err != nil {
		return err
	}
	rows, err := ch.conn.QueryContext(ctx, `SELECT TABLE_SCHEMA, TABLE_NAME, VIEW_DEFINITION FROM information_schema.VIEWS WHERE `+where, args...)
	if err != nil {
		return dbError(err)
	}
	type view struct{ schema, name, def string }
	var found []view
	for rows.Next() {
		var v view
		var def sql.NullString
		if err := rows.Scan(&v.schema, &v.name, &def); err != nil {
			rows.Close()
			return dbError(err)
		}
		v.def = def.String
		found = append(found, v)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return dbError(err)
	}
	for _, v := range found {
		if strings.TrimSpace(v.def) == "" {
			return refuse("the definition of view %s.%s cannot be read by this user (it needs SHOW VIEW), so it cannot be checked (in %s)", v.schema, v.name, what)
		}
		if err := ch.text(ctx, v.def, fmt.Sprintf("view %s.%s", v.schema, v.name), false, v.schema, depth+1); err != nil {
			return err
		}
	}
	return nil
}

// remoteEngines are storage engines whose rows come from outside the
// database: a query another server runs (FederatedX, Spider, SphinxSE,
// CONNECT's MYSQL/ODBC/JDBC tables), or a file or URL CONNECT reads (its
// CSV, XML, JSON and REST tables). What the other side runs is beyond this
// check, on a connection that is neither read-only nor this session's: a
// remote view over GET_LOCK or a stored function that writes runs when
// the table is read.
var remoteEngines = []string{"FEDERATED", "CONNECT", "SPIDER", "SPHINX"}

// remoteTables refuses the tables matching cond (over TABLE_SCHEMA and
// TABLE_NAME, with args) that one of remoteEngines stores.
func (ch *mysqlChecker) remoteTables(ctx context.Context, cond string, args []any, what string) error {
	q := `SELECT TABLE_SCHEMA, TABLE_NAME, ENGINE FROM information_schema.TABLES WHERE (` + cond + `) AND ENGINE IN (?` + strings.Repeat(", ?", len(remoteEngines)-1) + `) LIMIT 1`
	for _, e := range remoteEngines {
		args = append(args, e)
	}
	var schema, name, engine string
	switch err := ch.conn.QueryRowContext(ctx, q, args...).Scan(&schema, &name, &engine); {
	case err == sql.ErrNoRows:
		return nil
	case err != nil:
		return dbError(err)
	}
	return refuse("%s.%s is a %s table: its rows come from outside the database (another server, a file or a URL), which cannot be checked here (in %s)", schema, name, engine, what)
}
