package safety

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/agentmesh/agentmesh/libs/utf8x"
)

// Dialect selects the lexical rules that differ between databases.
type Dialect string

// Dialects the checker knows.
const (
	// SQLite: "ident", [ident] and `ident` quote identifiers, X'..' is a
	// blob, ?, ?N, :name, @name and $name are bind parameters, block
	// comments do not nest.
	SQLite Dialect = "sqlite"
	// Postgres: "ident" and U&"ident" [UESCAPE 'c'] quote identifiers;
	// '..', E'..' (backslash escapes), U&'..', B'..', X'..', N'..' and
	// $tag$..$tag$ are strings; block comments nest; $N is a parameter;
	// unquoted names fold to lower case and are cut at 63 bytes.
	Postgres Dialect = "postgres"
	// MySQL: `ident` quotes identifiers, '..' and ".." are strings with
	// backslash escapes (".." is an identifier under ANSI_QUOTES), # and
	// "-- " start line comments, /*! .. */ holds code, @var and @@var are
	// variables and ? a parameter. MariaDB and MySQL connections use it;
	// their engine-side check (package connections) reads the names a
	// statement mentions through Refs.
	MySQL Dialect = "mysql"
)

// kind is the lexical class of a token.
type kind int

const (
	kWord     kind = iota // bare identifier or keyword
	kQuotedID             // quoted identifier in any of the dialect's forms
	kString               // string literal of any form
	kNumber               // numeric literal
	kParam                // bind parameter or variable: ?, ?1, :name, @name, $name, $1, @@x
	kPunct                // operator or punctuation
)

// token is one lexical unit. Comments and white space produce no tokens.
type token struct {
	kind kind
	// text is the upper-cased word for bare words (to match keywords), the
	// raw text for numbers, parameters and punctuation, and "" otherwise.
	text string
	// ident is the identifier a kWord or kQuotedID names, decoded: quotes
	// and escapes undone, Unicode escapes applied, folded and cut the way
	// the dialect does it. For MySQL ".." tokens (a string or an
	// identifier, depending on sql_mode) it is the decoded content.
	ident string
	// value is the decoded content of a kString.
	value string
	// uescape marks a PostgreSQL U&"..." or U&'...' token whose escapes
	// wait for a possible UESCAPE clause; raw holds its undecoded body.
	uescape bool
	raw     string
	pos     int
}

// is reports whether t is the bare keyword kw (upper case).
func (t token) is(kw string) bool { return t.kind == kWord && t.text == kw }

// punct reports whether t is the punctuation p.
func (t token) punct(p string) bool { return t.kind == kPunct && t.text == p }

// name returns the lower-cased identifier of a word or quoted identifier
// (and of a MySQL ".." token), or "". Comparisons ignore case on purpose:
// refusing "PG_SLEEP" along with pg_sleep costs nothing.
func (t token) name() string {
	if t.kind == kWord || t.kind == kQuotedID {
		return strings.ToLower(t.ident)
	}
	return ""
}

// pgMaxIdent is NAMEDATALEN-1: PostgreSQL cuts longer identifiers.
const pgMaxIdent = 63

// tokenize splits sql into tokens the way dialect d's own lexer does. It
// fails on anything it cannot read with certainty: unterminated strings,
// identifiers or comments, invalid escapes, a string whose end depends on a
// server setting (a backslash before a quote in a PostgreSQL '..' or a
// MySQL string), nested comments where the dialect does not nest them,
// invalid UTF-8 and control characters.
func tokenize(sql string, d Dialect) ([]token, error) {
	readings, err := tokenizeReadings(sql, d)
	if err != nil {
		return nil, err
	}
	return readings[0], nil
}

// tokenizeReadings is tokenize returning every way the server may read
// sql. There is one reading, except for MySQL text with a versioned
// executable comment (/*!50700 ...*/): a server older than the version
// reads it as a comment, a newer one as code, so both readings are
// returned and a check must pass on each.
func tokenizeReadings(sql string, d Dialect) ([][]token, error) {
	switch d {
	case SQLite, Postgres, MySQL:
	default:
		return nil, fmt.Errorf("unknown SQL dialect %q", d)
	}
	if !utf8.ValidString(sql) {
		return nil, fmt.Errorf("the SQL is not valid UTF-8")
	}
	lx, err := lex(sql, d, false)
	if err != nil {
		return nil, err
	}
	if d == Postgres {
		toks, err := applyUEscape(lx.out)
		if err != nil {
			return nil, err
		}
		return [][]token{toks}, nil
	}
	readings := [][]token{lx.out}
	if lx.sawGated {
		old, err := lex(sql, d, true)
		if err != nil {
			return nil, err
		}
		readings = append(readings, old.out)
	}
	return readings, nil
}

// lex runs the lexer over sql; gatedAsComment reads versioned MySQL
// executable comments as comments.
func lex(sql string, d Dialect, gatedAsComment bool) (*lexer, error) {
	lx := &lexer{src: sql, d: d, gatedAsComment: gatedAsComment}
	for lx.i < len(lx.src) {
		if err := lx.next(); err != nil {
			return nil, err
		}
		if lx.inExec && lx.i > lx.execEnd {
			// A string, quoted name or comment inside the executable
			// comment ran past its first */: a server that reads the
			// comment as a comment (its version gate, or a plain /*)
			// ends it there and reads what follows as code.
			return nil, fmt.Errorf("the /*! comment at offset %d ends inside a string, name or comment; its reading depends on the server", lx.execPos)
		}
	}
	if lx.inExec {
		return nil, fmt.Errorf("unterminated /*! comment at offset %d", lx.execPos)
	}
	return lx, nil
}

// lexer holds the state of one tokenize call.
type lexer struct {
	src string
	d   Dialect
	i   int
	out []token
	// inExec is set inside a MySQL /*! ... */ comment, whose content is
	// code; execEnd is the offset of its first */, where it must end.
	inExec  bool
	execPos int
	execEnd int
	// gatedAsComment reads /*!NNNNN ... */ (a version gate) as a comment;
	// sawGated records that the text has one.
	gatedAsComment, sawGated bool
}

func (lx *lexer) peek(k int) byte {
	if lx.i+k < len(lx.src) {
		return lx.src[lx.i+k]
	}
	return 0
}

func (lx *lexer) emit(t token) { lx.out = append(lx.out, t) }

// next reads one token, comment or run of white space at lx.i.
func (lx *lexer) next() error {
	c, d, start := lx.src[lx.i], lx.d, lx.i
	switch {
	case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f':
		lx.i++
	case c == '-' && lx.peek(1) == '-' && (d != MySQL || mysqlDashComment(lx.peek(2))):
		lx.lineComment()
	case c == '#' && d == MySQL:
		lx.lineComment()
	case c == '/' && lx.peek(1) == '*':
		return lx.blockComment()
	case c == '*' && lx.peek(1) == '/' && lx.inExec:
		lx.inExec = false
		lx.i += 2
	case c == ';' && lx.inExec:
		return fmt.Errorf("a semicolon inside the /*! comment at offset %d", lx.execPos)
	case c == '\'':
		return lx.plainString(start, lx.i)
	case c == '"':
		if d == MySQL {
			return lx.mysqlQuoted(start, '"', kQuotedID)
		}
		return lx.quotedIdent(start, lx.i, '"')
	case c == '`' && d != Postgres:
		return lx.quotedIdent(start, lx.i, '`')
	case c == '[' && d == SQLite:
		end := strings.IndexByte(lx.src[lx.i+1:], ']')
		if end < 0 {
			return fmt.Errorf("unterminated [identifier at offset %d", start)
		}
		lx.emit(token{kind: kQuotedID, ident: lx.src[lx.i+1 : lx.i+1+end], pos: start})
		lx.i += end + 2
	case d == Postgres && (c == 'e' || c == 'E') && lx.peek(1) == '\'':
		return lx.escapeString(start)
	case d == Postgres && (c == 'u' || c == 'U') && lx.peek(1) == '&' && (lx.peek(2) == '\'' || lx.peek(2) == '"'):
		return lx.unicodeQuoted(start)
	case (c == 'x' || c == 'X') && lx.peek(1) == '\'',
		d != SQLite && (c == 'b' || c == 'B' || c == 'n' || c == 'N') && lx.peek(1) == '\'':
		// Blob, bit and national literals: a prefix glued to a string.
		return lx.plainString(start, lx.i+1)
	case d == Postgres && c == '$':
		return lx.dollar(start)
	case isDigit(c) || (c == '.' && isDigit(lx.peek(1))):
		lx.number(start)
	case lx.identStart(start):
		lx.word(start)
	case c == '?' && d != Postgres, c == '@' && d != Postgres, c == '$' && d == SQLite,
		c == ':' && d == SQLite && lx.identStart(lx.i+1):
		return lx.param(start)
	case c < 0x20 || c == 0x7f:
		return fmt.Errorf("unexpected control character %q at offset %d", c, start)
	default:
		lx.operator(start)
	}
	return nil
}

// mysqlDashComment reports whether "--" followed by c starts a MySQL
// comment: MySQL wants white space or a control character after the dashes
// (or the end of the text), else "--" is two minus signs.
func mysqlDashComment(c byte) bool { return c == 0 || c <= ' ' }

// lineComment skips to the end of the line. PostgreSQL ends a "--" comment
// at \n or \r; SQLite and MySQL only at \n.
func (lx *lexer) lineComment() {
	for lx.i < len(lx.src) {
		c := lx.src[lx.i]
		if c == '\n' || (c == '\r' && lx.d == Postgres) {
			return
		}
		lx.i++
	}
}

// blockComment skips a /* comment: nested in PostgreSQL, ended by the first
// */ in SQLite and MySQL (a nested opening is refused in MySQL, whose rule
// for it changed between versions). A MySQL /*! or /*M! comment holds
// code: its optional version number is skipped and what follows is
// tokenized until the closing */, which must be its first */ (see lex);
// with a version number the comment is read both ways (see
// tokenizeReadings).
func (lx *lexer) blockComment() error {
	start := lx.i
	if lx.d == MySQL && (lx.peek(2) == '!' || (lx.peek(2) == 'M' && lx.peek(3) == '!')) {
		if lx.inExec {
			return fmt.Errorf("nested /*! comment at offset %d", start)
		}
		end := strings.Index(lx.src[start+2:], "*/")
		if end < 0 {
			return fmt.Errorf("unterminated /*! comment at offset %d", start)
		}
		lx.i += 3
		if lx.src[start+2] == 'M' {
			lx.i++
		}
		digits := lx.i
		for lx.i < len(lx.src) && isDigit(lx.src[lx.i]) {
			lx.i++
		}
		// MySQL reads a five-digit version, MariaDB five or six; with
		// any other count the two disagree on where the code starts.
		switch n := lx.i - digits; {
		case n == 0:
		case n == 5 || n == 6:
			lx.sawGated = true
			if lx.gatedAsComment {
				lx.i = start
				return lx.plainComment(start)
			}
		default:
			return fmt.Errorf("the /*! comment at offset %d has a %d-digit version number; MySQL reads 5 digits, MariaDB 5 or 6", start, n)
		}
		lx.inExec, lx.execPos, lx.execEnd = true, start, start+2+end
		return nil
	}
	return lx.plainComment(start)
}

// plainComment skips the /* comment at start: nested in PostgreSQL,
// ended by the first */ elsewhere.
func (lx *lexer) plainComment(start int) error {
	if lx.d == Postgres {
		depth := 0
		for j := start; j+1 < len(lx.src); j++ {
			switch {
			case lx.src[j] == '/' && lx.src[j+1] == '*':
				depth++
				j++
			case lx.src[j] == '*' && lx.src[j+1] == '/':
				depth--
				j++
				if depth == 0 {
					lx.i = j + 1
					return nil
				}
			}
		}
		return fmt.Errorf("unterminated /* comment at offset %d", start)
	}
	end := strings.Index(lx.src[start+2:], "*/")
	if end < 0 {
		return fmt.Errorf("unterminated /* comment at offset %d", start)
	}
	if lx.d == MySQL && strings.Contains(lx.src[start+2:start+2+end], "/*") {
		// MySQL's nesting rules changed between versions; do not guess.
		return fmt.Errorf("nested /* comment at offset %d", start)
	}
	lx.i = start + 2 + end + 2
	return nil
}

// plainString reads a '...' string whose opening quote is at src[q] (after
// a prefix such as X or N when q > start). A doubled quote stands for one.
// PostgreSQL's '...' has no backslash escapes (standard_conforming_strings
// on) and MySQL's has them (unless NO_BACKSLASH_ESCAPES); both refuse a
// backslash before a quote, where the two readings of the setting end the
// string at different places.
func (lx *lexer) plainString(start, q int) error {
	if lx.d == MySQL {
		return lx.mysqlQuoted(start, '\'', kString)
	}
	var b strings.Builder
	for j := q + 1; j < len(lx.src); j++ {
		switch c := lx.src[j]; {
		case c == '\'' && j+1 < len(lx.src) && lx.src[j+1] == '\'':
			b.WriteByte('\'')
			j++
		case c == '\'':
			lx.emit(token{kind: kString, value: b.String(), pos: start})
			lx.i = j + 1
			return nil
		case c == '\\' && lx.d == Postgres && j+1 < len(lx.src) && lx.src[j+1] == '\'':
			return fmt.Errorf("ambiguous backslash before a quote in the string at offset %d (its end depends on standard_conforming_strings); write it as E'...' or double the quote", start)
		default:
			b.WriteByte(c)
		}
	}
	return fmt.Errorf("unterminated ' string at offset %d", start)
}

// mysqlQuoted reads a MySQL '...' or "..." token: backslash escapes and
// doubled quotes. A backslash before any quote character is refused: under
// NO_BACKSLASH_ESCAPES (and for ".." identifiers under ANSI_QUOTES) the
// token would end elsewhere.
func (lx *lexer) mysqlQuoted(start int, q byte, k kind) error {
	open := lx.i
	if lx.src[open] != q { // a prefix such as X or N
		open++
	}
	var b strings.Builder
	for j := open + 1; j < len(lx.src); j++ {
		c := lx.src[j]
		switch {
		case c == '\\':
			if j+1 >= len(lx.src) {
				break
			}
			if n := lx.src[j+1]; n == '\'' || n == '"' || n == '`' {
				return fmt.Errorf("ambiguous backslash before a quote at offset %d (its meaning depends on sql_mode); double the quote instead", j)
			}
			b.WriteByte(mysqlEscape(lx.src[j+1]))
			j++
		case c == q && j+1 < len(lx.src) && lx.src[j+1] == q:
			b.WriteByte(q)
			j++
		case c == q:
			t := token{kind: k, pos: start}
			if k == kQuotedID {
				t.ident = b.String()
			} else {
				t.value = b.String()
			}
			lx.emit(t)
			lx.i = j + 1
			return nil
		default:
			b.WriteByte(c)
		}
	}
	return fmt.Errorf("unterminated %c string at offset %d", q, start)
}

func mysqlEscape(c byte) byte {
	switch c {
	case '0':
		return 0
	case 'n':
		return '\n'
	case 'r':
		return '\r'
	case 't':
		return '\t'
	case 'b':
		return '\b'
	case 'Z':
		return 26
	}
	return c
}

// quotedIdent reads an identifier quoted with q (" or `) opening at
// src[open]; a doubled quote stands for one.
func (lx *lexer) quotedIdent(start, open int, q byte) error {
	body, end, err := scanDoubled(lx.src, open, q)
	if err != nil {
		return err
	}
	if body == "" && lx.d == Postgres {
		return fmt.Errorf("zero-length quoted identifier at offset %d", start)
	}
	if lx.d == Postgres {
		body = truncateIdent(body)
	}
	lx.emit(token{kind: kQuotedID, ident: body, pos: start})
	lx.i = end
	return nil
}

// scanDoubled reads text quoted with q from src[open], where a doubled
// quote stands for one; it returns the content and the offset past the
// closing quote.
func scanDoubled(src string, open int, q byte) (string, int, error) {
	var b strings.Builder
	for j := open + 1; j < len(src); j++ {
		if src[j] != q {
			b.WriteByte(src[j])
			continue
		}
		if j+1 < len(src) && src[j+1] == q {
			b.WriteByte(q)
			j++
			continue
		}
		return b.String(), j + 1, nil
	}
	return "", 0, fmt.Errorf("unterminated %c quote at offset %d", q, open)
}

// escapeString reads a PostgreSQL E'...' string: backslash escapes and
// doubled quotes.
func (lx *lexer) escapeString(start int) error {
	var b strings.Builder
	src := lx.src
	for j := start + 2; j < len(src); j++ {
		c := src[j]
		switch {
		case c == '\'' && j+1 < len(src) && src[j+1] == '\'':
			b.WriteByte('\'')
			j++
		case c == '\'':
			lx.emit(token{kind: kString, value: b.String(), pos: start})
			lx.i = j + 1
			return nil
		case c == '\\' && j+1 < len(src):
			j = decodeBackslash(src, j, &b)
		default:
			b.WriteByte(c)
		}
	}
	return fmt.Errorf("unterminated E' string at offset %d", start)
}

// decodeBackslash decodes the E” escape at src[j] (a backslash) into b
// and returns the offset of its last byte. Only its length matters for
// where the string ends; the value is a best effort.
func decodeBackslash(src string, j int, b *strings.Builder) int {
	n := src[j+1]
	switch n {
	case 'b':
		b.WriteByte('\b')
	case 'f':
		b.WriteByte('\f')
	case 'n':
		b.WriteByte('\n')
	case 'r':
		b.WriteByte('\r')
	case 't':
		b.WriteByte('\t')
	case 'x':
		k := j + 2
		for k < len(src) && k < j+4 && isHex(src[k]) {
			k++
		}
		if k == j+2 {
			b.WriteByte('x')
			return j + 1
		}
		b.WriteByte(byte(hexVal(src[j+2 : k])))
		return k - 1
	case 'u', 'U':
		width := 4
		if n == 'U' {
			width = 8
		}
		if j+2+width <= len(src) && allHex(src[j+2:j+2+width]) {
			b.WriteRune(rune(hexVal(src[j+2 : j+2+width])))
			return j + 1 + width
		}
		b.WriteByte(n)
	default:
		if n >= '0' && n <= '7' {
			k := j + 1
			for k < len(src) && k < j+4 && src[k] >= '0' && src[k] <= '7' {
				k++
			}
			v := 0
			for _, c := range src[j+1 : k] {
				v = v*8 + int(c-'0')
			}
			b.WriteByte(byte(v))
			return k - 1
		}
		b.WriteByte(n)
	}
	return j + 1
}

// unicodeQuoted reads a PostgreSQL U&"..." identifier or U&'...' string.
// Its escapes are decoded after the whole text is read (applyUEscape),
// because a UESCAPE clause may follow and change the escape character.
func (lx *lexer) unicodeQuoted(start int) error {
	q := lx.src[start+2]
	body, end, err := scanDoubled(lx.src, start+2, q)
	if err != nil {
		return err
	}
	k := kString
	if q == '"' {
		k = kQuotedID
		if body == "" {
			return fmt.Errorf("zero-length quoted identifier at offset %d", start)
		}
	}
	lx.emit(token{kind: k, uescape: true, raw: body, pos: start})
	lx.i = end
	return nil
}

// dollar reads a PostgreSQL $tag$...$tag$ string or a $N parameter.
func (lx *lexer) dollar(start int) error {
	src := lx.src
	j := start + 1
	if j < len(src) && isDigit(src[j]) {
		for j < len(src) && isDigit(src[j]) {
			j++
		}
		lx.emit(token{kind: kParam, text: src[start:j], pos: start})
		lx.i = j
		return nil
	}
	// The tag: empty, or an identifier without '$'.
	if j < len(src) && src[j] != '$' {
		if !(isLetter(src[j]) || src[j] == '_' || src[j] >= 0x80) {
			return fmt.Errorf("unexpected $ at offset %d", start)
		}
		for j < len(src) && (isLetter(src[j]) || isDigit(src[j]) || src[j] == '_' || src[j] >= 0x80) {
			j++
		}
	}
	if j >= len(src) || src[j] != '$' {
		return fmt.Errorf("unexpected $ at offset %d", start)
	}
	tag := src[start : j+1]
	end := strings.Index(src[j+1:], tag)
	if end < 0 {
		return fmt.Errorf("unterminated %s quote at offset %d", tag, start)
	}
	lx.emit(token{kind: kString, value: src[j+1 : j+1+end], pos: start})
	lx.i = j + 1 + end + len(tag)
	return nil
}

// number reads a numeric literal: digits, a fraction, an exponent, and in
// SQLite and MySQL 0x hex. What follows it is a separate token, as in
// PostgreSQL before 16 ("1from" is 1 FROM); SQLite rejects such text and
// MySQL reads it as an identifier, which number hands to word.
func (lx *lexer) number(start int) {
	src, j := lx.src, lx.i
	if lx.d != Postgres && src[j] == '0' && j+2 < len(src) && (src[j+1] == 'x' || src[j+1] == 'X') && isHex(src[j+2]) {
		j += 2
		for j < len(src) && isHex(src[j]) {
			j++
		}
	} else {
		for j < len(src) && isDigit(src[j]) {
			j++
		}
		if j < len(src) && src[j] == '.' && !(j+1 < len(src) && src[j+1] == '.') {
			j++
			for j < len(src) && isDigit(src[j]) {
				j++
			}
		}
		if j < len(src) && (src[j] == 'e' || src[j] == 'E') {
			k := j + 1
			if k < len(src) && (src[k] == '+' || src[k] == '-') {
				k++
			}
			if k < len(src) && isDigit(src[k]) {
				for k < len(src) && isDigit(src[k]) {
					k++
				}
				j = k
			}
		}
	}
	if lx.d == MySQL && j < len(src) && lx.identPart(j) && isDigit(src[start]) {
		// MySQL identifiers may start with a digit: 1abc is a name.
		lx.word(start)
		return
	}
	lx.emit(token{kind: kNumber, text: src[start:j], pos: start})
	lx.i = j
}

// identStart reports whether an unquoted identifier can start at src[j]:
// an ASCII letter, '_' or any non-ASCII character (PostgreSQL, SQLite and
// MySQL all take every byte >= 0x80 as a letter).
func (lx *lexer) identStart(j int) bool {
	if j >= len(lx.src) {
		return false
	}
	c := lx.src[j]
	return isLetter(c) || c == '_' || c >= 0x80
}

// identPart reports whether src[j] continues an unquoted identifier.
func (lx *lexer) identPart(j int) bool {
	c := lx.src[j]
	return isLetter(c) || isDigit(c) || c == '_' || c == '$' || c >= 0x80
}

// word reads an unquoted identifier or keyword. PostgreSQL folds ASCII
// letters to lower case and cuts the name at 63 bytes; SQLite and MySQL
// compare names without case, which token.name does.
func (lx *lexer) word(start int) {
	j := start
	for j < len(lx.src) && lx.identPart(j) {
		j++
	}
	raw := lx.src[start:j]
	ident := raw
	if lx.d == Postgres {
		ident = truncateIdent(asciiLower(raw))
	}
	lx.emit(token{kind: kWord, text: strings.ToUpper(raw), ident: ident, pos: start})
	lx.i = j
}

// param reads a bind parameter or (MySQL) a variable.
func (lx *lexer) param(start int) error {
	src, j := lx.src, lx.i+1
	if lx.d == MySQL && src[start] == '@' {
		if j < len(src) && src[j] == '@' {
			j++
		}
		if j < len(src) && (src[j] == '\'' || src[j] == '"' || src[j] == '`') {
			_, end, err := scanDoubled(src, j, src[j])
			if err != nil {
				return err
			}
			j = end
		}
	}
	for j < len(src) && (lx.identPart(j) || (lx.d == MySQL && src[j] == '.')) {
		j++
	}
	lx.emit(token{kind: kParam, text: src[start:j], pos: start})
	lx.i = j
	return nil
}

// pgOpChars are the characters PostgreSQL operators are made of.
const pgOpChars = "~!@#^&|`?+-*/%<>="

// operator reads punctuation or an operator.
func (lx *lexer) operator(start int) {
	src := lx.src
	if lx.d == Postgres && strings.IndexByte(pgOpChars, src[start]) >= 0 {
		// The longest run of operator characters, ended early by a
		// comment start; a trailing + or - is dropped unless the operator
		// holds one of ~!@#^&|`?% (PostgreSQL's rule, so "=-1" is = -1).
		j := start
		for j < len(src) && strings.IndexByte(pgOpChars, src[j]) >= 0 {
			if j > start && ((src[j] == '-' && j+1 < len(src) && src[j+1] == '-') || (src[j] == '/' && j+1 < len(src) && src[j+1] == '*')) {
				break
			}
			j++
		}
		op := src[start:j]
		if len(op) > 1 && !strings.ContainsAny(op, "~!@#^&|`?%") {
			for len(op) > 1 && (op[len(op)-1] == '+' || op[len(op)-1] == '-') {
				op = op[:len(op)-1]
			}
		}
		lx.emit(token{kind: kPunct, text: op, pos: start})
		lx.i = start + len(op)
		return
	}
	for _, op := range []string{"<=>", "->>", "::", ":=", "=>", "..", "||", "&&", "<=", ">=", "<>", "!=", "==", "<<", ">>", "->"} {
		if strings.HasPrefix(src[start:], op) {
			lx.emit(token{kind: kPunct, text: op, pos: start})
			lx.i = start + len(op)
			return
		}
	}
	_, size := utf8.DecodeRuneInString(src[start:])
	lx.emit(token{kind: kPunct, text: src[start : start+size], pos: start})
	lx.i = start + size
}

// applyUEscape decodes the PostgreSQL U& tokens in toks, each with the
// escape character of the UESCAPE clause that follows it (PostgreSQL's
// grammar reads the clause after the literal, comments allowed between),
// or '\' without one; the clause's tokens are dropped.
func applyUEscape(toks []token) ([]token, error) {
	out := toks[:0]
	for i := 0; i < len(toks); i++ {
		t := toks[i]
		if !t.uescape {
			out = append(out, t)
			continue
		}
		esc := byte('\\')
		if i+1 < len(toks) && toks[i+1].is("UESCAPE") {
			if i+2 >= len(toks) || toks[i+2].kind != kString || toks[i+2].uescape {
				return nil, fmt.Errorf("UESCAPE at offset %d must be followed by a simple string literal", toks[i+1].pos)
			}
			e := toks[i+2].value
			if len(e) != 1 || isHex(e[0]) || strings.ContainsAny(e, "+'\" \t\n\r\f") {
				return nil, fmt.Errorf("invalid Unicode escape character %q at offset %d", e, toks[i+2].pos)
			}
			esc = e[0]
			i += 2
		}
		decoded, err := decodeUnicodeEscapes(t.raw, esc)
		if err != nil {
			return nil, fmt.Errorf("%v in U& text at offset %d", err, t.pos)
		}
		t.uescape, t.raw = false, ""
		if t.kind == kQuotedID {
			t.ident = truncateIdent(decoded)
		} else {
			t.value = decoded
		}
		out = append(out, t)
	}
	return out, nil
}

// decodeUnicodeEscapes applies PostgreSQL's U& escapes with escape
// character esc: esc esc is esc itself, esc XXXX and esc +XXXXXX are code
// points (a UTF-16 surrogate pair may be written as two escapes).
func decodeUnicodeEscapes(s string, esc byte) (string, error) {
	var b strings.Builder
	pendingHigh := rune(0)
	for j := 0; j < len(s); j++ {
		if s[j] != esc {
			if pendingHigh != 0 {
				return "", fmt.Errorf("invalid Unicode surrogate pair")
			}
			b.WriteByte(s[j])
			continue
		}
		var hex string
		switch {
		case j+1 < len(s) && s[j+1] == esc:
			if pendingHigh != 0 {
				return "", fmt.Errorf("invalid Unicode surrogate pair")
			}
			b.WriteByte(esc)
			j++
			continue
		case j+7 < len(s) && s[j+1] == '+' && allHex(s[j+2:j+8]):
			hex = s[j+2 : j+8]
			j += 7
		case j+4 < len(s) && allHex(s[j+1:j+5]):
			hex = s[j+1 : j+5]
			j += 4
		default:
			return "", fmt.Errorf("invalid Unicode escape")
		}
		r := rune(hexVal(hex))
		switch {
		case r >= 0xD800 && r <= 0xDBFF:
			if pendingHigh != 0 {
				return "", fmt.Errorf("invalid Unicode surrogate pair")
			}
			pendingHigh = r
			continue
		case r >= 0xDC00 && r <= 0xDFFF:
			if pendingHigh == 0 {
				return "", fmt.Errorf("invalid Unicode surrogate pair")
			}
			r = 0x10000 + (pendingHigh-0xD800)<<10 + (r - 0xDC00)
			pendingHigh = 0
		case pendingHigh != 0:
			return "", fmt.Errorf("invalid Unicode surrogate pair")
		}
		if r == 0 || r > utf8.MaxRune {
			return "", fmt.Errorf("invalid Unicode escape value")
		}
		b.WriteRune(r)
	}
	if pendingHigh != 0 {
		return "", fmt.Errorf("invalid Unicode surrogate pair")
	}
	return b.String(), nil
}

// truncateIdent cuts a PostgreSQL identifier to 63 bytes at a character
// boundary, as the server does.
func truncateIdent(s string) string {
	if len(s) <= pgMaxIdent {
		return s
	}
	return utf8x.Prefix(s, pgMaxIdent)
}

// asciiLower folds A-Z only, as PostgreSQL folds unquoted names in UTF-8.
func asciiLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

func isDigit(c byte) bool  { return c >= '0' && c <= '9' }
func isLetter(c byte) bool { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') }
func isHex(c byte) bool    { return isDigit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F') }

func allHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if !isHex(s[i]) {
			return false
		}
	}
	return s != ""
}

func hexVal(s string) int {
	v := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case isDigit(c):
			v = v*16 + int(c-'0')
		case c >= 'a' && c <= 'f':
			v = v*16 + int(c-'a'+10)
		default:
			v = v*16 + int(c-'A'+10)
		}
	}
	return v
}
