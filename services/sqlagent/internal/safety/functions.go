package safety

import "strings"

// deniedFunctions maps function names (lower case) to why they are refused.
// Both dialects' lists apply to every query: a function the other dialect
// lacks fails anyway, and one list is easier to audit.
var deniedFunctions = map[string]string{
	// SQLite.
	"load_extension": "it loads native code",
	"readfile":       "it reads files on the database server",
	"writefile":      "it writes files on the database server",
	"edit":           "it starts an editor",
	"fts3_tokenizer": "it can register native code",
	"zipfile":        "it reads archives from disk",
	"sqlar_compress": "it is part of the archive writer",
	// PostgreSQL: writes, files, sleeping, SQL run from text, server control.
	"nextval":                    "it advances a sequence",
	"setval":                     "it changes a sequence",
	"set_config":                 "it changes server settings",
	"query_to_xml":               "it runs SQL given as text",
	"query_to_xml_and_xmlschema": "it runs SQL given as text",
	"query_to_xmlschema":         "it runs SQL given as text",
	"cursor_to_xml":              "it reads a cursor",
	"txid_current":               "it assigns a transaction id",
	"dblink":                     "it reaches another database",
	"dblink_exec":                "it runs SQL on another database",
}

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

// dangerousFunction returns why a call of name is refused, or "".
func dangerousFunction(name string) string {
	if reason, ok := deniedFunctions[name]; ok {
		return reason
	}
	switch {
	case strings.HasPrefix(name, "pg_") && !allowedPgFunctions[name]:
		return "server administration and file functions are not allowed"
	case strings.HasPrefix(name, "lo_"):
		return "large-object functions read and write server files"
	case strings.HasPrefix(name, "dblink"):
		return "it reaches another database"
	case strings.HasPrefix(name, "pragma_"):
		return "PRAGMA functions are not allowed"
	}
	return ""
}
