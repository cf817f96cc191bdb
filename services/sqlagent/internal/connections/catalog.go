package connections

import (
	"context"
	"strings"

	"github.com/agentmesh/agentmesh/libs/utf8x"
)

// table is one table or view of a connection's catalog, as the model is
// shown it.
type table struct {
	// name is the table's name, qualified by its schema outside the
	// connection's default one ("shop.orders").
	name    string
	comment string
	columns []tableColumn
	// links are the tables this one's foreign keys reference and the
	// tables whose foreign keys reference it: its neighbours one hop away.
	links []string
}

type tableColumn struct{ name, typ, comment string }

// catalogQueries are a dialect's catalog queries: columns gives (table,
// column, type, column comment, table comment) rows in display order,
// foreignKeys (table, referenced table) rows, with table names written as
// columns writes them.
type catalogQueries struct{ columns, foreignKeys string }

var catalogs = map[string]catalogQueries{
	// SQLite keeps no comments.
	SQLite: {
		columns: `SELECT m.name, p.name, p.type, '', ''
		FROM sqlite_master m JOIN pragma_table_info(m.name) p
		WHERE m.type IN ('table', 'view') AND m.name NOT LIKE 'sqlite\_%' ESCAPE '\'
		ORDER BY m.name, p.cid`,
		foreignKeys: `SELECT m.name, f."table"
		FROM sqlite_master m JOIN pragma_foreign_key_list(m.name) f
		WHERE m.type = 'table'`,
	},
	// Comments are COMMENT ON's (obj_description, col_description). Foreign
	// tables are left out: a read of one is refused (refuseRelations).
	Postgres: {
		columns: `SELECT CASE WHEN c.table_schema = 'public' THEN c.table_name ELSE c.table_schema || '.' || c.table_name END,
			c.column_name, c.data_type,
			COALESCE(col_description((quote_ident(c.table_schema) || '.' || quote_ident(c.table_name))::regclass, c.ordinal_position::int), ''),
			COALESCE(obj_description((quote_ident(c.table_schema) || '.' || quote_ident(c.table_name))::regclass, 'pg_class'), '')
		FROM information_schema.columns c
		WHERE c.table_schema NOT IN ('pg_catalog', 'information_schema') AND c.table_schema NOT LIKE 'pg\_%'
			AND (c.table_schema, c.table_name) NOT IN (SELECT foreign_table_schema, foreign_table_name FROM information_schema.foreign_tables)
		ORDER BY c.table_schema, c.table_name, c.ordinal_position`,
		foreignKeys: `SELECT CASE WHEN sn.nspname = 'public' THEN s.relname ELSE sn.nspname || '.' || s.relname END,
			CASE WHEN dn.nspname = 'public' THEN d.relname ELSE dn.nspname || '.' || d.relname END
		FROM pg_constraint k
		JOIN pg_class s ON s.oid = k.conrelid JOIN pg_namespace sn ON sn.oid = s.relnamespace
		JOIN pg_class d ON d.oid = k.confrelid JOIN pg_namespace dn ON dn.oid = d.relnamespace
		WHERE k.contype = 'f'`,
	},
	// Tables of the connection's database unqualified, others qualified;
	// the system schemas and tables of remoteEngines (a read of one is
	// refused) left out. A view's TABLE_COMMENT is the word VIEW, not a
	// comment.
	MySQL: {
		columns: `SELECT CASE WHEN c.TABLE_SCHEMA = DATABASE() THEN c.TABLE_NAME ELSE CONCAT(c.TABLE_SCHEMA, '.', c.TABLE_NAME) END,
			c.COLUMN_NAME, c.COLUMN_TYPE, c.COLUMN_COMMENT,
			CASE WHEN t.TABLE_TYPE = 'VIEW' THEN '' ELSE COALESCE(t.TABLE_COMMENT, '') END
		FROM information_schema.COLUMNS c
		JOIN information_schema.TABLES t ON t.TABLE_SCHEMA = c.TABLE_SCHEMA AND t.TABLE_NAME = c.TABLE_NAME
		WHERE c.TABLE_SCHEMA NOT IN ('mysql', 'information_schema', 'performance_schema', 'sys')
			AND COALESCE(t.ENGINE, '') NOT IN (` + sqlStrings(remoteEngines) + `)
		ORDER BY c.TABLE_SCHEMA = DATABASE() DESC, c.TABLE_SCHEMA, c.TABLE_NAME, c.ORDINAL_POSITION`,
		foreignKeys: `SELECT CASE WHEN TABLE_SCHEMA = DATABASE() THEN TABLE_NAME ELSE CONCAT(TABLE_SCHEMA, '.', TABLE_NAME) END,
			CASE WHEN REFERENCED_TABLE_SCHEMA = DATABASE() THEN REFERENCED_TABLE_NAME ELSE CONCAT(REFERENCED_TABLE_SCHEMA, '.', REFERENCED_TABLE_NAME) END
		FROM information_schema.KEY_COLUMN_USAGE
		WHERE REFERENCED_TABLE_NAME IS NOT NULL
			AND TABLE_SCHEMA NOT IN ('mysql', 'information_schema', 'performance_schema', 'sys')`,
	},
}

// catalog reads the tables, columns, comments and foreign keys of c.
func (c *conn) catalog(ctx context.Context) ([]*table, error) {
	q := catalogs[c.spec.Dialect]
	rows, err := c.read.QueryContext(c.driverCtx(ctx), q.columns)
	if err != nil {
		return nil, dbError(err)
	}
	defer rows.Close()
	var tables []*table
	byName := map[string]*table{}
	for rows.Next() {
		var name, col, typ, colComment, comment string
		if err := rows.Scan(&name, &col, &typ, &colComment, &comment); err != nil {
			return nil, dbError(err)
		}
		// The model's prompt and the tables shown are protobuf strings.
		name, col, typ, colComment, comment = utf8x.Valid(name), utf8x.Valid(col), utf8x.Valid(typ), utf8x.Valid(colComment), utf8x.Valid(comment)
		t := byName[name]
		if t == nil {
			t = &table{name: name, comment: comment}
			byName[name] = t
			tables = append(tables, t)
		}
		t.columns = append(t.columns, tableColumn{name: col, typ: typ, comment: colComment})
	}
	if err := rows.Err(); err != nil {
		return nil, dbError(err)
	}
	fks, err := c.read.QueryContext(c.driverCtx(ctx), q.foreignKeys)
	if err != nil {
		return nil, dbError(err)
	}
	defer fks.Close()
	for fks.Next() {
		var from, to string
		if err := fks.Scan(&from, &to); err != nil {
			return nil, dbError(err)
		}
		from, to = utf8x.Valid(from), utf8x.Valid(to)
		src, dst := byName[from], byName[to]
		if src == nil || dst == nil || src == dst {
			continue // a table the reader cannot see, or a self-reference
		}
		src.links = appendNew(src.links, to)
		dst.links = appendNew(dst.links, from)
	}
	if err := fks.Err(); err != nil {
		return nil, dbError(err)
	}
	return tables, nil
}

func appendNew(list []string, s string) []string {
	for _, x := range list {
		if x == s {
			return list
		}
	}
	return append(list, s)
}

// maxCommentChars caps one comment in the prompt: a comment is a hint, not
// documentation to copy in whole.
const maxCommentChars = 200

// line is t as one prompt line: "table(col TYPE, ...)", a column's comment
// after it in /* */, the table's after the line as -- comment.
func (t *table) line() string {
	var b strings.Builder
	b.WriteString(t.name + "(")
	for i, col := range t.columns {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(strings.TrimSpace(col.name + " " + col.typ))
		if c := oneLine(col.comment); c != "" {
			b.WriteString(" /* " + strings.ReplaceAll(c, "*/", "* /") + " */")
		}
	}
	b.WriteString(")")
	if c := oneLine(t.comment); c != "" {
		b.WriteString(" -- " + c)
	}
	return b.String() + "\n"
}

// oneLine is a comment on one line, cut at maxCommentChars.
func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > maxCommentChars {
		s = string(r[:maxCommentChars]) + "…"
	}
	return s
}

// sqlStrings renders ss as SQL string literals separated by commas (for
// IN lists of constants that hold no quote).
func sqlStrings(ss []string) string {
	return "'" + strings.Join(ss, "', '") + "'"
}
