package safety

import "strings"

// Ref is a name a SQL text mentions, as the dialect's lexer reads it.
type Ref struct {
	// Schema is the qualifier before a dot ("db" in db.f), or "".
	Schema string
	// Name is the identifier, decoded (quotes and escapes undone), in the
	// case it was written; a bare word is also given upper-cased in Word.
	Name string
	// Word is the upper-cased text of a bare (unquoted, unqualified)
	// word, "" for a quoted or qualified name: keywords are bare words.
	Word string
	// Call is set when "(" follows the name: a function call, or a
	// keyword the grammar follows with a parenthesis (IN, OVER, AS, ...).
	Call bool
}

// Refs returns every name the text mentions, in order, in every reading
// of it (see tokenizeReadings), and whether it uses variables or bind
// parameters. It checks nothing but that the text can be read: an engine
// that knows which names are built-in functions, stored functions and
// views decides on them (package connections does for MySQL and
// MariaDB). The text need not be one query: stored routine bodies are
// read this way too.
func Refs(sql string, d Dialect) (refs []Ref, params bool, err error) {
	readings, err := tokenizeReadings(sql, d)
	if err != nil {
		return nil, false, err
	}
	for _, toks := range readings {
		for i, t := range toks {
			if t.kind == kParam {
				params = true
				continue
			}
			if t.kind != kWord && t.kind != kQuotedID {
				continue
			}
			dotted := i > 0 && toks[i-1].punct(".")
			if i+1 < len(toks) && toks[i+1].punct(".") {
				continue // a qualifier: it is read with the name after it
			}
			r := Ref{Name: t.ident, Call: i+1 < len(toks) && toks[i+1].punct("(") && !cteColumns(toks, i+1)}
			switch {
			case dotted && i >= 2 && (toks[i-2].kind == kWord || toks[i-2].kind == kQuotedID):
				r.Schema = toks[i-2].ident
			case !dotted && t.kind == kWord:
				r.Word = strings.ToUpper(t.ident)
			}
			refs = append(refs, r)
		}
	}
	return refs, params, nil
}

// cteColumns reports whether the "(" at toks[open] opens the column list
// of a common table expression, "name (a, b) AS (": its match is followed
// by AS and "(", which a function call's never is ("f(x) AS alias").
func cteColumns(toks []token, open int) bool {
	i := matching(toks, open) // the last token when unbalanced: false below
	return i+2 < len(toks) && toks[i].punct(")") && toks[i+1].kind == kWord && toks[i+1].text == "AS" && toks[i+2].punct("(")
}
