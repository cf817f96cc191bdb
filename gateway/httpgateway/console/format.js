// Formatting for the console (console.js), kept apart from the page so
// that make test checks it in node (httpgateway's TestConsoleFormat): pure
// functions of their arguments, no DOM.
"use strict";

// seconds reads a protobuf Duration as JSON spells it ("2.812s").
function seconds(d) {
  const m = /^(-?\d+(?:\.\d+)?)s$/.exec(String(d == null ? "" : d));
  return m ? Number(m[1]) : null;
}

// human spells a number of seconds for people: "420 ms", "2.8 s",
// "3 min 5 s", "1 h 2 min". Each unit is chosen after rounding, so 0.9996 s
// is "1.0 s" and 3599.6 s is "1 h 0 min", never "1000 ms" or "59 min 60 s".
function human(sec) {
  if (sec == null || !isFinite(sec)) return "–";
  sec = Math.max(0, sec); // clocks of different hosts can disagree a little
  if (Math.round(sec * 1000) < 1000) return Math.round(sec * 1000) + " ms";
  if (Math.round(sec * 10) < 600) return (Math.round(sec * 10) / 10).toFixed(1) + " s";
  const s = Math.round(sec);
  if (s < 3600) return Math.floor(s / 60) + " min " + (s % 60) + " s";
  const m = Math.round(sec / 60);
  return Math.floor(m / 60) + " h " + (m % 60) + " min";
}

// at reads a protobuf Timestamp as JSON spells it (RFC 3339, up to nine
// fractional digits) into milliseconds; Date.parse is only required to read
// three.
function at(ts) {
  return ts ? Date.parse(String(ts).replace(/(\.\d{3})\d+/, "$1")) : NaN;
}

// sqlTokens splits SQL into [class, text] pairs, class one of keyword,
// string, number, comment or "" for the text between; joined, the texts are
// the SQL unchanged. A keyword inside a string, a comment or a longer name
// (order_id, selected) stays part of it.
function sqlTokens(sql) {
  const token = new RegExp("('(?:[^']|'')*')|(\"(?:[^\"]|\"\")*\")|(--[^\\n]*|/\\*[\\s\\S]*?\\*/)|(\\b\\d+(?:\\.\\d+)?\\b)|(\\b(?:" +
    "SELECT|FROM|WHERE|GROUP|BY|ORDER|HAVING|LIMIT|OFFSET|JOIN|LEFT|RIGHT|INNER|OUTER|FULL|CROSS|ON|USING|AS|AND|OR|NOT|IN|IS|NULL|" +
    "LIKE|BETWEEN|CASE|WHEN|THEN|ELSE|END|DISTINCT|UNION|ALL|WITH|RECURSIVE|DESC|ASC|INSERT|UPDATE|DELETE|INTO|VALUES|SET|" +
    "CREATE|TABLE|DROP|ALTER|EXISTS|OVER|PARTITION|CAST)\\b)", "gi");
  const out = [];
  let from = 0;
  for (const m of sql.matchAll(token)) {
    if (m.index > from) out.push(["", sql.slice(from, m.index)]);
    out.push([m[1] || m[2] ? "string" : m[3] ? "comment" : m[4] ? "number" : "keyword", m[0]]);
    from = m.index + m[0].length;
  }
  if (from < sql.length) out.push(["", sql.slice(from)]);
  return out;
}

// bytes spells a size for people: "98 B", "2.4 KiB", "10.0 MiB".
function bytes(n) {
  n = Number(n);
  if (!isFinite(n) || n < 0) return "–";
  if (n < 1024) return n + " B";
  const units = ["KiB", "MiB", "GiB"];
  let u = -1;
  do { n /= 1024; u++; } while (Math.round(n * 10) / 10 >= 1024 && u < units.length - 1);
  return (Math.round(n * 10) / 10).toFixed(1) + " " + units[u];
}

// count spells a count with thousands grouped: 1234567 → "1,234,567";
// int64 fields arrive as strings in protojson.
function count(n) {
  n = Number(n || 0);
  return String(Math.round(n)).replace(/\B(?=(\d{3})+(?!\d))/g, ",");
}

// The SQL agent's stages (services/sqlagent, Session.stage) as the steps of
// each job kind people see in a stepper. A stage a kind does not list is
// not one of its steps; EXECUTING (a confirmed job running) is the last.
const sqlKindSteps = {
  READ_SQL: [
    ["database", ["ASK_JOB_KIND", "NEED_CONNECTION"]],
    ["method", ["ASK_SQL_METHOD"]],
    ["question or SQL", ["NEED_NATURAL_LANGUAGE", "NEED_USER_SQL"]],
    ["confirm SQL", ["CONFIRM_GENERATED_SQL", "CONFIRM_USER_SQL"]],
    ["job name", ["EXECUTE_SQL"]],
    ["results", ["SHOW_RESULTS"]],
  ],
  WRITE_DATA: [
    ["table", ["NEED_TABLE_NAME"]],
    ["if it exists", ["ASK_WRITE_MODE"]],
    ["schema", ["ASK_WRITE_SCHEMA"]],
    ["confirm write", ["CONFIRM_WRITE"]],
    ["written", ["NEED_WRITE_OR_EMAIL"]],
  ],
  SEND_EMAIL: [
    ["query", ["CONFIRM_EMAIL_QUERY", "NEED_EMAIL_QUERY"]],
    ["recipients", ["NEED_EMAIL_RECIPIENTS"]],
    ["subject", ["NEED_EMAIL_SUBJECT"]],
    ["confirm e-mail", ["CONFIRM_EMAIL"]],
    ["sent", []],
  ],
  COMPARE_SQL: [
    ["first query", ["ASK_FIRST_SQL_METHOD", "NEED_FIRST_NATURAL_LANGUAGE", "NEED_FIRST_USER_SQL", "CONFIRM_FIRST_GENERATED_SQL", "CONFIRM_FIRST_USER_SQL"]],
    ["second query", ["ASK_SECOND_SQL_METHOD", "NEED_SECOND_NATURAL_LANGUAGE", "NEED_SECOND_USER_SQL", "CONFIRM_SECOND_GENERATED_SQL", "CONFIRM_SECOND_USER_SQL"]],
    ["columns", ["ASK_AUTO_MATCH", "WAITING_MAP_TABLE"]],
    ["key", ["ASK_COMPARE_KEY"]],
    ["report", ["ASK_REPORTING_TYPE"]],
    ["target table", ["ASK_COMPARE_SCHEMA", "ASK_COMPARE_TABLE_NAME"]],
    ["job name", ["ASK_COMPARE_JOB_NAME"]],
    ["run", ["EXECUTE_COMPARE_SQL"]],
    ["diff written", ["NEED_WRITE_OR_EMAIL"]],
  ],
};

// sqlSteps places a session's stage among its job kind's steps: the step
// labels, the index of the current one (steps.length when the session is
// DONE) and whether the job is running (EXECUTING). Kind is a JobKind
// (JOB_KIND_READ_SQL) or its short form; null when the stage is not a step
// of the kind.
function sqlSteps(kind, stage) {
  const k = String(kind || "").replace(/^JOB_KIND_/, "");
  const steps = sqlKindSteps[k === "UNSPECIFIED" || !k ? "READ_SQL" : k];
  if (!steps) return null;
  const labels = steps.map((s) => s[0]);
  if (stage === "DONE") return { steps: labels, at: labels.length, running: false };
  if (stage === "EXECUTING") return { steps: labels, at: labels.length - 1, running: true };
  const at = steps.findIndex((s) => s[1].includes(stage));
  return at < 0 ? null : { steps: labels, at, running: false };
}

// sameValue says whether two cells of a comparison hold the same value, as
// a person reads them: 5 and "5.00" are the same number.
function sameValue(a, b) {
  if (a == null || b == null) return a == null && b == null;
  const x = Number(a), y = Number(b);
  if (String(a).trim() !== "" && String(b).trim() !== "" && isFinite(x) && isFinite(y)) return x === y;
  return String(a) === String(b);
}

// diffTable reads a COMPARE_SQL result (columns diff_status, the key
// columns, then <first>_first/<second>_second pairs; without a key the
// compared columns once; a summary diff_status and rows) for display:
// keys, value pairs, each row's status, key values and cells (a pair
// marked changed when its two values differ), and the rows per status.
// keys are the key column names (compare_key); null when unknown, then
// they are the columns before the pairs. Not a comparison: null.
function diffTable(columns, rows, keys) {
  columns = columns || [];
  if (columns[0] !== "diff_status") return null;
  const rest = columns.slice(1);
  const counts = { same: 0, changed: 0, only_in_first: 0, only_in_second: 0 };
  if (rest.length === 1 && rest[0] === "rows") {
    for (const r of rows || []) counts[r[0]] = Number(r[1]);
    return { summary: true, keys: [], pairs: [], plain: [], rows: [], counts };
  }
  const isPairs = (cols) => cols.length % 2 === 0 && cols.every((c, i) => (i % 2 === 0 ? /_first$/ : /_second$/).test(c));
  let k;
  if (keys && keys.length && keys.every((key, i) => rest[i] === key) && isPairs(rest.slice(keys.length))) k = keys.length;
  else if (keys && keys.length === 0) k = -1;
  else {
    k = -1;
    for (let i = 1; i < rest.length; i++) if (isPairs(rest.slice(i))) { k = i; break; }
  }
  const out = { summary: false, keys: [], pairs: [], plain: [], rows: [], counts };
  if (k < 0) out.plain = rest; // no key: whole rows, each column once
  else {
    out.keys = rest.slice(0, k);
    for (let i = k; i < rest.length; i += 2) out.pairs.push({ first: rest[i], second: rest[i + 1], name: rest[i].replace(/_first$/, "") });
  }
  for (const r of rows || []) {
    const status = r[0];
    counts[status] = (counts[status] || 0) + 1;
    if (k < 0) {
      out.rows.push({ status, keys: [], cells: r.slice(1).map((v) => ({ value: v })) });
      continue;
    }
    const cells = [];
    for (let i = 1 + k; i < r.length; i += 2) cells.push({ first: r[i], second: r[i + 1], changed: status === "changed" && !sameValue(r[i], r[i + 1]) });
    out.rows.push({ status, keys: r.slice(1, 1 + k), cells });
  }
  return out;
}

// The intake pipeline's phases in the order they run
// (services/indexer, IntakePhase.name), with what people call them.
const intakePhaseNames = [
  ["vision_stage1", "vision, stage 1"], ["content_type", "content type"], ["vision_stage2", "vision, stage 2"],
  ["extraction", "extraction"], ["indexing", "indexing"], ["routing", "routing"],
];

// intakePhases lists a document's pipeline phase by phase, in run order:
// name, label, state (done, skipped, failed: it recorded errors, running:
// the next phase of an unfinished pipeline, pending), seconds, tokens,
// errors and why it was skipped. A phase the console does not know is
// listed after the known ones, as recorded.
function intakePhases(pipeline) {
  const p = pipeline || {};
  const recorded = new Map((p.phases || []).map((ph) => [ph.name, ph]));
  const names = intakePhaseNames.map((n) => n[0]);
  const out = [];
  let next = true; // the first phase not recorded is the running one
  const add = (name, label) => {
    const ph = recorded.get(name);
    let state = "pending";
    if (ph) state = ph.skipped ? "skipped" : (ph.errors || []).length ? "failed" : "done";
    else if (!p.finished && next) { state = "running"; next = false; }
    out.push({
      name, label, state, seconds: ph ? seconds(ph.duration) : null, tokens: ph ? Number(ph.tokens || 0) : 0,
      errors: ph ? ph.errors || [] : [], skipped: ph ? ph.skipped || "" : "",
    });
  };
  for (const [name, label] of intakePhaseNames) add(name, label);
  for (const name of recorded.keys()) if (!names.includes(name)) add(name, name.replace(/_/g, " "));
  return out;
}

// usageSeries lays GetUsage's answer (GET /v1/usage) out for a chart: the
// buckets from start_time to end_time one bucket_width apart (those without
// calls included, as zeros), and a series per value of by
// ("logicalModel", "provider" or "tenantId") with its tokens (prompt plus
// completion) in each bucket and in all, the largest first; totals per
// bucket and the largest of them.
function usageSeries(r, by) {
  const width = 1000 * (seconds(r.bucketWidth) || 60);
  const start = at(r.startTime);
  const n = Math.max(1, Math.floor((at(r.endTime) - start) / width) + 1);
  const buckets = Array.from({ length: n }, (_, i) => start + i * width);
  const series = new Map();
  for (const p of r.points || []) {
    const i = Math.floor((at(p.startTime) - start) / width);
    if (!(i >= 0 && i < n)) continue;
    const name = p[by] || "–";
    if (!series.has(name)) series.set(name, { name, total: 0, calls: 0, values: new Array(n).fill(0) });
    const s = series.get(name);
    const tokens = Number(p.promptTokens || 0) + Number(p.completionTokens || 0);
    s.values[i] += tokens;
    s.total += tokens;
    s.calls += Number(p.calls || 0);
  }
  const list = [...series.values()].sort((a, b) => b.total - a.total || (a.name < b.name ? -1 : 1));
  const totals = buckets.map((_, i) => list.reduce((sum, s) => sum + s.values[i], 0));
  return { buckets, width, series: list, totals, max: Math.max(0, ...totals) };
}
