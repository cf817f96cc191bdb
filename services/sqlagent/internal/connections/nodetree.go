package connections

import (
	"strconv"
	"strings"
)

// treeRefs is what a PostgreSQL node tree (the text form of pg_node_tree:
// a view's rule, a policy, a domain constraint) refers to, by OID.
type treeRefs struct {
	funcs, ops, rels, types map[uint32]bool
	// rowLocks is set by a query with FOR UPDATE/SHARE; notSelect by a
	// query that is not a plain SELECT (a utility or data-changing one).
	rowLocks, notSelect bool
	// xmlTables counts XMLTABLE calls (TableFunc nodes but JSON_TABLE's).
	xmlTables int
}

func newTreeRefs() *treeRefs {
	return &treeRefs{funcs: map[uint32]bool{}, ops: map[uint32]bool{}, rels: map[uint32]bool{}, types: map[uint32]bool{}}
}

// Node fields that hold OIDs, by the catalog they point into. The names are
// those of PostgreSQL's outfuncs (13 to 17): function calls, aggregates,
// window functions, TABLESAMPLE handlers, the hash and negator functions of
// ScalarArrayOpExpr, RANGE window offsets; operators of expressions, row
// comparisons, ORDER BY/GROUP BY/DISTINCT and CYCLE marks; relations of
// range table entries; the types of values, columns and subscripted
// containers (for their I/O functions and domain constraints). The list
// was checked against the trees of queries using every construct in the
// SELECT reference: every field whose values were function, operator or
// type OIDs is here, the rest held positions, flags and enum values.
var (
	funcFields = map[string]bool{
		"funcid": true, "opfuncid": true, "aggfnoid": true, "winfnoid": true, "tsmhandler": true,
		"hashfuncid": true, "negfuncid": true, "startInRangeFunc": true, "endInRangeFunc": true,
	}
	opFields   = map[string]bool{"opno": true, "opnos": true, "eqop": true, "sortop": true, "cycle_mark_neop": true}
	relFields  = map[string]bool{"relid": true}
	typeFields = map[string]bool{
		"resulttype": true, "consttype": true, "vartype": true, "funcresulttype": true, "opresulttype": true,
		"aggtype": true, "wintype": true, "paramtype": true, "row_typeid": true, "array_typeid": true,
		"element_typeid": true, "minmaxtype": true, "coalescetype": true, "casetype": true, "typeId": true,
		"colTypes": true, "coltypes": true, "ctecoltypes": true, "aggargtypes": true, "cycle_mark_type": true,
		"refcontainertype": true, "refelemtype": true, "refrestype": true,
	}
)

// scan adds what the node tree text s refers to. It reads s the way the
// server's own reader does (pg_strtok): tokens are separated by white
// space and by the one-character tokens ( ) { }, and a backslash escapes
// the next character, so a name or string inside the tree is one token
// and cannot pose as a field. A field's value is every number that follows
// it up to the next field or node: one OID, or a list "(o 96 97)".
func (r *treeRefs) scan(s string) {
	toks := nodeTokens(s)
	var set map[uint32]bool
	for i, t := range toks {
		switch {
		case t == "{" || t == "}":
			set = nil
			if t == "{" && i+1 < len(toks) && toks[i+1] == "TABLEFUNC" {
				r.xmlTables++
			}
		case strings.HasPrefix(t, ":"):
			field := t[1:]
			next := ""
			if i+1 < len(toks) {
				next = toks[i+1]
			}
			switch {
			case funcFields[field]:
				set = r.funcs
			case opFields[field]:
				set = r.ops
			case relFields[field]:
				set = r.rels
			case typeFields[field]:
				set = r.types
			default:
				set = nil
			}
			switch field {
			case "rowMarks":
				r.rowLocks = r.rowLocks || next != "<>"
			case "hasForUpdate":
				r.rowLocks = r.rowLocks || next == "true"
			case "commandType":
				r.notSelect = r.notSelect || next != "1" // CMD_SELECT
			case "utilityStmt":
				r.notSelect = r.notSelect || next != "<>"
			case "hasModifyingCTE":
				r.notSelect = r.notSelect || next == "true"
			case "functype":
				// A TableFunc's kind (PostgreSQL 17): 1 is JSON_TABLE,
				// which evaluates no XPath.
				if next == "1" {
					r.xmlTables--
				}
			}
		case set != nil:
			if n, err := strconv.ParseUint(t, 10, 32); err == nil && n != 0 {
				set[uint32(n)] = true
			}
		}
	}
}

// nodeTokens splits a node tree's text as pg_strtok does.
func nodeTokens(s string) []string {
	var out []string
	for i := 0; i < len(s); {
		switch c := s[i]; c {
		case ' ', '\n', '\t':
			i++
		case '(', ')', '{', '}':
			out = append(out, s[i:i+1])
			i++
		default:
			j := i
			for j < len(s) && !strings.ContainsRune(" \n\t(){}", rune(s[j])) {
				if s[j] == '\\' && j+1 < len(s) {
					j++
				}
				j++
			}
			out = append(out, s[i:j])
			i = j
		}
	}
	return out
}
