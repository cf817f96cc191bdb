package connections_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/services/sqlagent/internal/connections"
	"github.com/agentmesh/agentmesh/services/sqlagent/internal/safety"
)

// pgAttacks are statements a read job must not let change anything. They
// come from the PostgreSQL manual: "System Administration Functions"
// (signals, advisory locks, files, replication slots, statistics,
// settings), "Lexical Structure" (quoted and U& identifiers, UESCAPE, E”
// and dollar quoting, nested comments), dblink, adminpack and large
// objects, schema-qualified and OPERATOR() spellings, casts, functions in
// FROM and in views, aggregates, domains, row-level security, TABLESAMPLE,
// and every statement that is not a plain query.
var pgAttacks = []attack{
	// Server administration functions.
	{"terminate backend", "SELECT pg_terminate_backend({victim})"},
	{"cancel backend", "SELECT pg_cancel_backend({victim})"},
	{"log memory contexts", "SELECT pg_log_backend_memory_contexts({victim})"},
	{"advisory lock", "SELECT pg_advisory_lock(1)"},
	{"try advisory lock", "SELECT pg_try_advisory_lock(2)"},
	{"shared advisory lock", "SELECT pg_advisory_lock_shared(3)"},
	{"try shared advisory lock", "SELECT pg_try_advisory_lock_shared(3)"},
	{"transaction advisory lock", "SELECT pg_advisory_xact_lock(4)"},
	{"dblink_exec delete", "SELECT dblink_exec('{conninfo}', 'DELETE FROM public.target')"},
	{"dblink query with returning", "SELECT * FROM dblink('{conninfo}', 'DELETE FROM public.target RETURNING id') AS t(id int)"},
	{"dblink_connect leaves a session", "SELECT dblink_connect('c1', '{conninfo}')"},
	{"dblink_send_query", "SELECT dblink_send_query('c1', 'DELETE FROM public.target')"},
	{"lo_export", "SELECT lo_export(424242, '{dir}/lo.out')"},
	{"lo_import", "SELECT lo_import('/etc/hostname')"},
	{"lo_unlink", "SELECT lo_unlink(424242)"},
	{"lo_create", "SELECT lo_create(0)"},
	{"lo_put", "SELECT lo_put(424242, 0, '\\x00')"},
	{"lo_from_bytea", "SELECT lo_from_bytea(0, 'x')"},
	{"adminpack write", "SELECT pg_file_write('{dir}/written.txt', 'data', false)"},
	{"adminpack unlink", "SELECT pg_file_unlink('{dir}/keep.txt')"},
	{"adminpack rename", "SELECT pg_file_rename('{dir}/keep.txt', '{dir}/moved.txt')"},
	{"adminpack write into data dir", "SELECT pg_file_write('postgresql.auto.conf', 'work_mem = 1GB', true)"},
	{"physical replication slot", "SELECT pg_create_physical_replication_slot('evil_slot')"},
	{"logical replication slot", "SELECT pg_create_logical_replication_slot('evil_slot2', 'test_decoding')"},
	{"replication origin", "SELECT pg_replication_origin_create('evil_origin')"},
	{"stats reset", "SELECT pg_stat_reset()"},
	{"shared stats reset", "SELECT pg_stat_reset_shared('bgwriter')"},
	{"wal stats reset", "SELECT pg_stat_reset_shared('wal')"},
	{"single table stats reset", "SELECT pg_stat_reset_single_table_counters('target'::regclass)"},
	{"set_config", "SELECT set_config('work_mem', '1GB', false)"},
	{"nextval", "SELECT nextval('order_seq')"},
	{"setval", "SELECT setval('order_seq', 100)"},
	{"reload conf", "SELECT pg_reload_conf()"},
	{"rotate logfile", "SELECT pg_rotate_logfile()"},
	{"switch wal", "SELECT pg_switch_wal()"},
	{"restore point", "SELECT pg_create_restore_point('evil')"},
	{"backup start", "SELECT pg_backup_start('evil')"},
	{"read server file", "SELECT pg_read_file('postgresql.auto.conf')"},
	{"list server dir", "SELECT pg_ls_dir('.')"},
	{"sleep", "SELECT pg_sleep(0.01)"},
	{"notify", "SELECT pg_notify('attack', 'x')"},
	{"txid_current", "SELECT txid_current()"},
	{"pg_current_xact_id", "SELECT pg_current_xact_id()"},
	{"export snapshot", "SELECT pg_export_snapshot()"},
	{"setseed", "SELECT setseed(0.5)"},
	{"logical message", "SELECT pg_logical_emit_message(true, 'p', 'x')"},
	// SQL run from text.
	{"query_to_xml", "SELECT query_to_xml('SELECT pg_advisory_lock(5)', true, false, '')"},
	{"table_to_xml over a sneaky view", "SELECT table_to_xml('v_sneaky', true, false, '')"},
	{"ts_stat", "SELECT * FROM ts_stat('SELECT to_tsvector(v) FROM target WHERE pg_try_advisory_lock(6)')"},
	// tablefunc and xml2 (contrib): labelled STABLE, they run SQL given as
	// text or pasted from their arguments.
	{"crosstab dblink_exec", "SELECT * FROM crosstab('SELECT ''r''::text, ''c''::text, dblink_exec(''{conninfo}'', ''DELETE FROM public.target'')') AS ct(r text, c1 text)"},
	{"crosstab reads a server file", "SELECT * FROM crosstab('SELECT ''r''::text, ''c''::text, pg_read_file(''/etc/hostname'')') AS ct(r text, c1 text)"},
	{"crosstab with categories", "SELECT * FROM crosstab('SELECT ''r''::text, ''c''::text, ''v''::text', 'SELECT pg_try_advisory_lock(7)::text') AS ct(r text, c1 text)"},
	{"crosstab2", "SELECT * FROM crosstab2('SELECT ''r''::text, ''c''::text, pg_try_advisory_lock(8)::text')"},
	{"crosstab with a column count", "SELECT * FROM crosstab('SELECT ''r''::text, ''c''::text, pg_stat_reset()::text', 1) AS ct(r text, c1 text)"},
	{"crosstab schema-qualified", "SELECT * FROM public.crosstab('SELECT ''r''::text, ''c''::text, pg_try_advisory_lock(9)::text') AS ct(r text, c1 text)"},
	{"connectby injected table", "SELECT * FROM connectby('target WHERE pg_try_advisory_lock(18) --', 'id', 'id', '1', 0) AS t(id int, parent int, level int)"},
	{"xpath_table injected condition", "SELECT * FROM xpath_table('id', 'v', 'target', '/a', 'pg_try_advisory_lock(19)') AS t(id int, a text)"},
	// XPath that grows with the cube of its input: libxml2 does not stop
	// at the statement timeout (small here; the shape is what counts).
	{"xpath", "SELECT xpath('count(//*[count(//*)>0])', ('<a>' || repeat('<b/>', 20) || '</a>')::xml)"},
	{"xpath_exists", "SELECT xpath_exists('//b', '<a><b/></a>'::xml)"},
	{"xmltable", "SELECT * FROM XMLTABLE('/a/b' PASSING '<a><b>1</b></a>'::xml COLUMNS x text PATH '.')"},
	{"xml2 xpath_string", "SELECT xpath_string('<a><b>1</b></a>', '/a/b')"},
	// Secrets a superuser read role could read.
	{"password hashes", "SELECT rolname, rolpassword FROM pg_authid WHERE rolpassword IS NOT NULL"},
	{"password hashes, old view", "SELECT usename, passwd FROM pg_shadow"},
	{"user mapping options", "SELECT srvname, umoptions FROM pg_user_mappings"},
	{"user mapping catalog", "SELECT umoptions FROM pg_catalog.pg_user_mapping"},
	{"password hashes through a subquery", "SELECT * FROM (SELECT rolpassword FROM pg_authid) AS a"},
	// The planner's statistics sample every column, pg_authid's too once
	// ANALYZE has run over the catalog.
	{"password hashes in column statistics", "SELECT histogram_bounds::text FROM pg_stats WHERE tablename = 'pg_authid' AND attname = 'rolpassword'"},
	{"password hashes in raw statistics", "SELECT stavalues1::text FROM pg_statistic WHERE starelid = 'pg_authid'::regclass"},
	{"statistics catalog-qualified", "SELECT most_common_vals::text FROM pg_catalog.pg_stats"},
	{"extended statistics", "SELECT * FROM pg_stats_ext"},
	{"extended statistics of expressions", "SELECT * FROM pg_stats_ext_exprs"},
	{"extended statistics data", "SELECT * FROM pg_statistic_ext_data"},
	{"subscription connection strings", "SELECT subname, subconninfo FROM pg_subscription"},
	// Spellings of one volatile call.
	{"catalog-qualified", "SELECT pg_catalog.pg_try_advisory_lock(10)"},
	{"quoted name", `SELECT "pg_try_advisory_lock"(11)`},
	{"upper case", "SELECT PG_TRY_ADVISORY_LOCK(12)"},
	{"unicode escape name", `SELECT U&"\0070g_try_advisory_lock"(13)`},
	{"uescape name", `SELECT U&"!0070g_try_advisory_lock" UESCAPE '!' (14)`},
	{"unicode underscores", `SELECT U&"pg\005Ftry\005Fadvisory\005Flock"(15)`},
	{"quoted schema and name", `SELECT "pg_catalog"."pg_try_advisory_lock"(16)`},
	{"spaces around the dot", "SELECT pg_catalog . pg_try_advisory_lock (17)"},
	{"comment inside the name path", "SELECT pg_catalog./**/pg_try_advisory_lock(18)"},
	{"comment before the parenthesis", "SELECT pg_try_advisory_lock/* x */(19)"},
	{"newline before the parenthesis", "SELECT pg_try_advisory_lock\n(20)"},
	{"parenthesised", "SELECT (pg_try_advisory_lock(21))"},
	{"function in FROM", "SELECT * FROM pg_try_advisory_lock(22)"},
	{"ROWS FROM", "SELECT * FROM ROWS FROM (pg_try_advisory_lock(23))"},
	{"LATERAL function", "SELECT x FROM generate_series(1, 1) g, LATERAL pg_try_advisory_lock(24) x"},
	{"in a CTE", "WITH a AS (SELECT pg_try_advisory_lock(25)) SELECT * FROM a"},
	{"in WHERE", "SELECT 1 WHERE pg_try_advisory_lock(26)"},
	{"in CASE", "SELECT CASE WHEN true THEN pg_try_advisory_lock(27) END"},
	{"in coalesce", "SELECT coalesce(NULL, pg_try_advisory_lock(28))"},
	{"in an array", "SELECT ARRAY[pg_try_advisory_lock(29)]"},
	{"scalar subquery", "SELECT (SELECT pg_try_advisory_lock(30))"},
	{"in ORDER BY", "SELECT album_id FROM album ORDER BY pg_try_advisory_lock(album_id) LIMIT 1"},
	{"in FILTER", "SELECT count(*) FILTER (WHERE pg_try_advisory_lock(31)) FROM album"},
	{"in GROUP BY", "SELECT 1 FROM album GROUP BY pg_try_advisory_lock(32)"},
	{"in VALUES", "VALUES (pg_try_advisory_lock(34))"},
	{"with a cast argument", "SELECT pg_try_advisory_lock(35::int8)"},
	{"after a dollar quote", "SELECT $$x$$, pg_try_advisory_lock(36)"},
	{"after an escape string", `SELECT E'\\', pg_try_advisory_lock(37) --'`},
	{"after a backslash string", `SELECT 'a\', pg_try_advisory_lock(38) --'`},
	{"after a comment", "SELECT 1 /* */ , pg_try_advisory_lock(40)"},
	{"nested comment hides nothing", "SELECT 1 /* /* */ , pg_try_advisory_lock(39) -- */"},
	{"second statement", "SELECT 1; SELECT pg_advisory_lock(41)"},
	{"second statement after a newline", "SELECT 1\n;SELECT pg_advisory_lock(42)"},
	{"in OR", "SELECT 1 FROM album WHERE album_id = 1 OR pg_try_advisory_lock(44)"},
	{"in LATERAL subquery", "SELECT 1 FROM album a JOIN LATERAL (SELECT pg_try_advisory_lock(a.album_id)) l ON true"},
	{"in row_to_json", "SELECT row_to_json(t) FROM (SELECT pg_try_advisory_lock(45)) t"},
	{"in IS NULL", "SELECT pg_try_advisory_lock(47) IS NULL"},
	{"in EXISTS", "SELECT 1 FROM album WHERE EXISTS (SELECT pg_try_advisory_lock(48))"},
	{"in ARRAY subquery", "SELECT ARRAY(SELECT pg_try_advisory_lock(50))"},
	{"in xmlelement", "SELECT xmlelement(name x, pg_try_advisory_lock(51))"},
	{"in json_build_object", "SELECT json_build_object('a', pg_try_advisory_lock(52))"},
	{"in a UNION", "SELECT 1 UNION SELECT pg_try_advisory_lock(56)::int"},
	{"in unnest", "SELECT * FROM unnest(ARRAY[pg_try_advisory_lock(57)])"},
	{"parenthesised query", "(SELECT pg_try_advisory_lock(55))"},
	{"in LIMIT", "SELECT 1 LIMIT pg_try_advisory_lock(70)::int"},
	{"in a TABLESAMPLE argument", "SELECT * FROM album TABLESAMPLE BERNOULLI (pg_try_advisory_lock(71)::int * 10)"},
	{"in a window frame offset", "SELECT count(*) OVER (ORDER BY album_id ROWS BETWEEN pg_try_advisory_lock(72)::int PRECEDING AND CURRENT ROW) FROM album"},
	{"in a parameter default", "SELECT with_default()"},
	{"in a recursive CTE", "WITH RECURSIVE x(n) AS (SELECT pg_try_advisory_lock(74)::int UNION ALL SELECT n + 1 FROM x WHERE n < 3) SELECT * FROM x"},
	{"dblink qualified", `SELECT "public"."dblink_exec"('{conninfo}', 'DELETE FROM public.target')`},
	{"dblink unicode", `SELECT U&"dblink\005Fexec"('{conninfo}', 'DELETE FROM public.target')`},
	{"set_config quoted", `SELECT "set_config"('work_mem', '2MB', false)`},
	// Functions hidden in objects of the database owner.
	{"view over a volatile function", "SELECT * FROM v_sneaky"},
	{"TABLE of that view", "TABLE v_sneaky"},
	{"view over that view", "SELECT * FROM v_nested"},
	{"view that terminates backends", "SELECT * FROM v_terminate"},
	{"owner's volatile function", "SELECT grab_lock()"},
	{"owner's volatile function qualified", "SELECT public.grab_lock(60)"},
	{"operator over a volatile function", "SELECT 1 === 1"},
	{"OPERATOR() syntax", "SELECT 1 OPERATOR(public.===) 1"},
	{"explicit cast through a volatile function", "SELECT 61::pair"},
	{"CAST through a volatile function", "SELECT CAST(62 AS pair)"},
	{"implicit cast through a volatile function", "SELECT pair_a(63)"},
	{"domain check with a volatile function", "SELECT 64::locked_int"},
	{"aggregate with a volatile transition function", "SELECT sneaky_sum(album_id) FROM album"},
	{"that aggregate as a window function", "SELECT sneaky_sum(album_id) OVER () FROM album"},
	{"row-level security policy", "SELECT * FROM secret"},
	{"extension TABLESAMPLE method", "SELECT * FROM album TABLESAMPLE system_rows(5)"},
	// Foreign tables: the remote server runs what their definition names
	// (here a view that takes a lock), and keeps the connection open.
	{"foreign table over a volatile view", "SELECT * FROM ft_sneaky"},
	{"foreign table over a view that writes", "SELECT * FROM ft_writes"},
	{"foreign table", "SELECT id FROM ft_target"},
	{"view over a foreign table", "SELECT * FROM v_foreign"},
	{"partitioned table with a foreign partition", "SELECT * FROM parted"},
	{"inheritance parent of a foreign table", "SELECT * FROM inh_parent"},
	{"foreign table in a subquery", "SELECT count(*) FROM album WHERE album_id IN (SELECT id FROM ft_target)"},
	// Statements that are not plain queries.
	{"delete", "DELETE FROM target"},
	{"update", "UPDATE target SET v = 'x'"},
	{"insert", "INSERT INTO target VALUES (99, 'x')"},
	{"merge", "MERGE INTO target t USING (SELECT 1 AS id) s ON t.id = s.id WHEN MATCHED THEN DELETE"},
	{"delete in a CTE", "WITH d AS (DELETE FROM target RETURNING *) SELECT * FROM d"},
	{"update in a CTE", "WITH u AS (UPDATE target SET v = 'y' RETURNING *) SELECT 1"},
	{"select into", "SELECT * INTO newt FROM target"},
	{"select into temp", "SELECT 1 INTO TEMP x"},
	{"create table as", "CREATE TABLE evil AS SELECT 1"},
	{"create temp table", "CREATE TEMP TABLE t AS SELECT 1"},
	{"drop", "DROP TABLE target"},
	{"truncate", "TRUNCATE target"},
	{"alter", "ALTER TABLE target ADD COLUMN z int"},
	{"grant", "GRANT ALL ON target TO PUBLIC"},
	{"for update", "SELECT * FROM target FOR UPDATE"},
	{"for share", "SELECT * FROM target FOR SHARE"},
	{"for no key update", "SELECT * FROM target FOR NO KEY UPDATE"},
	{"for update in a subquery", "SELECT * FROM (SELECT * FROM target FOR UPDATE) s"},
	{"explain analyze", "EXPLAIN ANALYZE SELECT pg_advisory_lock(60)"},
	{"explain", "EXPLAIN SELECT 1"},
	{"set", "SET work_mem = '1GB'"},
	{"set session authorization", "SET SESSION AUTHORIZATION reader"},
	{"reset", "RESET ALL"},
	{"listen", "LISTEN attack"},
	{"notify statement", "NOTIFY attack"},
	{"prepare", "PREPARE p AS SELECT 1"},
	{"deallocate", "DEALLOCATE ALL"},
	{"copy to file", "COPY target TO '{dir}/copy.out'"},
	{"copy query to file", "COPY (SELECT 1) TO '{dir}/copy2.out'"},
	{"copy to program", "COPY (SELECT 1) TO PROGRAM 'touch {dir}/program'"},
	{"copy from file", "COPY target FROM '/etc/hostname'"},
	{"do block", "DO $$BEGIN PERFORM pg_advisory_lock(61); END$$"},
	{"call", "CALL wipe()"},
	{"vacuum", "VACUUM target"},
	{"analyze", "ANALYZE target"},
	{"lock table", "LOCK TABLE target"},
	{"begin", "BEGIN"},
	{"commit then delete", "COMMIT; DELETE FROM target"},
	{"select then commit then delete", "SELECT 1; COMMIT; DELETE FROM target"},
	{"alter system", "ALTER SYSTEM SET work_mem = '1GB'"},
	{"refresh materialized view", "REFRESH MATERIALIZED VIEW mv"},
	{"checkpoint", "CHECKPOINT"},
	{"discard", "DISCARD ALL"},
	{"create extension", "CREATE EXTENSION IF NOT EXISTS pgcrypto"},
	{"declare cursor", "DECLARE c CURSOR WITH HOLD FOR SELECT 1"},
	{"show", "SHOW data_directory"},
}

// pgLegitimate are analyst queries on Chinook that must run.
var pgLegitimate = []attack{
	{"top artists", "SELECT ar.name, count(*) AS albums FROM artist ar JOIN album al USING (artist_id) GROUP BY ar.name ORDER BY albums DESC LIMIT 10"},
	{"cte", "WITH sales AS (SELECT customer_id, sum(total) AS spent FROM invoice GROUP BY customer_id) SELECT c.first_name, c.last_name, s.spent FROM sales s JOIN customer c USING (customer_id) ORDER BY s.spent DESC LIMIT 5"},
	{"recursive cte", "WITH RECURSIVE chain AS (SELECT employee_id, reports_to, 1 AS depth FROM employee WHERE reports_to IS NULL UNION ALL SELECT e.employee_id, e.reports_to, c.depth + 1 FROM employee e JOIN chain c ON e.reports_to = c.employee_id) SELECT * FROM chain"},
	{"recursive series", "WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n WHERE x < 10) SELECT sum(x) FROM n"},
	{"row_number", "SELECT * FROM (SELECT genre_id, name, row_number() OVER (PARTITION BY genre_id ORDER BY milliseconds DESC) AS rn FROM track) t WHERE rn = 1"},
	{"rank", "SELECT billing_country, total, rank() OVER (PARTITION BY billing_country ORDER BY total DESC) FROM invoice LIMIT 20"},
	{"running total", "SELECT invoice_date, total, sum(total) OVER (ORDER BY invoice_date, invoice_id) AS running FROM invoice LIMIT 20"},
	{"moving average", "SELECT invoice_id, avg(total) OVER (ORDER BY invoice_id ROWS BETWEEN 2 PRECEDING AND CURRENT ROW) FROM invoice LIMIT 10"},
	{"range window", "SELECT invoice_date, count(*) OVER (ORDER BY invoice_date RANGE BETWEEN INTERVAL '7 days' PRECEDING AND CURRENT ROW) FROM invoice LIMIT 10"},
	{"lag lead", "SELECT invoice_id, total - lag(total) OVER (ORDER BY invoice_id), lead(total) OVER (ORDER BY invoice_id) FROM invoice LIMIT 10"},
	{"ntile", "SELECT track_id, ntile(4) OVER (ORDER BY unit_price, track_id) FROM track LIMIT 10"},
	{"first_value", "SELECT DISTINCT genre_id, first_value(name) OVER (PARTITION BY genre_id ORDER BY name) FROM track"},
	{"filter", "SELECT count(*) FILTER (WHERE total > 10) AS big, count(*) FILTER (WHERE total <= 10) AS small FROM invoice"},
	{"case", "SELECT name, CASE WHEN milliseconds > 300000 THEN 'long' WHEN milliseconds > 180000 THEN 'medium' ELSE 'short' END AS length FROM track LIMIT 10"},
	{"lateral", "SELECT g.name, t.name FROM genre g CROSS JOIN LATERAL (SELECT name FROM track WHERE genre_id = g.genre_id ORDER BY milliseconds DESC LIMIT 2) t"},
	{"grouping sets", "SELECT billing_country, billing_city, sum(total) FROM invoice GROUP BY GROUPING SETS ((billing_country), (billing_country, billing_city), ())"},
	{"rollup", "SELECT billing_country, date_part('year', invoice_date) AS y, sum(total) FROM invoice GROUP BY ROLLUP (billing_country, 2) LIMIT 20"},
	{"cube", "SELECT media_type_id, genre_id, count(*) FROM track GROUP BY CUBE (media_type_id, genre_id) LIMIT 20"},
	{"json build", "SELECT json_build_object('artist', name, 'id', artist_id) FROM artist LIMIT 5"},
	{"json agg", "SELECT ar.name, json_agg(al.title ORDER BY al.title) FROM artist ar JOIN album al USING (artist_id) GROUP BY ar.name LIMIT 5"},
	{"jsonb operators", "SELECT j->>'name', j->'id' FROM (SELECT jsonb_build_object('name', name, 'id', artist_id) AS j FROM artist) s WHERE j ? 'name' AND j @> '{\"id\": 1}'"},
	{"jsonb path", "SELECT jsonb_path_query_array('{\"a\": [1, 2, 3]}'::jsonb, '$.a[*] ? (@ > 1)')"},
	{"json each", "SELECT key, value FROM json_each('{\"a\": 1, \"b\": [1, 2]}')"},
	{"row_to_json", "SELECT row_to_json(a) FROM album a LIMIT 3"},
	{"date_trunc", "SELECT date_trunc('month', invoice_date) AS month, sum(total) FROM invoice GROUP BY 1 ORDER BY 1 LIMIT 12"},
	{"extract", "SELECT extract(year FROM invoice_date) AS y, extract(quarter FROM invoice_date) AS q, count(*) FROM invoice GROUP BY 1, 2 ORDER BY 1, 2"},
	{"date arithmetic", "SELECT invoice_id, invoice_date + interval '30 days' AS due, age(invoice_date::date, date '2009-01-01') FROM invoice LIMIT 5"},
	{"to_char", "SELECT to_char(invoice_date, 'YYYY-MM') AS ym, to_char(sum(total), 'FM999990.00') FROM invoice GROUP BY 1 ORDER BY 1 LIMIT 5"},
	{"now and current_date", "SELECT now() > invoice_date, current_date - invoice_date::date FROM invoice LIMIT 3"},
	{"generate_series dates", "SELECT d::date, count(i.invoice_id) FROM generate_series(timestamp '2009-01-01', timestamp '2009-01-31', interval '1 day') d LEFT JOIN invoice i ON i.invoice_date::date = d::date GROUP BY 1 ORDER BY 1"},
	{"string functions", "SELECT upper(name), lower(name), initcap(name), length(name), left(name, 3), split_part(name, ' ', 1) FROM artist LIMIT 5"},
	{"regexp", "SELECT name FROM track WHERE name ~* '^love' AND regexp_replace(name, '\\s+', ' ', 'g') <> ''"},
	{"ilike and like", "SELECT name FROM artist WHERE name ILIKE '%metal%' OR name LIKE 'A%'"},
	{"string_agg", "SELECT album_id, string_agg(name, ', ' ORDER BY track_id) FROM track GROUP BY album_id LIMIT 3"},
	{"array_agg and unnest", "SELECT u FROM unnest((SELECT array_agg(name ORDER BY name) FROM genre)) u LIMIT 5"},
	{"percentile", "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY total), percentile_disc(0.9) WITHIN GROUP (ORDER BY total) FROM invoice"},
	{"mode", "SELECT mode() WITHIN GROUP (ORDER BY billing_country) FROM invoice"},
	{"distinct on", "SELECT DISTINCT ON (customer_id) customer_id, invoice_date, total FROM invoice ORDER BY customer_id, invoice_date DESC"},
	{"exists", "SELECT name FROM artist ar WHERE EXISTS (SELECT 1 FROM album al WHERE al.artist_id = ar.artist_id) LIMIT 5"},
	{"not in", "SELECT name FROM artist WHERE artist_id NOT IN (SELECT artist_id FROM album) LIMIT 5"},
	{"any", "SELECT name FROM genre WHERE genre_id = ANY (ARRAY[1, 2, 3])"},
	{"union intersect except", "(SELECT billing_country FROM invoice EXCEPT SELECT country FROM employee) UNION (SELECT 'USA' INTERSECT SELECT country FROM customer)"},
	{"coalesce and nullif", "SELECT coalesce(company, 'none'), nullif(state, '') FROM customer LIMIT 5"},
	{"numeric rounding", "SELECT round(avg(total), 2), round(stddev(total), 3), max(total), min(total) FROM invoice"},
	{"casts", "SELECT total::text, '42'::int, 3.7::int, invoice_date::date, '2020-01-01'::timestamptz FROM invoice LIMIT 3"},
	{"regclass and size", "SELECT 'track'::regclass, pg_size_pretty(pg_total_relation_size('track'))"},
	{"random and tablesample", "SELECT count(*) >= 0 FROM track TABLESAMPLE BERNOULLI (50) WHERE random() >= 0"},
	{"information_schema", "SELECT table_name, count(*) FROM information_schema.columns WHERE table_schema = 'public' GROUP BY table_name ORDER BY 1"},
	{"pg_catalog tables", "SELECT relname, reltuples FROM pg_class WHERE relkind = 'r' AND relnamespace = 'public'::regnamespace ORDER BY 1"},
	{"pg_stat_activity", "SELECT count(*) FROM pg_stat_activity"},
	{"partitioned table", "SELECT region, count(*) FROM sales GROUP BY region ORDER BY region"},
	{"one partition", "SELECT count(*) FROM sales_us"},
	{"inheritance parent", "SELECT count(*) FROM readings"},
	{"local partition of a table with a foreign one", "SELECT count(*) FROM parted_local"},
	{"table keyword", "TABLE genre"},
	{"values", "VALUES (1, 'one'), (2, 'two')"},
	{"materialized cte", "WITH t AS MATERIALIZED (SELECT * FROM track WHERE unit_price > 0.99) SELECT count(*) FROM t"},
	{"unicode identifier", `SELECT U&"\0074otal" FROM invoice LIMIT 1`},
	{"quoted identifiers and keywords in strings", `SELECT name AS "delete", 'DROP TABLE x; pg_sleep(1)' AS note FROM genre LIMIT 2`},
	{"dollar quoted text", "SELECT $q$it's; DELETE FROM target$q$ AS s"},
	{"escape string", `SELECT E'tab\there' AS s`},
	{"full text", "SELECT name FROM track WHERE to_tsvector('english', name) @@ to_tsquery('english', 'love') LIMIT 5"},
	{"bool_and and every", "SELECT bool_and(total > 0), every(total < 100) FROM invoice"},
	{"integer division and modulo", "SELECT track_id / 100 AS bucket, count(*), sum(track_id % 7) FROM track GROUP BY 1 ORDER BY 1 LIMIT 5"},
	{"md5 and encode", "SELECT md5(name), encode(convert_to(name, 'UTF8'), 'base64') FROM artist LIMIT 2"},
	{"gen_random_uuid and clock", "SELECT gen_random_uuid() IS NOT NULL, clock_timestamp() > '2000-01-01'"},
}

// TestPostgresAdversarial runs every attack twice against one server (the
// read role a superuser, the worst case): through the whole chain (the
// token check, then the registry's server-side check, read-only
// transaction and session reset), and straight into the registry (its
// locks alone). Before and after each run it reads the state an attack
// could change; any difference fails the test. Then every analyst query
// must run through the whole chain, and the calibration shows the state
// check sees what the attacks would have done.
func TestPostgresAdversarial(t *testing.T) {
	t.Parallel()
	lab := startPGLab(t)
	reg := openRegistry(t, connections.Spec{Name: "wh", Dialect: connections.Postgres, DSN: lab.dsn})
	ctx := context.Background()
	// The calibration's attacker connects before the first state is read.
	attacker := lab.openAttacker(t)
	s := attackSuite{
		dialect: safety.Postgres,
		expand:  lab.expand,
		query:   func(q string) (*connections.Result, error) { return reg.Query(ctx, "wh", q, 100, 5*time.Second) },
		state:   func() serverState { return lab.state(t) },
		// PostgreSQL nests comments: the call is inside one.
		harmless: map[string]bool{"nested comment hides nothing": true},
	}
	s.runAll(t, "PostgreSQL", pgAttacks, pgLegitimate, pgCalibration, func(q string) error { _, err := attacker.ExecContext(ctx, q); return err })
}

// pgCalibration are attacks run with no guard at all, straight on a
// superuser session, each with an effect the state check must see; they
// prove it is not blind to any aspect the attacks aim at. Each leaves its
// effect in place, so they run last.
var pgCalibration = []string{
	"SELECT pg_advisory_lock(1)",
	"SELECT dblink_exec('{conninfo}', 'DELETE FROM public.target WHERE id = 1')",
	"SELECT lo_export(424242, '{dir}/lo.out')",
	"SELECT pg_file_unlink('{dir}/keep.txt')",
	"SELECT pg_create_physical_replication_slot('evil_slot')",
	"SELECT pg_stat_reset()",
	"SELECT pg_stat_reset_shared('bgwriter')",
	"SELECT setval('order_seq', 100)",
	"SELECT lo_unlink(424242)",
	"ALTER SYSTEM SET work_mem = '64MB'",
	"SELECT dblink_connect('c1', '{conninfo}')",
	"SELECT pg_replication_origin_create('evil_origin')",
	"CREATE TABLE evil AS SELECT 1 AS x",
	"CREATE FUNCTION evil() RETURNS int LANGUAGE sql AS 'SELECT 1'",
	"GRANT ALL ON target TO PUBLIC",
	"SELECT pg_terminate_backend({victim})",
}

// openAttacker opens an unguarded superuser session for the calibration.
func (lab *pgLab) openAttacker(t *testing.T) *sql.Conn {
	t.Helper()
	db, err := sql.Open("pgx", withParam(t, lab.dsn, "application_name", "attacker"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	conn, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(context.Background(), "SELECT 1"); err != nil {
		t.Fatal(err)
	}
	return conn
}

// TestPostgresSchemaLeavesOutForeignTables: the schema the model writes
// SQL from lists no foreign table, since a read of one is refused; the
// local partitions and the views are there.
func TestPostgresSchemaLeavesOutForeignTables(t *testing.T) {
	t.Parallel()
	lab := startPGLab(t)
	reg := openRegistry(t, connections.Spec{Name: "wh", Dialect: connections.Postgres, DSN: lab.dsn})
	checkSchemaNames(t, reg, "wh", []string{"ft_sneaky", "ft_target", "ft_writes", "parted_remote", "inh_child"}, []string{"sales_eu", "parted_local", "v_foreign", "album"})
}
