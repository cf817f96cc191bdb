package safety

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Dialect selects the lexical rules that differ between databases.
type Dialect string

// Dialects the checker knows.
const (
	// SQLite accepts [brackets] and `backticks` as identifier quotes and
	// $name as a bind parameter.
	SQLite Dialect = "sqlite"
	// Postgres accepts E'...' escape strings and $tag$...$tag$ dollar quoting.
	Postgres Dialect = "postgres"
)

// kind is the lexical class of a token.
type kind int

const (
	kWord     kind = iota // bare identifier or keyword
	kQuotedID             // "ident", [ident], `ident`
	kString               // string literal of any form
	kNumber               // numeric literal
	kParam                // bind parameter: ?, ?1, :name, @name, $name, $1
	kPunct                // operator or punctuation
)

// token is one lexical unit. Comments and white space produce no tokens.
type token struct {
	kind kind
	// text is the raw text for punctuation and numbers, the upper-cased
	// word for bare words, and the unquoted, lower-cased name for quoted
	// identifiers (so a quoted function name is checked like a bare one).
	text string
	pos  int
}

// is reports whether t is the bare keyword kw (upper case).
func (t token) is(kw string) bool { return t.kind == kWord && t.text == kw }

// punct reports whether t is the punctuation p.
func (t token) punct(p string) bool { return t.kind == kPunct && t.text == p }

// tokenize splits sql into tokens. It fails on anything it cannot read with
// certainty: unterminated strings, identifiers or comments, nested block
// comments (SQLite ends a comment at the first "*/", PostgreSQL nests them,
// so the two would disagree on what is code), and control characters.
func tokenize(sql string, d Dialect) ([]token, error) {
	var out []token
	i := 0
	n := len(sql)
	for i < n {
		c := sql[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v':
			i++
		case c == '-' && i+1 < n && sql[i+1] == '-':
			for i < n && sql[i] != '\n' {
				i++
			}
		case c == '/' && i+1 < n && sql[i+1] == '*':
			end := strings.Index(sql[i+2:], "*/")
			if end < 0 {
				return nil, fmt.Errorf("unterminated /* comment at offset %d", i)
			}
			if strings.Contains(sql[i+2:i+2+end], "/*") {
				return nil, fmt.Errorf("nested /* comment at offset %d", i)
			}
			i += 2 + end + 2
		case c == '\'':
			j, err := scanQuoted(sql, i, '\'', false)
			if err != nil {
				return nil, err
			}
			out = append(out, token{kind: kString, text: "'", pos: i})
			i = j
		case (c == 'e' || c == 'E') && i+1 < n && sql[i+1] == '\'' && d == Postgres:
			j, err := scanQuoted(sql, i+1, '\'', true)
			if err != nil {
				return nil, err
			}
			out = append(out, token{kind: kString, text: "'", pos: i})
			i = j
		case (c == 'x' || c == 'X' || c == 'b' || c == 'B' || c == 'n' || c == 'N' || c == 'u' || c == 'U') && i+1 < n && sql[i+1] == '\'':
			// Blob, bit, national and unicode literals: a prefix glued to a
			// plain string.
			j, err := scanQuoted(sql, i+1, '\'', false)
			if err != nil {
				return nil, err
			}
			out = append(out, token{kind: kString, text: "'", pos: i})
			i = j
		case c == '"':
			j, err := scanQuoted(sql, i, '"', false)
			if err != nil {
				return nil, err
			}
			out = append(out, token{kind: kQuotedID, text: unquote(sql[i+1:j-1], '"'), pos: i})
			i = j
		case c == '`' && d == SQLite:
			j, err := scanQuoted(sql, i, '`', false)
			if err != nil {
				return nil, err
			}
			out = append(out, token{kind: kQuotedID, text: unquote(sql[i+1:j-1], '`'), pos: i})
			i = j
		case c == '[' && d == SQLite:
			end := strings.IndexByte(sql[i+1:], ']')
			if end < 0 {
				return nil, fmt.Errorf("unterminated [identifier at offset %d", i)
			}
			out = append(out, token{kind: kQuotedID, text: strings.ToLower(sql[i+1 : i+1+end]), pos: i})
			i += end + 2
		case c == '$' && d == Postgres && i+1 < n && (sql[i+1] == '$' || isIdentStart(rune(sql[i+1]))):
			// $tag$ ... $tag$ dollar quoting; $1 is handled below as a parameter.
			tagEnd := strings.IndexByte(sql[i+1:], '$')
			if tagEnd < 0 {
				return nil, fmt.Errorf("unterminated $ quote at offset %d", i)
			}
			tag := sql[i : i+1+tagEnd+1]
			for _, r := range tag[1 : len(tag)-1] {
				if !isIdentPart(r) {
					return nil, fmt.Errorf("invalid $ quote tag at offset %d", i)
				}
			}
			end := strings.Index(sql[i+len(tag):], tag)
			if end < 0 {
				return nil, fmt.Errorf("unterminated %s quote at offset %d", tag, i)
			}
			out = append(out, token{kind: kString, text: "'", pos: i})
			i += len(tag) + end + len(tag)
		case c == '?' || c == '@' || c == '$' || (c == ':' && i+1 < n && isIdentStart(rune(sql[i+1])) && d == SQLite):
			j := i + 1
			for j < n && (isIdentPart(rune(sql[j])) || sql[j] == '$') {
				j++
			}
			if c == '?' && d == Postgres && j == i+1 {
				// PostgreSQL's jsonb ? operator.
				out = append(out, token{kind: kPunct, text: "?", pos: i})
				i = j
				continue
			}
			if c == '@' && d == Postgres {
				// PostgreSQL operators such as @>, @@ and @ (absolute value).
				j = i + 1
				for j < n && strings.IndexByte("@>-", sql[j]) >= 0 {
					j++
				}
				out = append(out, token{kind: kPunct, text: sql[i:j], pos: i})
				i = j
				continue
			}
			out = append(out, token{kind: kParam, text: sql[i:j], pos: i})
			i = j
		case c >= '0' && c <= '9' || (c == '.' && i+1 < n && sql[i+1] >= '0' && sql[i+1] <= '9'):
			j := i
			for j < n && (isIdentPart(rune(sql[j])) || sql[j] == '.' ||
				((sql[j] == '+' || sql[j] == '-') && (sql[j-1] == 'e' || sql[j-1] == 'E'))) {
				j++
			}
			out = append(out, token{kind: kNumber, text: sql[i:j], pos: i})
			i = j
		default:
			r, size := utf8.DecodeRuneInString(sql[i:])
			if r == utf8.RuneError && size <= 1 {
				return nil, fmt.Errorf("invalid UTF-8 at offset %d", i)
			}
			if isIdentStart(r) {
				j := i
				for j < n {
					r2, s2 := utf8.DecodeRuneInString(sql[j:])
					if !isIdentPart(r2) && r2 != '$' {
						break
					}
					j += s2
				}
				out = append(out, token{kind: kWord, text: strings.ToUpper(sql[i:j]), pos: i})
				i = j
				continue
			}
			if unicode.IsControl(r) || unicode.IsSpace(r) {
				return nil, fmt.Errorf("unexpected character %q at offset %d", r, i)
			}
			out = append(out, token{kind: kPunct, text: punctAt(sql, i), pos: i})
			i += len(out[len(out)-1].text)
		}
	}
	return out, nil
}

// scanQuoted returns the offset just past the quoted text opening at
// sql[start] with quote q. A doubled quote is an escaped quote; with
// backslash, a backslash escapes the next byte (PostgreSQL E'...' strings).
func scanQuoted(sql string, start int, q byte, backslash bool) (int, error) {
	for i := start + 1; i < len(sql); i++ {
		switch sql[i] {
		case '\\':
			if backslash {
				i++
			}
		case q:
			if i+1 < len(sql) && sql[i+1] == q {
				i++
				continue
			}
			return i + 1, nil
		}
	}
	return 0, fmt.Errorf("unterminated %c quote at offset %d", q, start)
}

// unquote undoes doubled quotes and lower-cases the name.
func unquote(s string, q byte) string {
	return strings.ToLower(strings.ReplaceAll(s, string([]byte{q, q}), string(q)))
}

// punctAt returns the operator starting at sql[i]: the longest of the
// multi-character operators, else one character.
func punctAt(sql string, i int) string {
	for _, op := range []string{"->>", "||", "<=", ">=", "<>", "!=", "==", "<<", ">>", "::", "->", "#>>", "#>", "~*", "!~*", "!~"} {
		if strings.HasPrefix(sql[i:], op) {
			return op
		}
	}
	_, size := utf8.DecodeRuneInString(sql[i:])
	return sql[i : i+size]
}

func isIdentStart(r rune) bool { return r == '_' || unicode.IsLetter(r) }

func isIdentPart(r rune) bool { return r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) }
