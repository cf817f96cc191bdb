package safety

import (
	"maps"
	"slices"
	"strings"
)

// deniedFunctions maps function names (lower case) to why they are refused.
// Every dialect's list applies to every query: a function the other
// dialect lacks fails anyway, and one list is easier to audit. This is the
// first lock's list, for clear messages; on PostgreSQL the second lock
// refuses every volatile function the catalog knows, listed here or not.
var deniedFunctions = map[string]string{
	// SQLite.
	"load_extension": "it loads native code",
	"readfile":       "it reads files on the database server",
	"writefile":      "it writes files on the database server",
	"edit":           "it starts an editor",
	"fts3_tokenizer": "it can register native code",
	"zipfile":        "it reads archives from disk",
	"sqlar_compress": "it is part of the archive writer",
	"sqlite_dbpage":  "it reads and writes raw database pages",
	// PostgreSQL: writes, files, sleeping, SQL run from text, server control.
	"nextval":                       "it advances a sequence",
	"setval":                        "it changes a sequence",
	"currval":                       "it reads session state of a sequence",
	"lastval":                       "it reads session state of a sequence",
	"set_config":                    "it changes server settings",
	"setseed":                       "it changes the session's random seed",
	"query_to_xml":                  "it runs SQL given as text",
	"query_to_xml_and_xmlschema":    "it runs SQL given as text",
	"query_to_xmlschema":            "it runs SQL given as text",
	"cursor_to_xml":                 "it reads a cursor",
	"cursor_to_xmlschema":           "it reads a cursor",
	"table_to_xml":                  "it reads a table named at run time",
	"table_to_xml_and_xmlschema":    "it reads a table named at run time",
	"schema_to_xml":                 "it reads tables named at run time",
	"schema_to_xml_and_xmlschema":   "it reads tables named at run time",
	"database_to_xml":               "it reads tables named at run time",
	"database_to_xml_and_xmlschema": "it reads tables named at run time",
	"ts_stat":                       "it runs SQL given as text",
	"ts_rewrite":                    "it can run SQL given as text",
	"txid_current":                  "it assigns a transaction id",
	"dblink":                        "it reaches another database",
	"dblink_exec":                   "it runs SQL on another database",
	"crosstab":                      "it runs SQL given as text",
	"crosstab2":                     "it runs SQL given as text",
	"crosstab3":                     "it runs SQL given as text",
	"crosstab4":                     "it runs SQL given as text",
	"connectby":                     "it runs SQL built from its arguments",
	"xpath_table":                   "it runs SQL built from its arguments",
	"xpath":                         xpathReason,
	"xpath_exists":                  xpathReason,
	"xmltable":                      xpathReason,
	"xpath_string":                  xpathReason,
	"xpath_number":                  xpathReason,
	"xpath_bool":                    xpathReason,
	"xpath_nodeset":                 xpathReason,
	"xpath_list":                    xpathReason,
	"xslt_process":                  xpathReason,
	// MySQL.
	"sleep":                      "it sleeps",
	"benchmark":                  "it burns CPU on purpose",
	"load_file":                  "it reads files on the database server",
	"get_lock":                   "it takes a lock that outlives the query",
	"release_lock":               "it releases a named lock",
	"release_all_locks":          "it releases named locks",
	"master_pos_wait":            "it waits on replication",
	"source_pos_wait":            "it waits on replication",
	"wait_for_executed_gtid_set": "it waits on replication",
	"master_gtid_wait":           "it waits on replication",
	"wsrep_sync_wait_upto_gtid":  "it waits on replication",
	"binlog_gtid_pos":            "it reads the server's binary log files",
	"encrypt":                    "its crypt(3) rounds run on after the statement timeout",
	"extractvalue":               "its XPath evaluation runs on after the statement timeout",
	"updatexml":                  "its XPath evaluation runs on after the statement timeout",
	"sys_exec":                   "it runs a program on the server",
	"sys_eval":                   "it runs a program on the server",
}

// xpathReason is why XPath and XSLT functions are refused: libxml2 does
// not look at PostgreSQL's interrupts, so a costly expression runs on
// after the statement timeout.
const xpathReason = "its XPath evaluation does not stop at the statement timeout"

// allowedPgFunctions are the pg_* functions a read-only query may call; every
// other pg_* function is refused, because that family holds the server's
// file access, sleeps, backend control and replication functions.
var allowedPgFunctions = map[string]bool{
	"pg_typeof": true, "pg_size_pretty": true, "pg_column_size": true,
	"pg_total_relation_size": true, "pg_relation_size": true, "pg_table_size": true,
	"pg_indexes_size": true, "pg_database_size": true, "pg_get_viewdef": true,
	"pg_get_indexdef": true, "pg_get_constraintdef": true, "pg_get_expr": true,
	"pg_get_userbyid": true, "pg_backend_pid": true, "pg_is_in_recovery": true,
	"pg_postmaster_start_time": true, "pg_client_encoding": true, "pg_encoding_to_char": true,
}

// dangerousFunction returns why a call of name (lower case) is refused in
// dialect d, or "".
func dangerousFunction(name string, d Dialect) string {
	if reason, ok := deniedFunctions[name]; ok {
		return reason
	}
	switch {
	case strings.HasPrefix(name, "pg_") && !allowedPgFunctions[name]:
		return "server administration and file functions are not allowed"
	case strings.HasPrefix(name, "lo_") || name == "loread" || name == "lowrite":
		return "large-object functions read and write server files"
	case strings.HasPrefix(name, "dblink"):
		return "it reaches another database"
	case strings.HasPrefix(name, "pragma_") && d != SQLite:
		return "PRAGMA functions are not allowed"
	}
	return ""
}

// readOnlyPragmas are the SQLite PRAGMA table functions a query may read:
// each describes the schema and changes nothing. Every other pragma_*
// function is refused (some take an argument that sets the pragma, others
// read the server's file paths or run long checks).
var readOnlyPragmas = map[string]bool{
	"pragma_table_info":       true,
	"pragma_table_xinfo":      true,
	"pragma_table_list":       true,
	"pragma_index_list":       true,
	"pragma_index_info":       true,
	"pragma_index_xinfo":      true,
	"pragma_foreign_key_list": true,
	"pragma_collation_list":   true,
}

// pragmaFunction returns why a reference to name (lower case; a SQLite
// table or function name) is refused, or "".
func pragmaFunction(name string) string {
	if strings.HasPrefix(name, "pragma_") && !readOnlyPragmas[name] {
		return "only these PRAGMA functions may be read: " + strings.Join(slices.Sorted(maps.Keys(readOnlyPragmas)), ", ")
	}
	return ""
}
