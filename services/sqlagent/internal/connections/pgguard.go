package connections

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"
)

// The PostgreSQL lock: ask the server what the statement calls.
//
// A READ ONLY transaction stops writes to tables, but not functions whose
// effects live outside the transaction: pg_terminate_backend,
// pg_advisory_lock, dblink_exec, lo_export, adminpack's file writes,
// replication slots, pg_stat_reset. A list of names cannot keep up with
// every extension, and PostgreSQL has several ways to spell a name. So the
// server resolves the statement and its catalog decides:
//
//  1. In a transaction that is always rolled back, the statement is stored
//     as a temporary view: CREATE TEMP VIEW v AS SELECT 1 FROM (<stmt>) q.
//     This parses and analyses the statement exactly as running it would
//     (same search_path, same overload and operator resolution, views
//     referenced but not expanded) and executes nothing: no planning, no
//     constant folding. It also proves that the text is one SELECT: the
//     extended protocol takes one statement only, and a subquery can hold
//     nothing but a query (no DML, no utility command, no EXPLAIN).
//  2. The view's rule (pg_rewrite.ev_action) is the server's own parse tree
//     with OIDs: every function call, operator, aggregate, window function,
//     TABLESAMPLE method, ORDER BY/GROUP BY operator, relation and value
//     type. nodetree.go reads it.
//  3. The references are followed through the catalog until nothing new
//     turns up: operators to their functions (pg_operator.oprcode),
//     functions to their parameters' default expressions, which the
//     planner adds to a call later (pg_proc.proargdefaults), aggregates to
//     their transition, final, combine and (de)serial functions and sort
//     operator (pg_aggregate), views to their own rules
//     (pg_rewrite), tables to their row-level security policies
//     (pg_policy) and to their partitions and inheritance children
//     (pg_inherits), types to their input, output, send and type modifier
//     functions and, for domains, their CHECK constraints
//     (pg_constraint.conbin); operators also to their selectivity
//     estimators and functions to their planner support functions, which
//     the planner calls.
//  4. Every function reached must be IMMUTABLE or STABLE in pg_proc, or on
//     a short allowlist of harmless volatile built-ins; a few stable
//     built-ins that read tables named at run time, assign transaction
//     ids or evaluate XPath are refused by name, and every function of
//     the native libraries of extensionLibraries whatever its label
//     (tablefunc's crosstab is STABLE and runs any SQL text). A new
//     extension's volatile function is therefore refused by default. Row
//     locks, XMLTABLE, foreign tables (another server runs their query)
//     and naming the catalogs of relationRefused are refused too.
//
// Why a temporary view rather than EXPLAIN: EXPLAIN (VERBOSE) prints
// expressions deparsed, not resolved; casts and implicit coercions hide
// their functions, operators print as symbols, and turning names back into
// OIDs means redoing overload resolution. debug_print_plan would give the
// tree but writes it to the server log for every query. pg_depend is no
// help either: it does not record references to built-in objects. The
// stored rule is the resolved tree itself.
//
// What it needs: PostgreSQL 12 or later; the read role must hold
// TEMPORARY on the database (PUBLIC has it by default); and the server
// must accept a read-write transaction,
// so a hot standby cannot serve as the read DSN; both fail closed, with the
// server's message. CREATE VIEW fires event triggers, if the database has
// any.
//
// What it cannot see: a function its owner labelled STABLE that has side
// effects (the label is trusted, not verified), operator support functions
// the executor picks from a type's operator classes for hashing and
// merging, and type input functions for literals, which PostgreSQL runs
// while parsing (built-in ones only look names up; new base types need a
// superuser). The least-privilege read role is the lock for those.

// volatileAllowed are the pg_catalog volatile functions a query may call:
// they read a clock, a random source or a size, or (bernoulli, system)
// are the built-in TABLESAMPLE methods' handlers; none changes any state.
var volatileAllowed = map[string]bool{
	"random": true, "random_normal": true, "gen_random_uuid": true,
	"clock_timestamp": true, "timeofday": true,
	"pg_relation_size": true, "pg_table_size": true, "pg_indexes_size": true,
	"pg_total_relation_size": true, "pg_database_size": true,
	"bernoulli": true, "system": true,
}

// stableRefused are pg_catalog functions refused although not volatile
// (package safety names them too; the locks keep their own lists so that
// neither changes when the other is edited):
// the *_to_xml family reads tables named at run time (a view read that
// way runs functions the check never saw) and the others assign a
// transaction id.
var stableRefused = map[string]string{
	"table_to_xml":                  "it reads a table named at run time",
	"table_to_xml_and_xmlschema":    "it reads a table named at run time",
	"schema_to_xml":                 "it reads tables named at run time",
	"schema_to_xml_and_xmlschema":   "it reads tables named at run time",
	"database_to_xml":               "it reads tables named at run time",
	"database_to_xml_and_xmlschema": "it reads tables named at run time",
	"txid_current":                  "it assigns a transaction id",
	"pg_current_xact_id":            "it assigns a transaction id",
	"xpath":                         xpathReason,
	"xpath_exists":                  xpathReason,
}

// xpathReason is why XPath evaluation is refused: libxml2 does not look
// at PostgreSQL's interrupts, so a query whose XPath grows with the cube
// of its input runs on after its statement timeout (measured: a read
// answered "timed out" at 2 s while its backend ran for 29 s).
const xpathReason = "its XPath evaluation does not stop at the statement timeout"

// extensionLibraries are the native libraries of extensions whose
// functions are refused whatever their volatility label says: they run SQL
// given as text or built from their arguments (tablefunc's crosstab and
// connectby, xml2's xpath_table, dblink), write files (adminpack), read
// raw pages past permissions (pageinspect), or evaluate XPath or XSLT that
// does not stop at the timeout (xml2, whose library is pgxml). crosstab and xpath_table are
// labelled STABLE, so the volatility rule alone let a read run, through
// them, any function: a dblink_exec DELETE, a file write, a config reload.
var extensionLibraries = map[string]string{
	"tablefunc":   "it runs SQL given as text or built from its arguments",
	"pgxml":       "it runs SQL built from its arguments, or XPath that does not stop at the statement timeout", // xml2's library
	"dblink":      "it reaches another database",
	"adminpack":   "it reads and writes server files",
	"pageinspect": "it reads raw database pages",
}

// relationRefused are pg_catalog relations a read may not name: they hold
// password hashes, user mappings' options and subscriptions' connection
// strings (passwords of other servers), or the planner's statistics,
// whose sample values (most common values, histogram bounds) are copies
// of any table's column, pg_authid.rolpassword's once ANALYZE has run
// over the catalog. Only a superuser read role can read them all; the
// least-privilege role is the first lock (with it, pg_stat_activity shows
// no other role's statements, and pg_stats only columns it may read).
var relationRefused = map[string]string{
	"pg_authid":             "it holds password hashes",
	"pg_shadow":             "it holds password hashes",
	"pg_user_mapping":       "it holds passwords of other servers",
	"pg_user_mappings":      "it holds passwords of other servers",
	"pg_subscription":       "it holds connection strings of other servers, passwords included",
	"pg_statistic":          statisticsReason,
	"pg_stats":              statisticsReason,
	"pg_statistic_ext_data": statisticsReason,
	"pg_stats_ext":          statisticsReason,
	"pg_stats_ext_exprs":    statisticsReason,
}

// statisticsReason is why the planner's statistics may not be read.
const statisticsReason = "its sample values copy columns of every table, password hashes included"

// maxCatalogRounds bounds how far references are followed (views over
// views over functions); a deeper chain is refused.
const maxCatalogRounds = 32

// checkPostgres runs the server-side check of query on conn, in a
// transaction it rolls back. It returns a *RefusedError when the statement
// calls something it must not, ErrQuery with the server's message when the
// server rejects the statement (or cannot run the check), nil otherwise.
func checkPostgres(ctx context.Context, conn *sql.Conn, query string, timeout time.Duration) error {
	// Not bound to ctx (its statements are): see readOnlyTx.
	tx, err := conn.BeginTx(context.WithoutCancel(ctx), nil)
	if err != nil {
		return dbError(err)
	}
	defer func() { _ = tx.Rollback() }()
	// An explicit READ WRITE, in case the role's default is read-only: the
	// view is temporary and the transaction never commits.
	for _, st := range []string{"SET TRANSACTION READ WRITE", fmt.Sprintf("SET LOCAL statement_timeout = %d", timeout.Milliseconds())} {
		if _, err := tx.ExecContext(ctx, st); err != nil {
			return dbError(err)
		}
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	view := "agentmesh_check_" + hex.EncodeToString(b[:])
	// QueryContext, not ExecContext: pgx sends an argument-less Exec with
	// the simple protocol, which would accept several statements.
	rows, err := tx.QueryContext(ctx, "CREATE TEMP VIEW "+view+" AS SELECT 1 FROM (\n"+query+"\n) AS agentmesh_q")
	if err != nil {
		return dbError(err)
	}
	if err := rows.Close(); err != nil {
		return dbError(err)
	}
	var tree string
	if err := tx.QueryRowContext(ctx, `SELECT ev_action::text FROM pg_rewrite WHERE ev_class = to_regclass('pg_temp.' || $1) AND rulename = '_RETURN'`, view).Scan(&tree); err != nil {
		return dbError(err)
	}
	refs := newTreeRefs()
	refs.scan(tree)
	return resolve(ctx, tx, refs)
}

// resolve follows refs through the catalog and decides.
func resolve(ctx context.Context, tx *sql.Tx, refs *treeRefs) error {
	seen := newTreeRefs()
	// via says how a function was reached, for the refusal message.
	via := map[uint32]string{}
	for round := 0; ; round++ {
		if refs.rowLocks {
			return refuse("row locking (FOR UPDATE/SHARE) is not allowed")
		}
		if refs.notSelect {
			return refuse("only a plain SELECT query can run")
		}
		if refs.xmlTables > 0 {
			return refuse("XMLTABLE is not allowed: %s", xpathReason)
		}
		ops, funcs, rels, types := fresh(refs.ops, seen.ops), fresh(refs.funcs, seen.funcs), fresh(refs.rels, seen.rels), fresh(refs.types, seen.types)
		if len(ops)+len(funcs)+len(rels)+len(types) == 0 {
			return nil
		}
		if round == maxCatalogRounds {
			return refuse("the query's views and functions nest too deeply to check")
		}
		next := newTreeRefs()
		if err := followOperators(ctx, tx, ops, next, via); err != nil {
			return err
		}
		if err := checkFunctions(ctx, tx, funcs, next, via); err != nil {
			return err
		}
		if err := followRelations(ctx, tx, rels, round == 0, next); err != nil {
			return err
		}
		if err := followTypes(ctx, tx, types, next, via); err != nil {
			return err
		}
		refs = next
	}
}

// fresh returns the OIDs of want not in seen, and marks them seen.
func fresh(want, seen map[uint32]bool) []uint32 {
	var out []uint32
	for oid := range want {
		if !seen[oid] {
			seen[oid] = true
			out = append(out, oid)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// oidList renders OIDs for an IN list (numbers this package parsed).
func oidList(oids []uint32) string {
	parts := make([]string, len(oids))
	for i, o := range oids {
		parts[i] = strconv.FormatUint(uint64(o), 10)
	}
	return "(" + strings.Join(parts, ",") + ")"
}

// followOperators adds each operator's function and its selectivity
// estimators, which the planner calls.
func followOperators(ctx context.Context, tx *sql.Tx, ops []uint32, next *treeRefs, via map[uint32]string) error {
	if len(ops) == 0 {
		return nil
	}
	return eachRow(ctx, tx, `SELECT n.nspname || '.' || o.oprname, o.oprcode::oid::bigint, o.oprrest::oid::bigint, o.oprjoin::oid::bigint
		FROM pg_operator o JOIN pg_namespace n ON n.oid = o.oprnamespace WHERE o.oid IN `+oidList(ops), func(s scanner) error {
		var name string
		var fns [3]int64
		if err := s.Scan(&name, &fns[0], &fns[1], &fns[2]); err != nil {
			return err
		}
		addFuncs(next, via, "operator "+name, fns[:]...)
		return nil
	})
}

// addFuncs adds the non-zero function OIDs to next, noting who calls them.
func addFuncs(next *treeRefs, via map[uint32]string, caller string, fns ...int64) {
	for _, fn := range fns {
		if fn != 0 {
			next.funcs[uint32(fn)] = true
			via[uint32(fn)] = caller
		}
	}
}

// checkFunctions decides on each function and follows aggregates to their
// support functions.
func checkFunctions(ctx context.Context, tx *sql.Tx, funcs []uint32, next *treeRefs, via map[uint32]string) error {
	if len(funcs) == 0 {
		return nil
	}
	found := map[uint32]bool{}
	var aggs []uint32
	// proargdefaults: the planner, not the parser, fills in a call's
	// omitted arguments, so their default expressions are not in the tree.
	err := eachRow(ctx, tx, `SELECT p.oid::bigint, n.nspname, p.proname, p.provolatile::text, p.prokind::text, p.proargdefaults::text, p.prosupport::oid::bigint, p.probin
		FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE p.oid IN `+oidList(funcs), func(s scanner) error {
		var oid, support int64
		var schema, name, volatility, kind string
		var defaults, library sql.NullString
		if err := s.Scan(&oid, &schema, &name, &volatility, &kind, &defaults, &support, &library); err != nil {
			return err
		}
		next.scan(defaults.String)
		addFuncs(next, via, "function "+schema+"."+name+" (its planner support function)", support)
		found[uint32(oid)] = true
		if reason := functionVerdict(schema, name, volatility, library.String); reason != "" {
			how := ""
			if v := via[uint32(oid)]; v != "" {
				how = " (called by " + v + ")"
			}
			return refuse("function %s.%s()%s is not allowed: %s", schema, name, how, reason)
		}
		if kind == "a" {
			aggs = append(aggs, uint32(oid))
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, f := range funcs {
		if !found[f] {
			return refuse("the query calls function %d, which the catalog does not know", f)
		}
	}
	if len(aggs) == 0 {
		return nil
	}
	return eachRow(ctx, tx, `SELECT a.aggfnoid::oid::bigint, p.proname, a.aggtransfn::oid::bigint, a.aggfinalfn::oid::bigint, a.aggcombinefn::oid::bigint,
			a.aggserialfn::oid::bigint, a.aggdeserialfn::oid::bigint, a.aggmtransfn::oid::bigint, a.aggminvtransfn::oid::bigint,
			a.aggmfinalfn::oid::bigint, a.aggsortop::bigint
		FROM pg_aggregate a JOIN pg_proc p ON p.oid = a.aggfnoid WHERE a.aggfnoid IN `+oidList(aggs), func(s scanner) error {
		var agg int64
		var name string
		var support [8]int64
		var sortop int64
		dest := []any{&agg, &name}
		for i := range support {
			dest = append(dest, &support[i])
		}
		if err := s.Scan(append(dest, &sortop)...); err != nil {
			return err
		}
		addFuncs(next, via, "aggregate "+name, support[:]...)
		if sortop != 0 {
			next.ops[uint32(sortop)] = true
		}
		return nil
	})
}

// functionVerdict returns why a function may not run, or "". library is
// pg_proc.probin: the native library of a C function ("$libdir/tablefunc").
func functionVerdict(schema, name, volatility, library string) string {
	if reason, ok := extensionLibraries[strings.TrimSuffix(path.Base(library), ".so")]; ok && library != "" {
		return reason
	}
	if schema == "pg_catalog" {
		if reason, ok := stableRefused[name]; ok {
			return reason
		}
		if volatileAllowed[name] {
			return ""
		}
	}
	if volatility == "v" {
		return "it is VOLATILE, so it may change state outside the transaction (only IMMUTABLE and STABLE functions may run)"
	}
	return ""
}

// followRelations refuses the relations a read may not name (named: rels
// are those the statement itself names, not those of the views it reads:
// pg_roles and pg_stat_activity are views over pg_authid that show no
// password) and foreign tables, then reads the rules of views, the
// row-level security policies of tables the query reads, and the
// partitions and inheritance children a read of a table also scans: all
// of them run as part of the read.
func followRelations(ctx context.Context, tx *sql.Tx, rels []uint32, named bool, next *treeRefs) error {
	if len(rels) == 0 {
		return nil
	}
	if err := refuseRelations(ctx, tx, rels, named); err != nil {
		return err
	}
	if err := scanTrees(ctx, tx, `SELECT ev_action::text FROM pg_rewrite WHERE ev_class IN `+oidList(rels)+` AND rulename = '_RETURN'`, next); err != nil {
		return err
	}
	if err := scanTrees(ctx, tx, `SELECT polqual::text FROM pg_policy WHERE polrelid IN `+oidList(rels)+` AND polqual IS NOT NULL`, next); err != nil {
		return err
	}
	// A partitioned or inheritance parent names none of its children in
	// the query's tree, yet the executor reads them all (without ONLY).
	return eachRow(ctx, tx, `SELECT inhrelid FROM pg_inherits WHERE inhparent IN `+oidList(rels), func(s scanner) error {
		var child uint32
		if err := s.Scan(&child); err != nil {
			return err
		}
		next.rels[child] = true
		return nil
	})
}

// refuseRelations refuses a statement that reads a foreign table, or that
// names a relation of relationRefused. A foreign table's rows come from a
// query its server runs (postgres_fdw: on a connection that outlives the
// job, and on PostgreSQL 15 in a transaction that may write), over
// views and functions this check cannot see: a remote view that advances
// a sequence or takes a lock does so when the foreign table is read.
func refuseRelations(ctx context.Context, tx *sql.Tx, rels []uint32, named bool) error {
	return eachRow(ctx, tx, `SELECT n.nspname, c.relname, c.relkind FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE c.oid IN `+oidList(rels), func(s scanner) error {
		var schema, name, kind string
		if err := s.Scan(&schema, &name, &kind); err != nil {
			return err
		}
		if kind == "f" {
			return refuse("%s.%s is a foreign table: another server runs the query behind it, which cannot be checked here", schema, name)
		}
		if reason, ok := relationRefused[name]; ok && named && schema == "pg_catalog" {
			return refuse("pg_catalog.%s may not be read: %s", name, reason)
		}
		return nil
	})
}

// scanTrees adds to next what the node trees a catalog query returns (one
// text column) refer to.
func scanTrees(ctx context.Context, tx *sql.Tx, q string, next *treeRefs) error {
	return eachRow(ctx, tx, q, func(s scanner) error {
		var tree string
		if err := s.Scan(&tree); err != nil {
			return err
		}
		next.scan(tree)
		return nil
	})
}

// followTypes adds each type's input and output functions, and for
// domains their base type and CHECK constraints.
func followTypes(ctx context.Context, tx *sql.Tx, types []uint32, next *treeRefs, via map[uint32]string) error {
	if len(types) == 0 {
		return nil
	}
	var domains []uint32
	err := eachRow(ctx, tx, `SELECT t.oid::bigint, format_type(t.oid, NULL), t.typtype::text, t.typbasetype::bigint,
			t.typinput::oid::bigint, t.typoutput::oid::bigint, t.typsend::oid::bigint, t.typmodin::oid::bigint, t.typmodout::oid::bigint
		FROM pg_type t WHERE t.oid IN `+oidList(types), func(s scanner) error {
		var oid, base int64
		var name, typtype string
		var io [5]int64
		if err := s.Scan(&oid, &name, &typtype, &base, &io[0], &io[1], &io[2], &io[3], &io[4]); err != nil {
			return err
		}
		addFuncs(next, via, "type "+name, io[:]...)
		if typtype == "d" {
			domains = append(domains, uint32(oid))
			next.types[uint32(base)] = true
		}
		return nil
	})
	if err != nil || len(domains) == 0 {
		return err
	}
	return scanTrees(ctx, tx, `SELECT conbin::text FROM pg_constraint WHERE contypid IN `+oidList(domains)+` AND conbin IS NOT NULL`, next)
}

// scanner is the part of *sql.Rows a row callback needs.
type scanner interface{ Scan(dest ...any) error }

// eachRow runs a catalog query and calls fn for each row. A *RefusedError
// from fn stops the loop and is returned as is; other errors are database
// errors.
func eachRow(ctx context.Context, tx *sql.Tx, q string, fn func(scanner) error) error {
	rows, err := tx.QueryContext(ctx, q)
	if err != nil {
		return dbError(err)
	}
	defer rows.Close()
	for rows.Next() {
		if err := fn(rows); err != nil {
			var re *RefusedError
			if errors.As(err, &re) {
				return err
			}
			return dbError(err)
		}
	}
	return dbError(rows.Err())
}
