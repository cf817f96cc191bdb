// agentmesh console: a page over the gateway's own REST/SSE API. It keeps
// no state on the server; the API key and tenant stay in this browser tab
// (sessionStorage). Every tab and every item has a URL (#/<tab>/<id>), so
// reload, back/forward and a shared link show the same view.
"use strict";

const $ = (id) => document.getElementById(id);

// ---- settings, errors, requests -------------------------------------------

$("settings").addEventListener("submit", (e) => e.preventDefault());
for (const id of ["apiKey", "tenant"]) {
  $(id).value = sessionStorage.getItem("agentmesh." + id) || "";
  $(id).addEventListener("change", () => {
    sessionStorage.setItem("agentmesh." + id, $(id).value.trim());
    // Another key or tenant sees other items: list them again, and leave
    // an item of the previous one.
    shownTab = "";
    const shown = parseHash();
    if (shown.id) location.hash = href(shown.tab, "");
    else guard(route)();
  });
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

// failure turns a non-2xx response into an Error carrying the API's message
// and, when it gives one, its reason (google.rpc.ErrorInfo).
async function failure(resp) {
  let msg = resp.status + " " + resp.statusText;
  let reason = "";
  try {
    const body = await resp.json();
    if (body.message) msg += ": " + body.message;
    reason = ((body.details || []).find((d) => d.reason) || {}).reason || "";
  } catch (_) { /* not JSON */ }
  const err = new Error(msg);
  err.status = resp.status;
  err.reason = reason;
  return err;
}

async function api(method, path, body, signal) {
  const resp = await fetch(path, { method, headers: headers(), body: body === undefined ? undefined : JSON.stringify(body), signal });
  if (!resp.ok) throw await failure(resp);
  return resp.json();
}

// postOnce posts body under a request id of its own, and again under the
// same id while the mesh cannot be reached (no answer, 502, 503, 504): a
// request applied before its answer was lost (an SQL input, an analysis
// submission) is answered as it was, never applied twice.
async function postOnce(path, body) {
  body = Object.assign({ requestId: requestID() }, body);
  for (let attempt = 1; ; attempt++) {
    try {
      return await api("POST", path, body);
    } catch (err) {
      const lost = err.status === undefined || [502, 503, 504].includes(err.status);
      if (!lost || attempt === 3) throw err;
      await new Promise((done) => setTimeout(done, 1000 * attempt));
    }
  }
}

// requestID is 24 random hex digits (crypto.randomUUID needs a secure
// context, and the console may be served over plain HTTP).
function requestID() {
  const b = new Uint8Array(12);
  crypto.getRandomValues(b);
  return Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
}

// stream calls an SSE endpoint and hands each event ({id, event, data}) to
// onEvent as it arrives; it resolves when the server ends the stream (or
// signal aborts it).
async function stream(method, path, body, onEvent, signal) {
  const h = headers();
  h["Accept"] = "text/event-stream";
  const resp = await fetch(path, { method, headers: h, body: body === undefined ? undefined : JSON.stringify(body), signal });
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
      if (ev.event === "error") throw new Error(ev.data.message || String(ev.data));
      onEvent(ev);
    }
  }
}

// guard runs an async handler, showing what went wrong instead of failing
// silently; a request aborted because the user moved on is not an error.
function guard(fn) {
  return async (e) => {
    if (e && e.preventDefault) e.preventDefault();
    showError(null);
    try { await fn(e); } catch (err) { if (err.name !== "AbortError") showError(err); }
  };
}

// busy marks an area as working from the moment its request is sent: its
// buttons disabled, a spinner and the elapsed time beside them, until fn
// settles.
async function busy(area, fn) {
  const buttons = [...area.querySelectorAll("button")].filter((b) => !b.disabled);
  for (const b of buttons) b.disabled = true;
  const spinner = el("span", "busy");
  spinner.append(el("span", "spinner"), el("span", "elapsed"));
  area.append(spinner);
  area.setAttribute("aria-busy", "true");
  const t0 = performance.now();
  const tick = () => { spinner.lastChild.textContent = human((performance.now() - t0) / 1000); };
  tick();
  const timer = setInterval(tick, 100);
  try {
    return await fn();
  } finally {
    clearInterval(timer);
    spinner.remove();
    area.removeAttribute("aria-busy");
    for (const b of buttons) b.disabled = false;
  }
}

// action is a guarded handler that shows area busy while it runs.
function action(area, fn) {
  return guard((e) => busy(area, () => fn(e)));
}

// ---- rendering helpers ------------------------------------------------------

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text != null) e.textContent = String(text);
  return e;
}

function link(href, text, cls) {
  const a = el("a", cls, text);
  a.href = href;
  return a;
}

function cell(row, content, cls) {
  const td = row.insertCell();
  if (content instanceof Node) td.append(content);
  else td.textContent = content == null ? "" : String(content);
  if (cls) td.className = cls;
  return td;
}

function line(log, who, text, cls) {
  const div = el("div");
  if (who) div.append(el("span", "who", who));
  const span = el("span", cls, text);
  div.append(span);
  log.append(div);
  log.scrollTop = log.scrollHeight;
  return span;
}

// when shows a timestamp in local time: the time alone for today.
function when(ts) {
  if (!ts) return "";
  const d = new Date(at(ts));
  const time = d.toLocaleTimeString(undefined, { hour: "2-digit", minute: "2-digit", second: "2-digit" });
  if (d.toDateString() === new Date().toDateString()) return time;
  return d.toLocaleDateString(undefined, { month: "short", day: "numeric" }) + " " + time;
}

// short shows an enum value without its prefix: JOB_STATUS_FAILED → FAILED.
function short(v, prefix) {
  return String(v || "").replace(prefix, "");
}

// tail is the end of an id: UUIDv7s of things started within a minute share
// their first digits, the last are random.
function tail(id) {
  return "…" + String(id || "").slice(-8);
}

// renderValue shows structured data as lists and definition lists, so that
// no view needs raw JSON to be read.
function renderValue(v) {
  if (v == null || v === "") return el("span", "muted", "–");
  if (Array.isArray(v)) {
    if (!v.length) return el("span", "muted", "none");
    const ul = el("ul");
    for (const x of v) {
      const li = el("li");
      li.append(renderValue(x));
      ul.append(li);
    }
    return ul;
  }
  if (typeof v === "object") {
    const dl = el("dl");
    for (const [k, x] of Object.entries(v)) {
      dl.append(el("dt", null, words(k)));
      const dd = el("dd");
      dd.append(renderValue(x));
      dl.append(dd);
    }
    return dl;
  }
  return el("span", "text", v);
}

// factList shows labelled values as a definition list, leaving out the
// empty ones; a value may be a node, or a list (shown as one).
function factList(facts) {
  const dl = el("dl");
  for (const [k, v] of Object.entries(facts)) {
    if (v === undefined || v === null || v === "" || (Array.isArray(v) && !v.length)) continue;
    const dd = el("dd");
    dd.append(v instanceof Node ? v : Array.isArray(v) ? renderValue(v) : el("span", "text", v));
    dl.append(el("dt", null, k), dd);
  }
  return dl;
}

// words turns a field name (data_gaps, sampleConversation) into words.
function words(k) {
  const s = String(k).replace(/_/g, " ").replace(/([a-z])([A-Z])/g, "$1 $2").toLowerCase();
  return s.charAt(0).toUpperCase() + s.slice(1);
}

// ---- lists with pages -------------------------------------------------------

// pager fills a table from a list API, a page at a time (page tokens), with
// the filters query() returns; a new filter starts again at the first page.
function pager({ table, nav, path, items, query, row }) {
  let tokens = [""]; // tokens[i] opens page i
  let page = 0;
  let selected = "";
  const prev = el("button", null, "‹ Previous");
  const next = el("button", null, "Next ›");
  const where = el("span", "muted");
  prev.type = next.type = "button";
  nav.append(prev, where, next);
  async function load() {
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(query ? query() : {})) if (v) q.set(k, v);
    q.set("pageSize", "10");
    if (tokens[page]) q.set("pageToken", tokens[page]);
    const r = await api("GET", path + "?" + q);
    const tb = table.tBodies[0];
    tb.replaceChildren();
    for (const it of items(r)) {
      const tr = tb.insertRow();
      tr.dataset.id = it.id;
      tr.classList.toggle("selected", it.id === selected);
      row(tr, it);
    }
    if (!tb.rows.length) cell(tb.insertRow(), "nothing yet", "muted").colSpan = table.tHead.rows[0].cells.length;
    tokens[page + 1] = r.nextPageToken || "";
    tokens.length = page + 2;
    prev.disabled = page === 0;
    next.disabled = !r.nextPageToken;
    where.textContent = "page " + (page + 1);
  }
  prev.addEventListener("click", action(nav, async () => { page--; await load(); }));
  next.addEventListener("click", action(nav, async () => { page++; await load(); }));
  return {
    reset() { tokens = [""]; page = 0; return load(); },
    load,
    select(id) {
      selected = id;
      for (const tr of table.tBodies[0].rows) tr.classList.toggle("selected", tr.dataset.id === id);
    },
  };
}

// ---- routes -----------------------------------------------------------------

// views: tab → { list() refreshes its list, open(id) shows an item or none }.
const views = {};
const tabs = ["overview", "conversations", "jobs", "documents", "runs", "intake", "sql", "usage"];
let shownTab = "";

function parseHash() {
  const m = /^#\/([a-z]+)(?:\/(.+))?$/.exec(location.hash);
  const tab = m && tabs.includes(m[1]) ? m[1] : "overview";
  return { tab, id: m && m[2] ? decodeURIComponent(m[2]) : "" };
}

function href(tab, id) {
  return "#/" + tab + (id ? "/" + encodeURIComponent(id) : "");
}

// note records an item the page itself just created or reached (a new job,
// a conversation) in the address bar and history, without reloading the view
// that is showing it.
function note(tab, id) {
  if (location.hash !== href(tab, id)) history.pushState(null, "", href(tab, id));
}

async function route() {
  const { tab, id } = parseHash();
  for (const a of document.querySelectorAll("#tabs a")) {
    a.classList.toggle("active", a.dataset.tab === tab);
    if (a.dataset.tab === tab) a.setAttribute("aria-current", "page"); else a.removeAttribute("aria-current");
  }
  for (const s of document.querySelectorAll("main .tab")) s.hidden = s.id !== tab;
  showError(null);
  const v = views[tab];
  const entering = tab !== shownTab;
  shownTab = tab;
  await Promise.all([entering && v.list ? v.list() : null, v.open ? v.open(id) : null]);
}
window.addEventListener("hashchange", guard(route));

// ---- overview ---------------------------------------------------------------

views.overview = {
  async list() {
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
  },
};
$("refresh").addEventListener("click", action($("refresh").parentElement, () => views.overview.list()));

// ---- chat -------------------------------------------------------------------

let conversationId = "";
let chatAbort = null;

// The "created" filters: each select of class "since" offers the same
// windows; since(id) is the chosen window's start, or "" for any time.
for (const s of document.querySelectorAll("select.since")) {
  for (const [secs, label] of [["", "any time"], ["3600", "last hour"], ["86400", "last day"], ["604800", "last week"]]) {
    const o = el("option", null, label);
    o.value = secs;
    s.append(o);
  }
}
function since(id) {
  const secs = $(id).value;
  return secs ? new Date(Date.now() - 1000 * Number(secs)).toISOString() : "";
}

const conversationList = pager({
  table: $("conversationList"), nav: $("conversationPager"), path: "/v1/conversations",
  items: (r) => r.conversations || [],
  query: () => ({ createTimeFrom: since("conversationSinceFilter") }),
  row(tr, c) {
    cell(tr, link(href("conversations", c.id), c.title || "untitled " + tail(c.id)));
    cell(tr, when(c.updateTime || c.createTime), "muted");
  },
});

function showConversation(id) {
  conversationId = id;
  const a = $("conversationId");
  a.textContent = id || "none yet";
  if (id) a.href = href("conversations", id); else a.removeAttribute("href");
  conversationList.select(id);
}

// toolLine shows a tool call of a turn, its name and arguments; its result
// follows on a line of its own (how long it took, the start of its answer).
function toolLine(log, name, args) {
  return line(log, "tool", name + "(" + (args || "") + ")", "event");
}

// passageLine shows a passage the turn's search gave the model, numbered
// as the model saw it, linked to its document.
function passageLine(log, n, p) {
  const div = el("div", "passage");
  div.append(el("span", "who", "[" + n + "]"), link(href("documents", p.documentId), p.title || tail(p.documentId)),
    el("span", "muted", " " + clip(p.text, 200)));
  log.append(div);
}

$("conversationSinceFilter").addEventListener("change", action($("conversationPager"), () => conversationList.reset()));

views.conversations = {
  list: () => conversationList.reset(),
  async open(id) {
    if (id === conversationId && $("transcript").childNodes.length) return;
    if (chatAbort) chatAbort.abort();
    showConversation(id);
    const log = $("transcript");
    log.replaceChildren();
    if (!id) return;
    const r = await api("GET", "/v1/conversations/" + encodeURIComponent(id));
    for (const m of r.conversation.messages || []) {
      if (m.role === "tool") {
        line(log, "", "← " + (m.toolName || "tool") + (m.toolError ? " failed: " : ": ") + clip(m.content, 300), m.toolError ? "bad" : "event");
        continue;
      }
      if (m.content) line(log, m.role === "user" ? "you" : m.role, m.content);
      for (const c of m.toolCalls || []) toolLine(log, c.name, c.argumentsJson);
    }
  },
};

function clip(s, n) {
  s = String(s || "");
  return s.length > n ? s.slice(0, n) + "…" : s;
}

$("newConversation").addEventListener("click", action($("newConversation").parentElement, async () => {
  await newConversation();
  await conversationList.reset();
}));

async function newConversation() {
  const r = await api("POST", "/v1/conversations", {});
  showConversation(r.conversation.id);
  note("conversations", r.conversation.id);
  $("transcript").replaceChildren();
}

$("chatForm").addEventListener("submit", action($("chatForm"), async () => {
  if (!conversationId) await newConversation();
  const text = $("chatInput").value.trim();
  $("chatInput").value = "";
  const log = $("transcript");
  line(log, "you", text);
  let answer = null;
  chatAbort = new AbortController();
  await stream("POST", "/v1/conversations/" + encodeURIComponent(conversationId) + "/messages:stream", { content: text }, (ev) => {
    const d = ev.data || {};
    switch (ev.event) {
      case "ResponseChunk":
        if (!answer) answer = line(log, "assistant", "");
        answer.textContent += d.content || "";
        break;
      case "StatusUpdate":
        line(log, "", d.message || d.kind, "event");
        (d.passages || []).forEach((p, i) => passageLine(log, i + 1, p));
        break;
      case "ToolCallStart":
        answer = null;
        toolLine(log, d.toolName, d.argumentsJson);
        break;
      case "ToolCallResult":
        answer = null;
        line(log, "", "← " + (d.toolName || "tool") + " in " + human(seconds(d.duration)) + (d.isError ? " failed: " : ": ") + clip(d.result, 300), d.isError ? "bad" : "event");
        break;
      case "Error":
        line(log, "", "error: " + (d.message || d.code), "bad");
        break;
      case "Completed":
        line(log, "", "done: " + (d.totalTokens || 0) + " tokens in " + human(seconds(d.duration)), "event");
        break;
    }
    log.scrollTop = log.scrollHeight;
  }, chatAbort.signal);
  await conversationList.reset();
  conversationList.select(conversationId);
}));

// ---- analysis jobs ----------------------------------------------------------

const finished = /COMPLETE|FAILED|CANCELLED/;
const jobs = new Map(); // job id → the latest state of each job of the shown analysis
let rootId = "";
let jobAbort = null;
let ticker = 0;

const jobList = pager({
  table: $("jobList"), nav: $("jobPager"), path: "/v1/jobs",
  items: (r) => r.jobs || [],
  query: () => ({
    status: $("jobStatusFilter").value, type: $("jobTypeFilter").value,
    createTimeFrom: since("jobSinceFilter"),
  }),
  row(tr, j) {
    cell(tr, link(href("jobs", j.id), j.title || j.toolName || tail(j.id)));
    cell(tr, short(j.status, "JOB_STATUS_").toLowerCase().replace(/_/g, " "), "status-" + short(j.status, "JOB_STATUS_").toLowerCase());
    cell(tr, j.startTime && j.endTime ? human((at(j.endTime) - at(j.startTime)) / 1000) : "", "duration");
    cell(tr, when(j.createTime), "muted");
  },
});
for (const f of ["jobStatusFilter", "jobTypeFilter", "jobSinceFilter"]) $(f).addEventListener("change", action($("jobPager"), () => jobList.reset()));

views.jobs = {
  list: () => jobList.reset(),
  async open(id) {
    if (id && jobs.has(id) && jobs.get(rootId) && !finished.test(jobs.get(rootId).status)) return; // already live
    if (jobAbort) jobAbort.abort();
    jobs.clear();
    rootId = "";
    showJobHeader("");
    $("timeline").replaceChildren();
    resetResult("Start a job, or pick one from the list, to see its result.");
    jobList.select(id);
    if (!id) return;
    // A link to a tool job shows the analysis it belongs to.
    let job = (await api("GET", "/v1/jobs/" + encodeURIComponent(id))).job;
    while (job.parentId) job = (await api("GET", "/v1/jobs/" + encodeURIComponent(job.parentId))).job;
    await showAnalysis(job);
  },
};

function showJobHeader(id) {
  const a = $("jobId");
  a.textContent = id || "none yet";
  if (id) a.href = href("jobs", id); else a.removeAttribute("href");
  const root = jobs.get(id);
  $("jobState").textContent = root ? short(root.status, "JOB_STATUS_") : "–";
  $("jobState").className = root ? "status-" + short(root.status, "JOB_STATUS_").toLowerCase() : "";
}

// showAnalysis draws an analysis (a root job with its children) and, while it
// runs, follows it live.
async function showAnalysis(root) {
  rootId = root.id;
  jobs.set(root.id, root);
  for (const c of root.children || []) jobs.set(c.id, c);
  delete root.children;
  refreshJobs();
  if (finished.test(root.status)) {
    renderResult(root);
    return;
  }
  await watchAnalysis();
}

$("analysisForm").addEventListener("submit", action($("analysisForm"), async () => {
  if (jobAbort) jobAbort.abort();
  const r = await postOnce("/v1/analyses", { query: $("analysisQuery").value.trim(), responseType: $("analysisType").value });
  jobs.clear();
  note("jobs", r.job.id);
  resetResult("running…");
  jobList.reset(); // the new job in the list; not awaited, the watch starts now
  await showAnalysis(r.job);
  jobList.select(r.job.id);
}));

// watchAnalysis streams the shown analysis's job tree until the analysis ends
// (again: a retry sends it back to waiting for its children).
async function watchAnalysis() {
  const id = rootId;
  if (jobAbort) jobAbort.abort();
  const ctl = (jobAbort = new AbortController());
  resetResult("running…");
  clearInterval(ticker);
  ticker = setInterval(renderTimeline, 250); // running bars grow between events
  try {
    await stream("GET", "/v1/jobs/" + encodeURIComponent(id) + ":watch", undefined, (ev) => {
      const job = ev.data && ev.data.job;
      if (!job || ctl.signal.aborted) return;
      jobs.set(job.id, Object.assign(jobs.get(job.id) || {}, job));
      refreshJobs();
    }, ctl.signal);
  } finally {
    if (jobAbort === ctl) clearInterval(ticker);
  }
  if (ctl.signal.aborted) return;
  // Events carry outputs only up to a size: read the finished job itself.
  const root = (await api("GET", "/v1/jobs/" + encodeURIComponent(id), undefined, ctl.signal)).job;
  delete root.children;
  jobs.set(id, root);
  refreshJobs();
  renderResult(root);
  jobList.load();
}

function refreshJobs() {
  showJobHeader(rootId);
  renderTimeline();
}

const typeOrder = { JOB_TYPE_ANALYSIS_REQUEST: 0, JOB_TYPE_PLANNING_CALL: 1, JOB_TYPE_TOOL_EXECUTION: 2, JOB_TYPE_SYNTHESIS: 3 };
const typeName = { JOB_TYPE_ANALYSIS_REQUEST: "analysis", JOB_TYPE_PLANNING_CALL: "planning", JOB_TYPE_TOOL_EXECUTION: "tool", JOB_TYPE_SYNTHESIS: "synthesis" };

// renderTimeline draws the analysis as a Gantt chart: one bar per job from
// its start to its end (or now), on one time axis from the request's
// creation; colours by status, the duration and attempts beside each bar.
function renderTimeline() {
  const box = $("timeline");
  const root = jobs.get(rootId);
  if (!root) { box.replaceChildren(); return; }
  const all = [...jobs.values()].sort((a, b) => (typeOrder[a.type] - typeOrder[b.type]) || (at(a.createTime) - at(b.createTime)));
  const now = Date.now();
  const t0 = at(root.createTime);
  const start = (j) => at(j.startTime || j.createTime);
  const end = (j) => (j.endTime ? at(j.endTime) : finished.test(j.status) ? start(j) : now);
  const t1 = Math.max(t0 + 1, ...all.map(end));
  const span = t1 - t0;
  const rows = [];
  for (const j of all) {
    const status = short(j.status, "JOB_STATUS_").toLowerCase();
    const row = el("div", "bar-row");
    row.dataset.job = j.id;
    row.dataset.type = typeName[j.type] || "job";
    row.dataset.status = status;
    const label = el("div", "bar-label");
    label.append(el("span", "bar-type", typeName[j.type] || "job"), " ", el("span", null, j.toolName || (j.type === "JOB_TYPE_ANALYSIS_REQUEST" ? clip(j.title, 40) : "")));
    label.title = j.title || j.id;
    const track = el("div", "bar-track");
    const bar = el("div", "bar status-" + status);
    const s = j.startTime ? start(j) : null;
    const left = ((s == null ? at(j.createTime) : s) - t0) / span;
    const width = s == null ? 0 : (end(j) - s) / span;
    bar.style.left = (100 * Math.max(0, left)).toFixed(2) + "%";
    bar.style.width = Math.max(0.6, 100 * width).toFixed(2) + "%";
    if (s == null) bar.classList.add("queued");
    bar.title = "created " + when(j.createTime) + (j.startTime ? ", started " + when(j.startTime) : "") + (j.endTime ? ", ended " + when(j.endTime) : "");
    // The wait between creation and start (a queue, or a parent's
    // planning) as a hatched lead-in.
    if (s != null && s > at(j.createTime)) {
      const wait = el("div", "wait");
      wait.style.left = (100 * Math.max(0, (at(j.createTime) - t0) / span)).toFixed(2) + "%";
      wait.style.width = (100 * ((s - at(j.createTime)) / span)).toFixed(2) + "%";
      track.append(wait);
    }
    track.append(bar);
    const meta = el("div", "bar-meta");
    const dur = el("span", "duration", s == null ? "queued" : human((end(j) - s) / 1000));
    meta.append(dur, el("span", "status status-" + status, status.replace(/_/g, " ")));
    if ((j.attempts || 0) > 1) meta.append(el("span", "attempts", "attempt " + j.attempts));
    if (j.error) meta.title = j.error;
    meta.append(...jobActions(j));
    row.append(label, track, meta);
    rows.push(row);
  }
  const axis = el("div", "bar-row axis");
  const scale = el("div", "bar-track");
  scale.append(el("span", "tick-start", "0 s"), el("span", "tick-end", human(span / 1000)));
  axis.append(el("div", "bar-label"), scale, el("div", "bar-meta", "total " + human(span / 1000)));
  box.replaceChildren(...rows, axis);
}

// jobActions are the buttons a job's bar offers, as the job service allows
// them: cancel an unfinished analysis (all of it) or tool job (that tool
// alone); retry a failed or cancelled tool job, or a failed synthesis,
// unless the analysis was cancelled.
function jobActions(job) {
  const status = job.status || "";
  const type = job.type || "";
  const root = jobs.get(rootId);
  const rootCancelled = job.id !== rootId && root && root.status === "JOB_STATUS_CANCELLED";
  const out = [];
  if (!finished.test(status) && (job.id === rootId || type === "JOB_TYPE_TOOL_EXECUTION")) {
    out.push(jobButton("Cancel", job.id, ":cancel", async () => {}));
  }
  const retryable = (type === "JOB_TYPE_TOOL_EXECUTION" && /FAILED|CANCELLED/.test(status)) ||
    (type === "JOB_TYPE_SYNTHESIS" && status === "JOB_STATUS_FAILED");
  if (retryable && !rootCancelled) {
    out.push(jobButton("Retry", job.id, ":retry", () => watchAnalysis()));
  }
  return out;
}

function jobButton(label, id, verb, after) {
  const b = el("button", null, label);
  b.type = "button";
  b.dataset.job = id;
  b.addEventListener("click", guard(async () => {
    b.disabled = true;
    await api("POST", "/v1/jobs/" + encodeURIComponent(id) + verb, {});
    await after();
  }));
  return b;
}

function resetResult(text) {
  const box = $("analysisResult");
  box.replaceChildren(text);
  box.className = "muted";
  $("analysisRaw").hidden = true;
  $("rawToggle").hidden = true;
  $("rawToggle").textContent = "Show raw JSON";
}

// renderResult shows an analysis's answer as people read it: the summary,
// each finding with its source, the sources and the gaps; other fields of
// a custom schema as lists. The JSON itself is behind a toggle.
function renderResult(root) {
  const box = $("analysisResult");
  box.className = "result";
  box.replaceChildren();
  const status = short(root.status, "JOB_STATUS_");
  if (status !== "COMPLETE") {
    box.append(el("p", "bad", "The analysis " + status.toLowerCase() + (root.error ? ": " + root.error : ".")));
  }
  const out = root.output || {};
  const res = out.summary === undefined && out.result && typeof out.result === "object" ? out.result : out;
  const rest = Object.assign({}, res);
  if (res.summary !== undefined) {
    box.append(el("h4", null, "Summary"), el("p", "summary", res.summary));
    delete rest.summary;
  }
  if (Array.isArray(res.findings)) {
    box.append(el("h4", null, "Findings"));
    const ul = el("ul", "findings");
    for (const f of res.findings) {
      const li = el("li");
      li.append(el("span", "statement", f.statement != null ? f.statement : ""));
      if (f.source) li.append(" ", el("span", "source", f.source));
      // The orchestrator checks each finding's source against what the
      // tools returned and says when it could not tie one to them.
      if (f.supported === false) li.append(" ", el("span", "unsupported", "unsupported" + (f.unsupported_reason ? ": " + f.unsupported_reason : "")));
      ul.append(li);
    }
    if (!res.findings.length) ul.append(el("li", "muted", "none"));
    box.append(ul);
    delete rest.findings;
  }
  for (const [k, cls] of [["data_sources", "sources"], ["data_gaps", "gaps"]]) {
    if (!Array.isArray(res[k])) continue;
    box.append(el("h4", null, words(k)));
    const ul = el("ul", cls);
    for (const s of res[k]) ul.append(el("li", null, typeof s === "string" ? s : ""));
    if (!res[k].length) ul.append(el("li", "muted", "none"));
    box.append(ul);
    delete rest[k];
  }
  if (Object.keys(rest).length) box.append(renderValue(rest));
  $("analysisRaw").textContent = JSON.stringify(root.output || {}, null, 2);
  $("rawToggle").hidden = root.output == null;
}

$("rawToggle").addEventListener("click", () => {
  const raw = $("analysisRaw");
  raw.hidden = !raw.hidden;
  $("rawToggle").textContent = raw.hidden ? "Show raw JSON" : "Hide raw JSON";
});

// ---- documents --------------------------------------------------------------

const documentList = pager({
  table: $("documentList"), nav: $("documentPager"), path: "/v1/documents",
  items: (r) => r.documents || [],
  query: () => ({ sourceType: $("docTypeFilter").value, createTimeFrom: since("docSinceFilter") }),
  row(tr, d) {
    cell(tr, link(href("documents", d.id), d.title || tail(d.id)));
    cell(tr, short(d.sourceType, "SOURCE_TYPE_").toLowerCase());
    cell(tr, when(d.createTime), "muted");
  },
});
for (const f of ["docTypeFilter", "docSinceFilter"]) $(f).addEventListener("change", action($("documentPager"), () => documentList.reset()));

views.documents = {
  list: () => documentList.reset(),
  async open(id) {
    documentList.select(id);
    const view = $("documentView");
    if (!id) {
      view.replaceChildren(el("p", "muted", "Pick a document to see it."));
      return;
    }
    view.replaceChildren(el("p", "muted", "loading…")); // nothing of another document while this one loads
    try {
      showDocument((await api("GET", "/v1/documents/" + encodeURIComponent(id))).document);
    } catch (err) {
      // The error banner says why; the panel no longer says "loading…".
      view.replaceChildren(el("p", "muted", err.status === 404 ? "No document " + id + " (deleted, or of another project)." : "The document could not be read."));
      throw err;
    }
  },
};

function showDocument(d) {
  const view = $("documentView");
  const head = el("h3");
  head.append(link(href("documents", d.id), d.title || d.id));
  const intake = el("p", "small");
  intake.append(link(href("intake", d.id), "Its intake, phase by phase"));
  const facts = {
    id: d.id, source: short(d.sourceType, "SOURCE_TYPE_").toLowerCase(), sourceUrl: d.sourceUrl,
    contentType: d.contentType, chunks: d.chunkCount || 0, routing: short(d.routing, "ROUTING_").toLowerCase(),
    routingReason: d.routingReason, created: when(d.createTime), updated: when(d.updateTime),
  };
  for (const k of Object.keys(facts)) if (facts[k] === undefined || facts[k] === "") delete facts[k];
  view.replaceChildren(head, intake, renderValue(facts));
  if (d.extracts && d.extracts.length) view.append(el("h4", null, "Extracts"), renderValue(d.extracts));
  if (d.rawContent) view.append(el("h4", null, "Text"), el("pre", "doc-text", d.rawContent));
}

$("ingestForm").addEventListener("submit", action($("ingestForm").firstElementChild, async () => {
  const r = await api("POST", "/v1/documents", {
    sourceType: $("sourceType").value, title: $("docTitle").value.trim(), rawContent: $("docContent").value,
  });
  const d = r.document;
  $("ingestResult").textContent = "Stored " + d.id + " as " + (d.contentType || "?") + " in " + (d.chunkCount || 0) + " chunks.";
  note("documents", d.id);
  showDocument(d);
  await documentList.reset();
  documentList.select(d.id);
}));

$("searchForm").addEventListener("submit", action($("searchForm"), async () => {
  const tb = $("hits").tBodies[0];
  tb.replaceChildren(); // a failed search shows no hits of the one before
  const r = await api("POST", "/v1/search", { query: $("searchQuery").value.trim() });
  for (const h of r.hits || []) {
    const row = tb.insertRow();
    cell(row, Number(h.score || 0).toFixed(4));
    cell(row, h.documentId ? link(href("documents", h.documentId), h.title || h.documentId) : h.title);
    cell(row, h.text);
  }
  if (!(r.hits || []).length) cell(tb.insertRow(), "no hits");
}));

// ---- classification runs ----------------------------------------------------

const runs = "/agents/classificationAgent/runs";
let runId = "";
let runAbort = null;
let awaiting = ""; // "FETCH" or "BATCH" while a human decision is due
let fetchSample = null; // the sample conversation of the fetch awaiting approval, from its event
let streamed = null; // the line that .delta events (plan and summary texts) grow

const runList = pager({
  table: $("runList"), nav: $("runPager"), path: "/v1/classifier/runs",
  items: (r) => r.runs || [],
  query: () => ({ state: $("runStateFilter").value, createTimeFrom: since("runSinceFilter") }),
  row(tr, r) {
    cell(tr, link(href("runs", r.id), clip(r.instruction, 60) || tail(r.id)));
    cell(tr, short(r.state, "RUN_STATE_").toLowerCase().replace(/_/g, " "));
    cell(tr, when(r.createTime), "muted");
  },
});
for (const f of ["runStateFilter", "runSinceFilter"]) $(f).addEventListener("change", action($("runPager"), () => runList.reset()));

function showRunId(id) {
  runId = id;
  const a = $("runId");
  a.textContent = id || "none yet";
  if (id) a.href = href("runs", id); else a.removeAttribute("href");
  runList.select(id);
}

views.runs = {
  list: () => runList.reset(),
  async open(id) {
    if (id && id === runId) return;
    if (runAbort) runAbort.abort();
    showRunId(id);
    resetRun();
    if (id) await showRun();
  },
};

// eventState is the run state an event announces, shown while the stream
// runs (the run itself is read when it ends).
const eventState = {
  "agent.run.planning.started": "PLANNING", "agent.run.replanning": "PLANNING", "agent.run.fetching.started": "FETCHING",
  "agent.run.awaiting_fetch_approval": "AWAITING_FETCH_APPROVAL", "agent.run.classifying.started": "CLASSIFYING",
  "agent.run.awaiting_batch_approval": "AWAITING_BATCH_APPROVAL", "agent.run.saving.started": "SAVING",
  "agent.run.summary.started": "SUMMARIZING", "agent.run.completed": "COMPLETED", "agent.run.stopped": "STOPPED",
  "agent.run.error": "ERROR",
};

// A run's steps as people think of them; classify and approve repeat per
// batch until the target is labelled.
const steps = ["plan", "fetch", "approve fetch", "classify", "approve labels", "save", "summary"];
const stepOf = {
  PLANNING: 0, FETCHING: 1, AWAITING_FETCH_APPROVAL: 2, CLASSIFYING: 3,
  AWAITING_BATCH_APPROVAL: 4, SAVING: 5, SUMMARIZING: 6, COMPLETED: 7,
};
let lastStep = -1; // the step the run reached; kept when it stops

// renderStepper marks the steps done, the current one, and a stopped or
// failed run's last step as failed.
function renderStepper(state) {
  if (state in stepOf) lastStep = stepOf[state];
  const failed = state === "STOPPED" || state === "ERROR";
  const ol = $("stepper");
  ol.replaceChildren();
  if (!state) return;
  steps.forEach((name, i) => {
    ol.append(el("li", i < lastStep ? "done" : i === lastStep ? (failed ? "failed" : "current") : "todo", name));
  });
}

// renderProgress shows the labelled share of the plan's target.
function renderProgress(labelled, target) {
  const box = $("runProgress");
  box.hidden = !(target > 0);
  if (box.hidden) return;
  const pct = Math.min(100, Math.round((100 * (labelled || 0)) / target));
  box.querySelector(".progress-bar").style.width = pct + "%";
  box.querySelector(".progress-text").textContent = (labelled || 0) + " of " + target + " labelled (" + pct + "%)";
}

function runEvent(ev) {
  const d = ev.data || {};
  const type = d.type || ev.event;
  const log = $("runEvents");
  if (d.data && d.data.runId && d.data.runId !== runId) {
    showRunId(d.data.runId);
    note("runs", runId);
  }
  if (eventState[type]) {
    $("runState").textContent = eventState[type];
    renderStepper(eventState[type]);
  }
  if (d.data && d.data.target > 0) renderProgress(d.data.totalClassified, d.data.target);
  if (type.endsWith(".delta")) {
    if (!streamed) streamed = line(log, "", "");
    streamed.textContent += typeof d.data === "string" ? d.data : "";
    return;
  }
  streamed = null;
  if (type === "agent.run.awaiting_fetch_approval" && d.data && d.data.fetchedData) fetchSample = d.data.fetchedData.sampleConversation || null;
  line(log, type.replace(/^agent\.run\./, ""), d.logMessage ? " " + d.logMessage : "", "event");
}

// showRun reads the run and shows its state and, when it waits for a
// person, what the decision is about.
async function showRun() {
  const r = (await api("GET", "/v1/classifier/runs/" + encodeURIComponent(runId))).run;
  const state = short(r.state, "RUN_STATE_");
  $("runState").textContent = state;
  if (lastStep < 0) lastStep = reached(r);
  renderStepper(state);
  const plans = r.plans || [];
  renderProgress(r.labelledCount, (plans[plans.length - 1] || {}).targetSampleSize);
  awaiting = state === "AWAITING_FETCH_APPROVAL" ? "FETCH" : state === "AWAITING_BATCH_APPROVAL" ? "BATCH" : "";
  $("approvals").hidden = !awaiting;
  const card = $("approvalCard");
  card.replaceChildren();
  if (awaiting === "FETCH") {
    const plan = (r.plans || [])[(r.plans || []).length - 1] || {};
    card.append(el("h4", null, "Approve the plan and what it fetched"));
    card.append(renderValue({ strategy: plan.strategy, targetSampleSize: plan.targetSampleSize, fetched: (r.fetchedIds || []).length + " conversations" }));
    if (plan.detailsMarkdown) card.append(el("h4", null, "Plan"), el("div", "markdown", plan.detailsMarkdown));
    if (plan.additionalInstructions) card.append(el("h4", null, "Additional instructions"), el("p", null, plan.additionalInstructions));
    if (fetchSample) card.append(el("h4", null, "Sample conversation"), renderValue(fetchSample));
    $("approve").textContent = "Approve fetch";
    $("reject").textContent = "Reject and replan";
  } else if (awaiting === "BATCH") {
    card.append(el("h4", null, "Approve these labels (" + (r.pendingBatch || []).length + " conversations)"));
    const t = el("table", "labels");
    const h = t.createTHead().insertRow();
    for (const c of ["Conversation", "Label", "Reason"]) h.append(el("th", null, c));
    const tb = t.createTBody();
    for (const c of r.pendingBatch || []) {
      const tr = tb.insertRow();
      cell(tr, c.conversationId);
      cell(tr, short(c.label, "LABEL_").toLowerCase(), "label-" + short(c.label, "LABEL_").toLowerCase());
      cell(tr, c.reason);
    }
    card.append(t);
    $("approve").textContent = "Approve labels and save";
    $("reject").textContent = "Reject and reclassify";
  }
  if (r.summary && !awaiting) {
    card.append(el("h4", null, "Summary"), el("div", "markdown", r.summary));
    $("approvals").hidden = false;
    for (const b of ["approve", "reject", "stopRun"]) $(b).hidden = true;
  } else {
    for (const b of ["approve", "reject", "stopRun"]) $(b).hidden = false;
  }
  $("feedback").hidden = !awaiting;
}

// reached is how far a run read back (not followed) got, from what it holds:
// where a stopped or failed run stopped.
function reached(r) {
  if (r.summary) return 6;
  if ((r.labelledCount || 0) > 0) return 5;
  if ((r.pendingBatch || []).length) return 4;
  if ((r.fetchedIds || []).length) return 2;
  if ((r.plans || []).length) return 1;
  return 0;
}

function resetRun() {
  $("runEvents").replaceChildren();
  $("runState").textContent = "–";
  $("approvals").hidden = true;
  fetchSample = null;
  lastStep = -1;
  renderStepper("");
  renderProgress(0, 0);
}

$("runForm").addEventListener("submit", action($("runForm"), async () => {
  if (runAbort) runAbort.abort();
  runAbort = new AbortController();
  resetRun();
  showRunId("");
  await stream("POST", runs, { instruction: $("instruction").value.trim() }, runEvent, runAbort.signal);
  await showRun();
  await runList.reset();
  runList.select(runId);
}));

function command(kind) {
  return action($("runStatus"), async () => {
    const type = kind === "STOP" ? "COMMAND_TYPE_STOP" : "COMMAND_TYPE_" + kind + "_" + awaiting;
    if (runAbort) runAbort.abort();
    runAbort = new AbortController();
    $("approvals").hidden = true;
    await stream("POST", runs + "/" + encodeURIComponent(runId) + "/command", { type, feedback: $("feedback").value.trim() }, runEvent, runAbort.signal);
    $("feedback").value = "";
    await showRun();
    runList.load();
  });
}
$("approve").addEventListener("click", command("APPROVE"));
$("reject").addEventListener("click", command("REJECT"));
$("stopRun").addEventListener("click", command("STOP"));

// The SQL agent's tab is sql.js, the intake's intake.js, token usage
// usage.js: each adds to views.
// Deferred scripts all run before DOMContentLoaded, so the first route
// finds every view.
window.addEventListener("DOMContentLoaded", guard(route));
