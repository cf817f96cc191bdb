package safety

import (
	"strings"
	"testing"
)

// summary renders tokens compactly: W:word (decoded identifier), Q:quoted
// identifier, S:string value, N:number, V:parameter, P:punctuation.
func summary(toks []token) string {
	var parts []string
	for _, t := range toks {
		switch t.kind {
		case kWord:
			parts = append(parts, "W:"+t.ident)
		case kQuotedID:
			parts = append(parts, "Q:"+t.ident)
		case kString:
			parts = append(parts, "S:"+t.value)
		case kNumber:
			parts = append(parts, "N:"+t.text)
		case kParam:
			parts = append(parts, "V:"+t.text)
		default:
			parts = append(parts, "P:"+t.text)
		}
	}
	return strings.Join(parts, " ")
}

// TestTokenizeFollowsEachDialect checks the tokenizer against examples from
// each engine's manual (PostgreSQL "Lexical Structure", SQLite "SQL
// Language Expressions" and "Keywords", MySQL "Schema Object Names",
// "String Literals" and "Comments").
func TestTokenizeFollowsEachDialect(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("a", 70)
	cases := []struct {
		name, sql string
		d         Dialect
		want      string
	}{
		// PostgreSQL 4.1.1: unquoted names fold to lower case, "quoted" keep case.
		{"pg folding", `SELECT FOO, "Foo", "a""b"`, Postgres, `W:select W:foo P:, Q:Foo P:, Q:a"b`},
		{"pg unicode identifier", `U&"d\0061t\+000061"`, Postgres, "Q:data"},
		{"pg unicode identifier cyrillic", `U&"\0441\043B\043E\043D"`, Postgres, "Q:слон"},
		{"pg uescape", `U&"d!0061t!+000061" UESCAPE '!'`, Postgres, "Q:data"},
		{"pg uescape after a comment", "U&\"d!0061ta\" /* c */ UESCAPE\n-- x\n'!'", Postgres, "Q:data"},
		{"pg unicode escape of an escape", `U&"a\\b"`, Postgres, `Q:a\b`},
		{"pg surrogate pair", `U&"\D83D\DE00"`, Postgres, "Q:😀"},
		{"pg unicode function name", `SELECT U&"\0070g_sleep"(1)`, Postgres, "W:select Q:pg_sleep P:( N:1 P:)"},
		{"pg unicode string", `U&'d\0061t\+000061'`, Postgres, "S:data"},
		{"pg unicode string uescape", `U&'d!0061t!+000061' UESCAPE '!'`, Postgres, "S:data"},
		{"pg escape string", `E'\x41\'\\b\n'`, Postgres, "S:A'\\b\n"},
		{"pg escape string octal and unicode", `e'\101\u0042'`, Postgres, "S:AB"},
		{"pg doubled quote", `'Dianne''s horse'`, Postgres, "S:Dianne's horse"},
		{"pg dollar quote", `$$Dianne's horse$$`, Postgres, "S:Dianne's horse"},
		{"pg tagged dollar quote", `$SomeTag$Dianne's horse$SomeTag$`, Postgres, "S:Dianne's horse"},
		{"pg nested dollar quotes", `$function$ BEGIN RETURN ($1 ~ $q$[\t\r\n\v\\]$q$); END; $function$`, Postgres, `S: BEGIN RETURN ($1 ~ $q$[\t\r\n\v\\]$q$); END; `},
		{"pg parameter", `$1 + $23`, Postgres, "V:$1 P:+ V:$23"},
		{"pg identifier with dollar", `a$b$c`, Postgres, "W:a$b$c"},
		{"pg bit and hex strings", `B'1001' X'1FF' N'x'`, Postgres, "S:1001 S:1FF S:x"},
		{"pg nested block comment", "SELECT /* multiline comment\n * with nesting: /* nested block comment */\n */ 1", Postgres, "W:select N:1"},
		{"pg line comment ends at carriage return", "SELECT 1 -- x\rFROM t", Postgres, "W:select N:1 W:from W:t"},
		{"pg operator stops at a comment", "SELECT 1 @-- hidden\n, 2", Postgres, "W:select N:1 P:@ P:, N:2"},
		{"pg trailing minus leaves an operator", "a=-1", Postgres, "W:a P:= P:- N:1"},
		{"pg long operators", "a <-> b @@ c ?| d !~* e", Postgres, "W:a P:<-> W:b P:@@ W:c P:?| W:d P:!~* W:e"},
		{"pg cast and schema", "pg_catalog.now()::text", Postgres, "W:pg_catalog P:. W:now P:( P:) P::: W:text"},
		{"pg number then keyword", "SELECT 1from t", Postgres, "W:select N:1 W:from W:t"},
		{"pg numbers", "1.5e3 .5 4. 1e+", Postgres, "N:1.5e3 N:.5 N:4. N:1 W:e P:+"},
		{"pg identifiers are cut at 63 bytes", long, Postgres, "W:" + long[:63]},
		{"pg quoted identifiers are cut too", `"` + long + `"`, Postgres, "Q:" + long[:63]},
		{"pg non-ascii letters", "SELECT nombre_artístico", Postgres, "W:select W:nombre_artístico"},
		{"pg E is a prefix only at a word start", "ee'x'", Postgres, "W:ee S:x"},

		// SQLite: four identifier quotes, blob literals, parameter forms.
		{"sqlite quoted identifiers", "SELECT \"a\"\"b\", [c d], `e``f`", SQLite, "W:SELECT Q:a\"b P:, Q:c d P:, Q:e`f"},
		{"sqlite bracket has no escape", "[a]]", SQLite, "Q:a P:]"},
		{"sqlite blob", "X'00ff'", SQLite, "S:00ff"},
		{"sqlite parameters", "?1 ? :a @b $c", SQLite, "V:?1 V:? V::a V:@b V:$c"},
		{"sqlite block comments do not nest", "SELECT 1 /* /* */ , 2", SQLite, "W:SELECT N:1 P:, N:2"},
		{"sqlite line comment ends only at newline", "SELECT 1 -- x\r, 2\n, 3", SQLite, "W:SELECT N:1 P:, N:3"},
		{"sqlite no backslash escapes", `'a\'`, SQLite, `S:a\`},
		{"sqlite hex number", "0x1F", SQLite, "N:0x1F"},
		{"sqlite E is not a prefix", "E'x'", SQLite, "W:E S:x"},
		{"sqlite json operators", "j ->> '$.a' -> 'b'", SQLite, "W:j P:->> S:$.a P:-> S:b"},

		// MySQL: backticks, backslash escapes, comment forms, variables.
		{"mysql backticks", "SELECT `a``b`", MySQL, "W:SELECT Q:a`b"},
		{"mysql double quotes", `"a""b"`, MySQL, `Q:a"b`},
		{"mysql backslash escapes", `'a\nb\\c'`, MySQL, "S:a\nb\\c"},
		{"mysql hash comment", "SELECT 1 # x\n, 2", MySQL, "W:SELECT N:1 P:, N:2"},
		{"mysql dash comment needs a space", "SELECT 1 --1", MySQL, "W:SELECT N:1 P:- P:- N:1"},
		{"mysql dash comment", "SELECT 1 -- x\n, 2", MySQL, "W:SELECT N:1 P:, N:2"},
		{"mysql executable comment", "SELECT 1 /*!50001 , SLEEP(5) */", MySQL, "W:SELECT N:1 P:, W:SLEEP P:( N:5 P:)"},
		{"mysql mariadb executable comment", "SELECT 1 /*M!100101 , 2 */", MySQL, "W:SELECT N:1 P:, N:2"},
		{"mysql optimizer hint is a comment", "SELECT /*+ BKA(t1) */ 1", MySQL, "W:SELECT N:1"},
		{"mysql variables", "@a @@global.wait_timeout @'q x'", MySQL, "V:@a V:@@global.wait_timeout V:@'q x'"},
		{"mysql identifier starting with digits", "SELECT 1abc, 1e5, 0x1F", MySQL, "W:SELECT W:1abc P:, N:1e5 P:, N:0x1F"},
		{"mysql charset introducer", "_utf8mb4'x'", MySQL, "W:_utf8mb4 S:x"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			toks, err := tokenize(tc.sql, tc.d)
			if err != nil {
				t.Fatalf("tokenize(%q, %s): %v", tc.sql, tc.d, err)
			}
			if got := summary(toks); got != tc.want {
				t.Fatalf("tokenize(%q, %s)\n got %s\nwant %s", tc.sql, tc.d, got, tc.want)
			}
		})
	}
}

// TestTokenizeRefusesWhatItCannotRead lists texts whose reading is
// ambiguous or invalid for the engine; the tokenizer must fail on each.
func TestTokenizeRefusesWhatItCannotRead(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, sql string
		d         Dialect
		want      string
	}{
		{"pg unterminated string", "SELECT 'abc", Postgres, "unterminated"},
		{"pg unterminated nested comment", "SELECT /* /* */ 1", Postgres, "unterminated"},
		{"pg unterminated dollar quote", "SELECT $a$ x $b$", Postgres, "unterminated"},
		{"pg backslash before quote", `SELECT 'a\'; DELETE FROM t; --'`, Postgres, "ambiguous"},
		{"pg bad unicode escape", `U&"\00"`, Postgres, "invalid Unicode escape"},
		{"pg lone surrogate", `U&"\D83D"`, Postgres, "surrogate"},
		{"pg uescape hex digit", `U&"a" UESCAPE 'a'`, Postgres, "escape character"},
		{"pg uescape without string", `U&"a" UESCAPE x`, Postgres, "UESCAPE"},
		{"pg zero-length identifier", `SELECT ""`, Postgres, "zero-length"},
		{"pg stray dollar", "SELECT $x", Postgres, "unexpected $"},
		{"sqlite unterminated bracket", "SELECT [abc", SQLite, "unterminated"},
		{"sqlite unterminated backtick", "SELECT `abc", SQLite, "unterminated"},
		{"sqlite unterminated comment", "SELECT 1 /* x", SQLite, "unterminated"},
		{"mysql backslash before quote", `SELECT 'a\'b'`, MySQL, "ambiguous"},
		{"mysql backslash before double quote", `SELECT "a\"b"`, MySQL, "ambiguous"},
		{"mysql unterminated executable comment", "SELECT 1 /*! , 2", MySQL, "unterminated /*!"},
		{"mysql nested comment", "SELECT 1 /* a /* b */ c */", MySQL, "nested"},
		// MariaDB "Comment Syntax": a version gate is 5 or 6 digits, and an
		// executable comment ends at its first */ when read as a comment.
		{"mysql seven-digit version", "SELECT 1 /*!1000000 , 2 */", MySQL, "7-digit version"},
		{"mysql four-digit version", "SELECT 1 /*!5000 , 2 */", MySQL, "4-digit version"},
		{"mysql string across the end of an executable comment", "SELECT 1 /*!50000 'x */, SLEEP(1), '*/", MySQL, "ends inside"},
		{"mysql line comment across the end of an executable comment", "SELECT 1 /*! # */ , SLEEP(1)\n */", MySQL, "ends inside"},
		{"mysql comment inside an executable comment", "SELECT 1 /*! 1 /* x */ + 1 */", MySQL, "ends inside"},
		{"mysql semicolon in an executable comment", "SELECT 1 /*! ; */", MySQL, "semicolon"},
		{"vertical tab", "SELECT\v1", SQLite, "control character"},
		{"nul byte", "SELECT 1\x00", Postgres, "control character"},
		{"invalid utf-8", "SELECT '\xff'", SQLite, "UTF-8"},
		{"unknown dialect", "SELECT 1", Dialect("oracle"), "unknown SQL dialect"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			toks, err := tokenize(tc.sql, tc.d)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("tokenize(%q, %s) = %s, %v; want an error mentioning %q", tc.sql, tc.d, summary(toks), err, tc.want)
			}
		})
	}
}
