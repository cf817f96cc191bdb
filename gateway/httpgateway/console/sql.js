// The console's SQL agent tab (console.js holds the helpers and routes):
// a session walks its job kind's stages (a stepper), the agent's choices
// come back as typed selections (dropdowns for connections, schemas and
// tables), SQL waits highlighted for confirmation, results are paged, a
// comparison is a diff table, an e-mail is previewed before it is sent, and
// the jobs that ran are listed with their SQL, rows, duration and
// destination. #/sql/<session id> is a session, #/sql/job/<job id> a job.
"use strict";

// The SQL agent has no list of sessions; the sessions this browser started
// or opened are kept in localStorage so the tab still has a history.
const sqlKnown = "agentmesh.sqlSessions";
let sqlSession = "";
// sqlVersion is the version of the session as shown: each input names it,
// so a confirmation approves only the SQL on the screen.
let sqlVersion = "0";

function rememberSql(id) {
  const known = JSON.parse(localStorage.getItem(sqlKnown) || "[]").filter((s) => s.id !== id);
  known.unshift({ id, time: new Date().toISOString() });
  localStorage.setItem(sqlKnown, JSON.stringify(known.slice(0, 50)));
  listSql();
}

function listSql() {
  const tb = $("sqlList").tBodies[0];
  tb.replaceChildren();
  for (const s of JSON.parse(localStorage.getItem(sqlKnown) || "[]")) {
    const tr = tb.insertRow();
    tr.dataset.id = s.id;
    tr.classList.toggle("selected", s.id === sqlSession);
    cell(tr, link(href("sql", s.id), tail(s.id)));
    cell(tr, when(s.time), "muted");
  }
  if (!tb.rows.length) cell(tb.insertRow(), "nothing yet", "muted").colSpan = 2;
}

// sqlJobHref is a job's link; its id ("<session>/<n>") keeps its slash.
function sqlJobHref(id) {
  return "#/sql/job/" + String(id).split("/").map(encodeURIComponent).join("/");
}

const kindWords = { READ_SQL: "read", WRITE_DATA: "write to a table", SEND_EMAIL: "e-mail", COMPARE_SQL: "comparison" };

function kindOf(kind) {
  return kindWords[short(kind, "JOB_KIND_")] || "job kind not chosen yet";
}

function showSqlSession(s) {
  sqlSession = s ? s.id : "";
  sqlVersion = String((s && s.version) || 0);
  const a = $("sqlId");
  a.textContent = sqlSession || "none yet";
  if (sqlSession) a.href = href("sql", sqlSession); else a.removeAttribute("href");
  $("sqlStage").textContent = (s && s.stage) || "–";
  $("sqlKindShown").textContent = s ? kindOf(s.jobKind) : "–";
  for (const tr of $("sqlList").tBodies[0].rows) tr.classList.toggle("selected", tr.dataset.id === sqlSession);
  renderSqlStepper(s);
  renderSqlCard(s);
}

// renderSqlStepper shows where the session is among its job kind's steps
// (sqlSteps, format.js).
function renderSqlStepper(s) {
  const ol = $("sqlStepper");
  ol.replaceChildren();
  const st = s && sqlSteps(s.jobKind, s.stage);
  if (!st) return;
  st.steps.forEach((name, i) => {
    ol.append(el("li", i < st.at ? "done" : i === st.at ? (st.running ? "current running" : "current") : "todo", name));
  });
}

// jsonParam reads a parameter the agent keeps as JSON text (compare_key,
// compare_mapping); null when absent or unreadable.
function jsonParam(p, k) {
  try { return p[k] ? JSON.parse(p[k]) : null; } catch (_) { return null; }
}

const reportWords = { full: "full diff: every row", differences: "only the differences", summary: "summary counts" };

// renderSqlCard shows what a job will do before it is confirmed: an
// e-mail's recipients, subject, query and rows; a comparison's queries,
// columns, key, report and target table.
function renderSqlCard(s) {
  const card = $("sqlCard");
  card.replaceChildren();
  card.hidden = true;
  if (!s) return;
  const p = s.parameters || {};
  const kind = short(s.jobKind, "JOB_KIND_");
  if (kind === "SEND_EMAIL" && p.email_sql) {
    card.dataset.kind = "email";
    card.append(el("h4", null, s.stage === "CONFIRM_EMAIL" ? "E-mail to send" : "E-mail so far"));
    const dl = el("dl", "email-preview");
    const add = (k, v) => {
      const dd = el("dd");
      dd.append(v instanceof Node ? v : el("span", v ? "text" : "muted", v || "not given yet"));
      dl.append(el("dt", null, k), dd);
    };
    add("To", p.recipients);
    add("Subject", p.subject);
    const q = el("pre", "sql");
    q.append(...highlightSQL(p.email_sql));
    add("Query", q);
    add("Rows", emailRows(p));
    add("Attachment", "the query's result as a CSV file");
    card.append(dl);
    card.hidden = false;
  } else if (kind === "COMPARE_SQL" && p.compare_mapping) {
    card.dataset.kind = "compare";
    card.append(el("h4", null, "Comparison"));
    const mapping = jsonParam(p, "compare_mapping") || [];
    const keys = jsonParam(p, "compare_key");
    const facts = {
      "A (first query) on": p.compare_first_connection,
      "B (second query) on": p.compare_second_connection,
      "Columns compared (A = B)": mapping.map((m) => m.first + " = " + m.second).join(", "),
      Key: keys == null ? "" : keys.length ? keys.join(", ") : "none: whole rows are compared",
      Report: reportWords[p.compare_reporting_type] || p.compare_reporting_type,
      "Writes to": p.compare_table ? (p.compare_schema ? p.compare_schema + "." : "") + p.compare_table + " on " + (p.compare_target_connection || "") : "",
      "Job name": p.compare_job_name,
    };
    card.append(factList(facts));
    card.hidden = false;
  }
}

// emailRows says how many rows the e-mail carries, when that is known
// before it runs: the whole written table holds what was written.
function emailRows(p) {
  const q = (x) => "[`\"]?" + String(x || "").replace(/[.*+?^${}()|[\]\\]/g, "\\$&") + "[`\"]?";
  const whole = p.written_table && new RegExp("^SELECT \\* FROM " + q(p.written_schema) + "\\." + q(p.written_table) + "$", "i").test(p.email_sql);
  if (whole && p.row_count) return count(p.row_count) + " rows: all of " + p.written_schema + "." + p.written_table + " as written";
  return "what the query returns (at most SQLAGENT_EMAIL_ROW_LIMIT)";
}

views.sql = {
  async list() {
    listSql();
    const r = await api("GET", "/v1/sql/connections");
    const sel = $("sqlConnection");
    sel.replaceChildren();
    for (const c of r.connections || []) sel.add(new Option(c.name + " (" + c.dialect + ")", c.name));
    sel.add(new Option(sel.options.length ? "let the agent ask" : "no connections configured (SQLAGENT_CONNECTIONS)", ""));
    await listSqlJobs();
  },
  async open(id) {
    if (id.startsWith("job/")) {
      await showSqlJob(id.slice(4));
      return;
    }
    $("sqlJobView").hidden = true;
    $("sqlSessionView").hidden = false;
    selectSqlJob("");
    if (id && id === sqlSession) return;
    await loadSqlSession(id);
  },
};

// loadSqlSession shows session id as stored: its turns, the SQL waiting
// for approval, the choices of the agent's last reply.
async function loadSqlSession(id) {
  $("sqlTurns").replaceChildren();
  sqlClear();
  if (!id) { showSqlSession(null); return; }
  const s = (await api("GET", "/v1/sql/sessions/" + encodeURIComponent(id))).session;
  showSqlSession(s);
  rememberSql(s.id);
  for (const t of s.turns || []) line($("sqlTurns"), t.role === "user" ? "you" : "agent", t.text);
  showSqlToConfirm(s.pendingSql, s.stage === "CONFIRM_GENERATED_SQL" ? s.schemaNote : "");
  // The session keeps the choices of the agent's last reply.
  renderSqlChoices(s.options || [], s.action);
}

function sqlClear() {
  showSqlToConfirm("");
  sqlRows = [];
  sqlDiff = null;
  $("sqlPager").hidden = true;
  $("sqlTruncated").hidden = true;
  $("sqlDiffCounts").hidden = true;
  $("sqlOptions").replaceChildren();
  $("sqlResult").tHead.replaceChildren();
  $("sqlResult").tBodies[0].replaceChildren();
  $("sqlResult").classList.remove("diff");
}

// showSqlToConfirm shows the SQL to confirm and, under it, which tables
// the model was shown to write it when the schema was too long to show
// whole (schemaNote).
function showSqlToConfirm(sql, schemaNote) {
  const confirm = $("sqlToConfirm");
  confirm.replaceChildren(...highlightSQL(sql || ""));
  confirm.hidden = !sql;
  let note = document.getElementById("sqlSchemaNote");
  if (!note) confirm.after((note = Object.assign(el("p", "muted small"), { id: "sqlSchemaNote" })));
  note.textContent = (sql && schemaNote) || "";
  note.hidden = !note.textContent;
}

// highlightSQL marks the tokens of SQL (sqlTokens, format.js) as spans, so
// the query to confirm reads like in an editor; the text is unchanged.
function highlightSQL(sql) {
  return sqlTokens(sql).map(([cls, text]) => (cls ? el("span", "sql-" + cls, text) : text));
}

// The options whose action says they are a list to pick from: a dropdown,
// sent back as a typed selection.
const dropdownOf = { ACTION_FETCH_CONNECTIONS: "Database", ACTION_FETCH_SCHEMAS: "Schema", ACTION_FETCH_TABLES: "Table" };

function renderSqlChoices(options, act) {
  const box = $("sqlOptions");
  box.replaceChildren();
  box.dataset.action = short(act || "", "ACTION_").toLowerCase();
  if (!options.length) return;
  const what = dropdownOf[act];
  if (what) {
    const label = el("label", "choice", what + " ");
    const sel = el("select");
    sel.id = "sqlChoice";
    for (const o of options) sel.add(new Option(o.label || o.value, o.value));
    label.append(sel);
    const b = el("button", null, "Use this " + what.toLowerCase());
    b.type = "button";
    b.addEventListener("click", action(box, () => {
      const o = options[sel.selectedIndex];
      return sqlSend({ selection: o.value }, o.label || o.value);
    }));
    box.append(label, b);
    if (act === "ACTION_FETCH_TABLES") box.append(el("span", "muted small", "or type a new table's name below"));
    return;
  }
  if (act === "ACTION_ASK_JOB_KIND") box.append(el("span", "choice", "Job kind"));
  // TOOL: the validator found every parameter the job needs; it started.
  if (act === "ACTION_TOOL") box.append(el("span", "muted small", "Everything the job needs is known; it has started."));
  for (const o of options) {
    const b = el("button", null, o.label || o.value);
    b.type = "button";
    b.addEventListener("click", action(box, () => sqlSend({ selection: o.value }, o.label || o.value)));
    box.append(b);
  }
}

// Result rows are shown a page at a time; a comparison's rows as its diff.
const sqlPageSize = 25;
let sqlRows = [];
let sqlPage = 0;
let sqlDiff = null; // diffTable of the shown result, when it is a comparison

const diffWords = { only_in_first: "only in A", only_in_second: "only in B", changed: "changed", same: "same" };

function valueCell(tr, v, cls) {
  if (v === null || v === undefined) return cell(tr, "NULL", "null" + (cls ? " " + cls : ""));
  return cell(tr, typeof v === "object" ? JSON.stringify(v) : v, cls);
}

function showSqlPage() {
  const tb = $("sqlResult").tBodies[0];
  tb.replaceChildren();
  for (const row of sqlRows.slice(sqlPage * sqlPageSize, (sqlPage + 1) * sqlPageSize)) {
    const tr = tb.insertRow();
    if (sqlDiff && !sqlDiff.summary) {
      tr.dataset.status = row.status;
      cell(tr, diffWords[row.status] || row.status, "diff-status diff-" + row.status);
      for (const k of row.keys) valueCell(tr, k, "key");
      for (const c of row.cells) {
        if ("value" in c) { valueCell(tr, c.value); continue; }
        valueCell(tr, c.first, c.changed ? "changed" : "");
        valueCell(tr, c.second, c.changed ? "changed" : "");
      }
      continue;
    }
    for (const v of Array.isArray(row) ? row : row.values || []) valueCell(tr, v);
  }
  const pages = Math.ceil(sqlRows.length / sqlPageSize);
  const nav = $("sqlPager");
  nav.hidden = pages <= 1;
  nav.replaceChildren();
  const prev = el("button", null, "‹ Previous");
  const next = el("button", null, "Next ›");
  prev.type = next.type = "button";
  prev.disabled = sqlPage === 0;
  next.disabled = sqlPage >= pages - 1;
  prev.addEventListener("click", () => { sqlPage--; showSqlPage(); });
  next.addEventListener("click", () => { sqlPage++; showSqlPage(); });
  const first = sqlPage * sqlPageSize + 1;
  nav.append(prev, el("span", "muted", "rows " + first + "–" + Math.min(sqlRows.length, first + sqlPageSize - 1) + " of " + sqlRows.length), next);
}

// showSqlResult shows a result: a plain table, or a comparison's diff with
// its key columns, A/B column pairs (changed values marked) and the rows
// per status.
function showSqlResult(result, params) {
  const table = $("sqlResult");
  const diff = diffTable(result.columns, result.rows || [], jsonParam(params, "compare_key"));
  sqlDiff = diff;
  table.classList.toggle("diff", !!diff);
  if (diff && !diff.summary) {
    const h1 = table.tHead.insertRow();
    const h2 = table.tHead.insertRow();
    const span2 = (text, cls) => { const th = el("th", cls, text); th.rowSpan = 2; h1.append(th); };
    span2("Row");
    for (const k of diff.keys) span2(k + " (key)", "key");
    for (const c of diff.plain) span2(c);
    for (const p of diff.pairs) {
      const th = el("th", "pair", p.name);
      th.colSpan = 2;
      h1.append(th);
      h2.append(el("th", "side", "A: " + p.first), el("th", "side", "B: " + p.second));
    }
    const n = (k, fallback) => (params["compare_" + k] !== undefined ? Number(params["compare_" + k]) : fallback);
    const c = diff.counts;
    const counts = $("sqlDiffCounts");
    counts.replaceChildren();
    for (const [k, v] of [["only_in_first", n("only_in_first", c.only_in_first)], ["only_in_second", n("only_in_second", c.only_in_second)],
      ["changed", n("changed", c.changed)], ["same", n("same", c.same)]]) {
      const b = el("span", "diff-count diff-" + k, count(v) + " " + diffWords[k]);
      b.dataset.status = k;
      counts.append(b);
    }
    counts.append(el("span", "muted small", "A is the first query, B the second" + (diff.keys.length ? "; rows matched on " + diff.keys.join(", ") : "; no key: whole rows compared")));
    counts.hidden = false;
    sqlRows = diff.rows;
  } else {
    const head = table.tHead.insertRow();
    for (const c of result.columns || []) head.append(el("th", null, c === "diff_status" ? "Row" : c));
    sqlRows = diff ? (result.rows || []).map((r) => [diffWords[r[0]] || r[0], ...r.slice(1)]) : result.rows || [];
  }
  sqlPage = 0;
  showSqlPage();
  $("sqlTruncated").hidden = !result.truncated;
}

async function sqlReply(r) {
  showSqlSession(r.session);
  line($("sqlTurns"), "agent", r.reply);
  sqlClear();
  // The e-mail's preview card shows its query already.
  showSqlToConfirm($("sqlCard").dataset.kind === "email" && !$("sqlCard").hidden ? "" : r.sqlToConfirm, r.schemaNote);
  renderSqlChoices(r.options || [], r.action);
  if (r.result) showSqlResult(r.result, (r.job && r.job.parameters) || (r.session && r.session.parameters) || {});
  if (r.job) await listSqlJobs();
}

// sqlSend sends one input under a request id of its own (postOnce): an
// input applied before its answer was lost is answered as it was, never
// run twice. It names the version of the session on the screen: when
// another client (a second tab, a colleague, an MCP client) changed the
// session since, nothing runs, and the session is shown as it is now.
async function sqlSend(body, shown) {
  line($("sqlTurns"), "you", shown);
  try {
    await sqlReply(await postOnce("/v1/sql/sessions/" + encodeURIComponent(sqlSession) + ":input",
      Object.assign({ expectedVersion: sqlVersion }, body)));
  } catch (err) {
    if (err.reason === "SESSION_CHANGED") await loadSqlSession(sqlSession);
    throw err;
  }
}

$("sqlStart").addEventListener("submit", action($("sqlStart"), async () => {
  $("sqlTurns").replaceChildren();
  sqlClear();
  const body = { connection: $("sqlConnection").value };
  if ($("sqlKind").value) body.jobKind = $("sqlKind").value;
  const words = $("sqlWords").value.trim();
  if (words) {
    body.text = words;
    line($("sqlTurns"), "you", words);
  }
  const r = await api("POST", "/v1/sql/sessions", body);
  $("sqlWords").value = "";
  note("sql", r.session.id);
  rememberSql(r.session.id);
  await sqlReply(r);
}));

$("sqlForm").addEventListener("submit", action($("sqlForm"), async () => {
  if (!sqlSession) throw new Error("start a job first");
  const text = $("sqlInput").value.trim();
  $("sqlInput").value = "";
  await sqlSend({ text }, text);
}));

// ---- jobs that ran ----------------------------------------------------------

// The jobs of every session of the scope, newest first, a page at a time.
const sqlJobList = pager({
  table: $("sqlJobList"), nav: $("sqlJobPager"), path: "/v1/sql/jobs",
  items: (r) => r.jobs || [],
  row(tr, j) {
    tr.dataset.kind = short(j.kind, "JOB_KIND_").toLowerCase();
    cell(tr, link(sqlJobHref(j.id), j.name || kindOf(j.kind) + " on " + j.connection));
    cell(tr, count(j.rowCount), "num");
    cell(tr, human(seconds(j.duration)), "duration");
    cell(tr, when(j.startTime), "muted");
  },
});

function selectSqlJob(id) {
  sqlJobList.select(id);
}

// listSqlJobs shows the first page: where a job that just ran appears.
function listSqlJobs() {
  return sqlJobList.reset();
}
$("sqlJobsRefresh").addEventListener("click", action($("sqlJobsRefresh").parentElement, listSqlJobs));

// findSqlJob reads one job; its id ("<session>/<n>") keeps its slash in
// the path (GET /v1/sql/jobs/{job_id=*/**}).
async function findSqlJob(id) {
  return (await api("GET", "/v1/sql/jobs/" + String(id).split("/").map(encodeURIComponent).join("/"))).job;
}

const writeModeWords = { create: "fail (create only)", drop: "drop it and create it again", truncate: "empty it and fill it" };
const rowsWord = { READ_SQL: "Rows read", WRITE_DATA: "Rows written", SEND_EMAIL: "Rows sent", COMPARE_SQL: "Diff rows written" };

// showSqlJob shows a job that ran: what it was, the SQL exactly as
// approved, its rows, how long it took and where its result went.
async function showSqlJob(id) {
  $("sqlSessionView").hidden = true;
  const view = $("sqlJobView");
  view.hidden = false;
  selectSqlJob(id);
  view.replaceChildren(el("p", "muted", "loading…")); // nothing of another job while this one loads
  const j = await findSqlJob(id);
  const kind = short(j.kind, "JOB_KIND_");
  const head = el("h3");
  head.append(link(sqlJobHref(j.id), j.name || kindOf(j.kind) + " on " + j.connection));
  const p = j.parameters || {};
  const facts = {
    Kind: kindOf(j.kind), Connection: j.connection, [rowsWord[kind] || "Rows"]: count(j.rowCount),
    Took: human(seconds(j.duration)), Destination: j.destination, Started: when(j.startTime),
  };
  if (kind === "READ_SQL") {
    facts["SQL from"] = p.sql_method === "generate" ? "the agent, from the question" : p.sql_method === "user_sql" ? "the user" : "";
    if (p.sql_method === "generate") facts.Question = p.question;
  }
  if (kind === "WRITE_DATA") facts["If the table existed"] = writeModeWords[p.write_mode] || p.write_mode;
  if (kind === "SEND_EMAIL") facts.Subject = p.subject;
  if (kind === "COMPARE_SQL" && p.compare_same !== undefined) {
    facts.Compared = [count(p.compare_only_in_first) + " only in A", count(p.compare_only_in_second) + " only in B",
      count(p.compare_changed) + " changed", count(p.compare_same) + " same"].join(" · ");
  }
  const dl = factList(facts);
  dl.classList.add("job-facts");
  const session = el("p", "muted small");
  session.append("Ran in session ", link(href("sql", j.sessionId), j.sessionId, "id"));
  view.replaceChildren(head, dl, session);
  const sql = (title, text) => {
    if (!text) return;
    const pre = el("pre", "sql");
    pre.append(...highlightSQL(text));
    view.append(el("h4", null, title), pre);
  };
  sql(kind === "COMPARE_SQL" ? "A: first query, as approved" : "SQL, as approved", j.sql);
  sql("B: second query, as approved", j.secondSql);
}
