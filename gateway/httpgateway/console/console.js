// agentmesh console: a page over the gateway's own REST/SSE API. It keeps
// no state on the server; the API key and tenant stay in this browser tab
// (sessionStorage).
"use strict";

const $ = (id) => document.getElementById(id);

// ---- settings, errors, requests -------------------------------------------

$("settings").addEventListener("submit", (e) => e.preventDefault());
for (const id of ["apiKey", "tenant"]) {
  $(id).value = sessionStorage.getItem("agentmesh." + id) || "";
  $(id).addEventListener("change", () => sessionStorage.setItem("agentmesh." + id, $(id).value.trim()));
}

function headers() {
  const h = { "Content-Type": "application/json" };
  const key = $("apiKey").value.trim();
  const tenant = $("tenant").value.trim();
  if (key) h["Authorization"] = "Bearer " + key;
  if (tenant) h["X-Tenant-Id"] = tenant;
  return h;
}

function showError(err) {
  const box = $("error");
  box.textContent = err ? String(err.message || err) : "";
  box.hidden = !err;
}

// failure turns a non-2xx response into an Error carrying the API's message.
async function failure(resp) {
  let msg = resp.status + " " + resp.statusText;
  try {
    const body = await resp.json();
    if (body.message) msg += ": " + body.message;
  } catch (_) { /* not JSON */ }
  return new Error(msg);
}

async function api(method, path, body) {
  const resp = await fetch(path, { method, headers: headers(), body: body === undefined ? undefined : JSON.stringify(body) });
  if (!resp.ok) throw await failure(resp);
  return resp.json();
}

// stream calls an SSE endpoint and hands each event ({id, event, data}) to
// onEvent as it arrives; it resolves when the server ends the stream.
async function stream(method, path, body, onEvent) {
  const h = headers();
  h["Accept"] = "text/event-stream";
  const resp = await fetch(path, { method, headers: h, body: body === undefined ? undefined : JSON.stringify(body) });
  if (!resp.ok) throw await failure(resp);
  const reader = resp.body.getReader();
  const decoder = new TextDecoder();
  let buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += decoder.decode(value, { stream: true });
    let cut;
    while ((cut = buf.search(/\r?\n\r?\n/)) >= 0) {
      const block = buf.slice(0, cut);
      buf = buf.slice(cut).replace(/^\r?\n\r?\n/, "");
      const ev = { event: "message", data: "" };
      for (const line of block.split(/\r?\n/)) {
        const m = /^([a-z]+): ?(.*)$/.exec(line);
        if (!m) continue;
        if (m[1] === "data") ev.data += (ev.data ? "\n" : "") + m[2];
        else ev[m[1]] = m[2];
      }
      try { ev.data = JSON.parse(ev.data); } catch (_) { /* plain text */ }
      if (ev.event === "error") throw new Error(ev.data.message || JSON.stringify(ev.data));
      onEvent(ev);
    }
  }
}

// guard runs an async handler, showing what went wrong instead of failing silently.
function guard(fn) {
  return async (e) => {
    if (e && e.preventDefault) e.preventDefault();
    showError(null);
    try { await fn(e); } catch (err) { showError(err); }
  };
}

function cell(row, text, cls) {
  const td = row.insertCell();
  td.textContent = text == null ? "" : String(text);
  if (cls) td.className = cls;
  return td;
}

function line(log, who, text, cls) {
  const div = document.createElement("div");
  if (who) {
    const b = document.createElement("span");
    b.className = "who";
    b.textContent = who;
    div.append(b);
  }
  const span = document.createElement("span");
  span.textContent = text;
  if (cls) span.className = cls;
  div.append(span);
  log.append(div);
  log.scrollTop = log.scrollHeight;
  return span;
}

// ---- tabs -------------------------------------------------------------------

const loaders = {};
for (const b of document.querySelectorAll("#tabs button")) {
  b.addEventListener("click", () => {
    for (const o of document.querySelectorAll("#tabs button")) o.classList.toggle("active", o === b);
    for (const s of document.querySelectorAll("main .tab")) s.hidden = s.id !== b.dataset.tab;
    showError(null);
    if (loaders[b.dataset.tab]) guard(loaders[b.dataset.tab])();
  });
}

// ---- overview ---------------------------------------------------------------

loaders.overview = async () => {
  const health = await fetch("/healthz").then((r) => r.json());
  const hb = $("health").tBodies[0];
  hb.replaceChildren();
  for (const [name, svc] of Object.entries(health.services || {})) {
    const r = hb.insertRow();
    cell(r, name);
    cell(r, svc.status, svc.status === "SERVING" ? "ok" : "bad");
    cell(r, Object.entries(svc.dependencies || {}).map(([d, s]) => d + ": " + s).join(", "));
  }
  const models = await api("GET", "/v1/models");
  const mb = $("models").tBodies[0];
  mb.replaceChildren();
  for (const m of models.models || []) {
    const r = mb.insertRow();
    cell(r, m.name);
    cell(r, m.available ? "yes" : "no", m.available ? "ok" : "bad");
    cell(r, (m.targets || []).map((t) => t.provider + "/" + t.providerModel + (t.available ? "" : " (down" + (t.detail ? ": " + t.detail : "") + ")")).join(" → "));
  }
};
$("refresh").addEventListener("click", guard(loaders.overview));

// ---- chat -------------------------------------------------------------------

let conversationId = "";

async function newConversation() {
  const r = await api("POST", "/v1/conversations", {});
  conversationId = r.conversation.id;
  $("conversationId").textContent = conversationId;
  $("transcript").replaceChildren();
}
$("newConversation").addEventListener("click", guard(newConversation));

$("chatForm").addEventListener("submit", guard(async () => {
  if (!conversationId) await newConversation();
  const text = $("chatInput").value.trim();
  $("chatInput").value = "";
  const log = $("transcript");
  line(log, "you", text);
  let answer = null;
  await stream("POST", "/v1/conversations/" + encodeURIComponent(conversationId) + "/messages:stream", { content: text }, (ev) => {
    switch (ev.event) {
      case "ResponseChunk":
        if (!answer) answer = line(log, "assistant", "");
        answer.textContent += ev.data.content || "";
        break;
      case "StatusUpdate":
        line(log, "", ev.data.message || ev.data.kind, "event");
        break;
      case "ToolCall":
      case "ToolResult":
        line(log, "", ev.event + " " + JSON.stringify(ev.data), "event");
        break;
      case "Error":
        line(log, "", "error: " + (ev.data.message || JSON.stringify(ev.data)), "bad");
        break;
      case "Completed":
        line(log, "", "done: " + (ev.data.totalTokens || 0) + " tokens in " + (ev.data.duration || "?"), "event");
        break;
    }
    log.scrollTop = log.scrollHeight;
  });
}));

// ---- analysis jobs ----------------------------------------------------------

let analysisWatch = 0; // which job's stream owns the table
const jobRows = new Map(); // job id → its row in the table

$("analysisForm").addEventListener("submit", guard(async () => {
  const r = await api("POST", "/v1/analyses", { query: $("analysisQuery").value.trim(), responseType: $("analysisType").value });
  $("jobs").tBodies[0].replaceChildren();
  jobRows.clear();
  await watchAnalysis(r.job.id);
}));

const finished = /COMPLETE|FAILED|CANCELLED/;

// watchAnalysis streams an analysis's job tree into the table until the
// analysis ends (again: a retry sends it back to waiting for its children).
async function watchAnalysis(rootId) {
  const watch = ++analysisWatch;
  $("analysisResult").textContent = "running…";
  await stream("GET", "/v1/jobs/" + encodeURIComponent(rootId) + ":watch", undefined, (ev) => {
    const job = ev.data && ev.data.job;
    if (!job || watch !== analysisWatch) return; // a newer watch took the table
    let row = jobRows.get(job.id);
    if (!row) {
      row = $("jobs").tBodies[0].insertRow();
      jobRows.set(job.id, row);
      for (let i = 0; i < 5; i++) row.insertCell();
    }
    const status = job.status || "";
    // Ids are UUIDv7: the first digits are the time (alike for jobs started
    // within a minute), the last are random.
    row.cells[0].textContent = (job.parentId ? "  └ " : "") + "…" + job.id.slice(-8);
    row.cells[0].title = job.id;
    row.cells[1].textContent = (job.type || "").replace("JOB_TYPE_", "");
    row.cells[2].textContent = status.replace("JOB_STATUS_", "");
    row.cells[3].textContent = job.title || "";
    row.cells[4].replaceChildren(...jobActions(job, rootId));
    if (job.id === rootId) {
      row.dataset.status = status;
      if (finished.test(status)) {
        $("analysisResult").textContent = JSON.stringify(job.output || job.error || job, null, 2);
      }
    }
  });
}

// jobActions are the buttons a job's row offers, as the job service allows
// them: cancel an unfinished analysis (all of it) or tool job (that tool
// alone); retry a failed or cancelled tool job, or a failed synthesis,
// unless the analysis was cancelled.
function jobActions(job, rootId) {
  const status = job.status || "";
  const type = job.type || "";
  const rootRow = jobRows.get(rootId);
  const rootCancelled = job.id !== rootId && rootRow && rootRow.dataset.status === "JOB_STATUS_CANCELLED";
  const out = [];
  if (!finished.test(status) && (job.id === rootId || type === "JOB_TYPE_TOOL_EXECUTION")) {
    out.push(jobButton("Cancel", job.id, ":cancel", async () => {}));
  }
  const retryable = (type === "JOB_TYPE_TOOL_EXECUTION" && /FAILED|CANCELLED/.test(status)) ||
    (type === "JOB_TYPE_SYNTHESIS" && status === "JOB_STATUS_FAILED");
  if (retryable && !rootCancelled) {
    out.push(jobButton("Retry", job.id, ":retry", () => watchAnalysis(rootId)));
  }
  return out;
}

function jobButton(label, id, action, after) {
  const b = document.createElement("button");
  b.textContent = label;
  b.dataset.job = id;
  b.addEventListener("click", guard(async () => {
    b.disabled = true;
    await api("POST", "/v1/jobs/" + encodeURIComponent(id) + action, {});
    await after();
  }));
  return b;
}

// ---- documents --------------------------------------------------------------

$("ingestForm").addEventListener("submit", guard(async () => {
  const r = await api("POST", "/v1/documents", {
    sourceType: $("sourceType").value, title: $("docTitle").value.trim(), rawContent: $("docContent").value,
  });
  const d = r.document;
  $("ingestResult").textContent = "Stored " + d.id + " as " + (d.contentType || "?") + " in " + (d.chunkCount || 0) + " chunks.";
}));

$("searchForm").addEventListener("submit", guard(async () => {
  const r = await api("POST", "/v1/search", { query: $("searchQuery").value.trim() });
  const tb = $("hits").tBodies[0];
  tb.replaceChildren();
  for (const h of r.hits || []) {
    const row = tb.insertRow();
    cell(row, Number(h.score || 0).toFixed(4));
    cell(row, h.title);
    cell(row, h.text);
  }
  if (!(r.hits || []).length) cell(tb.insertRow(), "no hits");
}));

// ---- classification runs ----------------------------------------------------

const runs = "/agents/classificationAgent/runs";
let runId = "";
let awaiting = ""; // "FETCH" or "BATCH" while a human decision is due

let streamed = null; // the line that .delta events (plan and summary texts) grow

function runEvent(ev) {
  const d = ev.data || {};
  const type = d.type || ev.event;
  const log = $("runEvents");
  if (type.endsWith(".delta")) {
    if (!streamed) streamed = line(log, "", "");
    streamed.textContent += typeof d.data === "string" ? d.data : "";
    return;
  }
  streamed = null;
  line(log, type, d.logMessage ? " " + d.logMessage : "", "event");
  if (d.data && d.data.runId) runId = d.data.runId;
  awaiting = type.endsWith("awaiting_fetch_approval") ? "FETCH" : type.endsWith("awaiting_batch_approval") ? "BATCH" : "";
  if (awaiting) {
    // What the approval is about: the plan and sample, or the labels.
    const pre = document.createElement("pre");
    pre.textContent = JSON.stringify(d.data, null, 2);
    log.append(pre);
    log.scrollTop = log.scrollHeight;
  }
}

async function afterRunStream() {
  $("runId").textContent = runId || "none yet";
  if (runId) {
    const r = await api("GET", runs + "/" + encodeURIComponent(runId));
    // The original agent's AgentContext: state is e.g. "AwaitingBatchApproval".
    $("runState").textContent = (r.state || "").replace(/([a-z])([A-Z])/g, "$1_$2").toUpperCase();
  }
  $("approvals").hidden = !awaiting;
}

$("runForm").addEventListener("submit", guard(async () => {
  $("runEvents").replaceChildren();
  runId = "";
  await stream("POST", runs, { instruction: $("instruction").value.trim() }, runEvent);
  await afterRunStream();
}));

function command(kind) {
  return guard(async () => {
    const type = kind === "STOP" ? "COMMAND_TYPE_STOP" : "COMMAND_TYPE_" + kind + "_" + awaiting;
    $("approvals").hidden = true;
    await stream("POST", runs + "/" + encodeURIComponent(runId) + "/command", { type, feedback: $("feedback").value.trim() }, runEvent);
    $("feedback").value = "";
    await afterRunStream();
  });
}
$("approve").addEventListener("click", command("APPROVE"));
$("reject").addEventListener("click", command("REJECT"));
$("stopRun").addEventListener("click", command("STOP"));

// ---- SQL agent --------------------------------------------------------------

let sqlSession = "";

loaders.sql = async () => {
  const r = await api("GET", "/v1/sql/connections");
  const sel = $("sqlConnection");
  sel.replaceChildren();
  for (const c of r.connections || []) sel.add(new Option(c.name + " (" + c.dialect + ")", c.name));
  if (!sel.options.length) sel.add(new Option("no connections configured (SQLAGENT_CONNECTIONS)", ""));
};

function sqlReply(r) {
  sqlSession = r.session.id;
  line($("sqlTurns"), "agent", r.reply);
  const confirm = $("sqlToConfirm");
  confirm.textContent = r.sqlToConfirm || "";
  confirm.hidden = !r.sqlToConfirm;
  const opts = $("sqlOptions");
  opts.replaceChildren();
  for (const o of r.options || []) {
    const b = document.createElement("button");
    b.type = "button";
    b.textContent = o.label || o.value;
    b.addEventListener("click", guard(() => sqlSend({ selection: o.value }, o.label || o.value)));
    opts.append(b);
  }
  const table = $("sqlResult");
  table.tHead.replaceChildren();
  table.tBodies[0].replaceChildren();
  if (r.result) {
    const head = table.tHead.insertRow();
    for (const c of r.result.columns || []) head.append(Object.assign(document.createElement("th"), { textContent: c }));
    for (const row of r.result.rows || []) {
      const tr = table.tBodies[0].insertRow();
      for (const v of Array.isArray(row) ? row : row.values || []) cell(tr, typeof v === "object" && v !== null ? JSON.stringify(v) : v);
    }
    if (r.result.truncated) cell(table.tBodies[0].insertRow(), "… more rows were cut (SQLAGENT_ROW_LIMIT)");
  }
}

async function sqlSend(body, shown) {
  line($("sqlTurns"), "you", shown);
  sqlReply(await api("POST", "/v1/sql/sessions/" + encodeURIComponent(sqlSession) + ":input", body));
}

$("sqlStart").addEventListener("submit", guard(async () => {
  $("sqlTurns").replaceChildren();
  sqlReply(await api("POST", "/v1/sql/sessions", { connection: $("sqlConnection").value }));
}));

$("sqlForm").addEventListener("submit", guard(async () => {
  if (!sqlSession) throw new Error("start a job first");
  const text = $("sqlInput").value.trim();
  $("sqlInput").value = "";
  await sqlSend({ text }, text);
}));

guard(loaders.overview)();
