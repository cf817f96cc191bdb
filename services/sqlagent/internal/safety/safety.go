// Package safety decides whether a SQL text is a single read-only query that
// the SQL agent may run. It is the first lock: fast, database-free, and the
// one that gives the clearest messages. The second lock asks the engine
// itself (package connections: PostgreSQL's catalog for every function a
// statement calls, SQLite's authorizer), and reads then run read-only.
//
// The check works on tokens, not on the raw string. The tokenizer follows
// each dialect's own lexer (PostgreSQL, SQLite, MySQL): comments (nested in
// PostgreSQL, MySQL's # and /*! code */), every string form (E'..',
// U&'..' UESCAPE, $tag$..$tag$, X'..'), every identifier form ("..",
// U&".." UESCAPE, [..], `..`), and it decodes identifiers before any
// decision, so U&"\0070g_sleep" is pg_sleep and [load_extension] is
// load_extension. Where the reading of a text depends on a server setting
// (a backslash before a quote) or a dialect rule it cannot mirror, it
// refuses rather than guesses.
//
// On the tokens it enforces: exactly one statement (a trailing semicolon is
// fine); the statement is a query (SELECT, VALUES, WITH ... SELECT, TABLE
// on PostgreSQL, possibly parenthesised, compound with
// UNION/INTERSECT/EXCEPT); every common table expression is itself a query
// (PostgreSQL allows DML there); no data-changing or schema-changing
// keyword anywhere (INSERT, UPDATE, DELETE, MERGE, DROP, CREATE, ALTER,
// TRUNCATE, ATTACH, PRAGMA, SELECT ... INTO, LISTEN, PREPARE, ...); no row
// locking; no bind parameters or variables; no call of a function that
// writes, reads the server's files, sleeps, takes locks, signals other
// sessions or runs SQL text of its own; and on SQLite no PRAGMA table
// function outside a short read-only list, with or without parentheses.
package safety

import (
	"errors"
	"fmt"
	"strings"
	"unicode"

	"github.com/agentmesh/agentmesh/libs/utf8x"
)

// ErrRejected is matched (errors.Is) by every rejection from Check.
var ErrRejected = errors.New("sql rejected")

// Error is a rejection: Reason says why in words a user understands.
type Error struct {
	// Reason is why the SQL was refused, e.g. "DELETE changes data".
	Reason string
	// Offset is the byte offset in the SQL the reason points at, or -1.
	Offset int
}

func (e *Error) Error() string { return "unsafe SQL: " + e.Reason }

// Is makes errors.Is(err, ErrRejected) true.
func (e *Error) Is(target error) bool { return target == ErrRejected }

func reject(off int, format string, args ...any) error {
	return &Error{Reason: fmt.Sprintf(format, args...), Offset: off}
}

// forbiddenWords are keywords that have no place in a read-only query. They
// are refused wherever they appear as bare words (quoted identifiers and
// string literals are not words, so a column "update" or a value 'drop' is
// fine).
var forbiddenWords = map[string]string{
	"INSERT":     "INSERT changes data",
	"UPDATE":     "UPDATE changes data",
	"DELETE":     "DELETE changes data",
	"MERGE":      "MERGE changes data",
	"UPSERT":     "UPSERT changes data",
	"REPLACE":    "REPLACE changes data", // replace(...) the function is allowed, see Check
	"DROP":       "DROP changes the schema",
	"CREATE":     "CREATE changes the schema",
	"ALTER":      "ALTER changes the schema",
	"TRUNCATE":   "TRUNCATE deletes data",
	"RENAME":     "RENAME changes the schema",
	"GRANT":      "GRANT changes permissions",
	"REVOKE":     "REVOKE changes permissions",
	"ATTACH":     "ATTACH opens another database",
	"DETACH":     "DETACH changes the open databases",
	"PRAGMA":     "PRAGMA changes or inspects database settings",
	"VACUUM":     "VACUUM rewrites the database",
	"REINDEX":    "REINDEX rebuilds indexes",
	"ANALYZE":    "ANALYZE writes statistics (and EXPLAIN ANALYZE runs the statement)",
	"COPY":       "COPY reads or writes files",
	"CALL":       "CALL runs a procedure",
	"EXECUTE":    "EXECUTE runs a prepared statement",
	"EXEC":       "EXEC runs a procedure",
	"INTO":       "SELECT ... INTO creates a table",
	"OUTFILE":    "INTO OUTFILE writes a file",
	"DUMPFILE":   "INTO DUMPFILE writes a file",
	"LOCK":       "LOCK takes table locks",
	"NOTIFY":     "NOTIFY sends notifications",
	"SAVEPOINT":  "transaction control is not allowed",
	"COMMIT":     "transaction control is not allowed",
	"ROLLBACK":   "transaction control is not allowed",
	"LISTEN":     "LISTEN subscribes the session to notifications",
	"UNLISTEN":   "UNLISTEN changes the session's subscriptions",
	"PREPARE":    "PREPARE leaves a prepared statement in the session",
	"DEALLOCATE": "DEALLOCATE changes the session's prepared statements",
	"DISCARD":    "DISCARD resets session state",
	"REFRESH":    "REFRESH MATERIALIZED VIEW rewrites data",
	"CLUSTER":    "CLUSTER rewrites a table",
	"CHECKPOINT": "CHECKPOINT is a server operation",
	"LOAD":       "LOAD loads code or data",
	"HANDLER":    "HANDLER opens a table cursor",
	"PROCEDURE":  "SELECT ... PROCEDURE runs a procedure over the result",
}

// queryStarts are the words a query (or a parenthesised part of one) may
// start with; TABLE t (the whole table) is a query in PostgreSQL.
var queryStarts = map[string]bool{"SELECT": true, "WITH": true, "VALUES": true}

// Check returns sql as one statement without its trailing semicolons and
// comments when it is a single read-only query in dialect d, and an *Error
// (matching ErrRejected) naming the first reason otherwise.
func Check(sql string, d Dialect) (string, error) {
	readings, err := tokenizeReadings(sql, d)
	if err != nil {
		return "", reject(-1, "cannot read the SQL: %v", err)
	}
	var out string
	for i, toks := range readings {
		checked, err := checkReading(sql, toks, d)
		if err != nil {
			return "", err
		}
		if i == 0 {
			out = checked
		}
	}
	return out, nil
}

// checkReading checks one reading of sql (see tokenizeReadings).
func checkReading(sql string, toks []token, d Dialect) (string, error) {
	if len(toks) == 0 {
		return "", reject(-1, "the SQL is empty")
	}
	// One statement: every semicolon must be trailing.
	end, stmtEnd := len(toks), len(sql)
	for i, t := range toks {
		if t.punct(";") {
			for _, rest := range toks[i+1:] {
				if !rest.punct(";") {
					return "", reject(rest.pos, "only one statement is allowed")
				}
			}
			end, stmtEnd = i, t.pos
			break
		}
	}
	toks = toks[:end]
	if len(toks) == 0 {
		return "", reject(-1, "the SQL is empty")
	}
	if err := checkQuery(sql, toks, d); err != nil {
		return "", err
	}
	if err := checkTokens(toks, d); err != nil {
		return "", err
	}
	return strings.TrimSpace(sql[:stmtEnd]), nil
}

// checkQuery checks the statement's shape: it must be a query, and every
// parenthesised sub-part that starts a statement (a CTE body, a subquery)
// must be a query too. Parentheses must balance.
func checkQuery(sql string, toks []token, d Dialect) error {
	depth := 0
	for _, t := range toks {
		switch {
		case t.punct("("):
			depth++
		case t.punct(")"):
			depth--
			if depth < 0 {
				return reject(t.pos, "unbalanced parentheses")
			}
		}
	}
	if depth != 0 {
		return reject(-1, "unbalanced parentheses")
	}
	// Strip leading parentheses: "(SELECT ...) UNION (SELECT ...)".
	i := 0
	for i < len(toks) && toks[i].punct("(") {
		i++
	}
	if i == len(toks) || toks[i].kind != kWord || !(queryStarts[toks[i].text] || (d == Postgres && toks[i].text == "TABLE")) {
		first := toks[min(i, len(toks)-1)]
		if first.kind != kWord {
			return reject(first.pos, "a query starts with SELECT or WITH, not %q", leadingText(sql, first.pos))
		}
		return reject(first.pos, "only SELECT queries are allowed, not %s statements", first.text)
	}
	if toks[i].is("WITH") {
		return checkWith(sql, toks[i+1:], d)
	}
	return nil
}

// checkWith checks "[RECURSIVE] name [(cols)] AS [[NOT] MATERIALIZED] (query), ...
// query" (the tokens after WITH).
func checkWith(sql string, toks []token, d Dialect) error {
	i := 0
	if i < len(toks) && toks[i].is("RECURSIVE") {
		i++
	}
	for {
		if i >= len(toks) || (toks[i].kind != kWord && toks[i].kind != kQuotedID) {
			return reject(posOf(toks, i), "WITH must name a common table expression")
		}
		i++
		if i < len(toks) && toks[i].punct("(") {
			i = matching(toks, i) + 1
		}
		if i >= len(toks) || !toks[i].is("AS") {
			return reject(posOf(toks, i), "WITH name must be followed by AS (...)")
		}
		i++
		if i < len(toks) && toks[i].is("NOT") {
			i++
		}
		if i < len(toks) && toks[i].is("MATERIALIZED") {
			i++
		}
		if i >= len(toks) || !toks[i].punct("(") {
			return reject(posOf(toks, i), "WITH ... AS must be followed by a parenthesised query")
		}
		close := matching(toks, i)
		if close == i+1 {
			return reject(toks[i].pos, "empty common table expression")
		}
		if err := checkQuery(sql, toks[i+1:close], d); err != nil {
			return err
		}
		i = close + 1
		if i < len(toks) && toks[i].punct(",") {
			i++
			continue
		}
		break
	}
	if i >= len(toks) {
		return reject(-1, "WITH must be followed by a query")
	}
	return checkQuery(sql, toks[i:], d)
}

// leadingText returns the text of sql from byte pos up to its first
// space, at most 24 bytes of it and never part of a character, for a
// message to quote.
func leadingText(sql string, pos int) string {
	if pos < 0 || pos > len(sql) {
		return ""
	}
	s := sql[pos:]
	if i := strings.IndexFunc(s, unicode.IsSpace); i >= 0 {
		s = s[:i]
	}
	if len(s) > 24 {
		s = utf8x.Prefix(s, 24) + "…"
	}
	return s
}

// matching returns the index of the parenthesis closing toks[open]; the
// caller has checked that parentheses balance.
func matching(toks []token, open int) int {
	depth := 0
	for j := open; j < len(toks); j++ {
		switch {
		case toks[j].punct("("):
			depth++
		case toks[j].punct(")"):
			depth--
			if depth == 0 {
				return j
			}
		}
	}
	return len(toks) - 1
}

func posOf(toks []token, i int) int {
	if i < len(toks) {
		return toks[i].pos
	}
	return -1
}

// checkTokens refuses forbidden keywords, row locking, bind parameters and
// variables, dangerous function calls and (SQLite) PRAGMA table functions
// anywhere in the statement.
func checkTokens(toks []token, d Dialect) error {
	for i, t := range toks {
		next := token{kind: kPunct, pos: -1}
		if i+1 < len(toks) {
			next = toks[i+1]
		}
		switch t.kind {
		case kParam:
			if d == MySQL && strings.HasPrefix(t.text, "@") {
				return reject(t.pos, "variables (%s) are not allowed", t.text)
			}
			return reject(t.pos, "bind parameters (%s) are not supported; write the value into the query", t.text)
		case kWord:
			if t.text == "REPLACE" && next.punct("(") {
				break // the string function replace(x, y, z)
			}
			if reason, ok := forbiddenWords[t.text]; ok {
				return reject(t.pos, "%s", reason)
			}
			if t.text == "FOR" && (next.is("SHARE") || next.is("NO") || next.is("KEY")) {
				return reject(t.pos, "row locking (FOR SHARE/KEY) is not allowed")
			}
			if (t.text == "NEXT" || t.text == "PREVIOUS") && next.is("VALUE") {
				return reject(t.pos, "%s VALUE FOR changes or reads a sequence's session state", t.text)
			}
		}
		if name := t.name(); name != "" && next.punct("(") {
			if reason := dangerousFunction(name, d); reason != "" {
				return reject(t.pos, "function %s() is not allowed: %s", name, reason)
			}
		}
		if d == SQLite {
			// A PRAGMA table function needs no parentheses (FROM
			// pragma_table_list) and SQLite takes a string as a table name.
			name := t.name()
			if t.kind == kString {
				name = strings.ToLower(t.value)
			}
			if reason := pragmaFunction(name); reason != "" {
				return reject(t.pos, "%s is not allowed: %s", name, reason)
			}
		}
	}
	return nil
}
