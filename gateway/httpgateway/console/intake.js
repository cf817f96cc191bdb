// The console's intake tab (console.js holds the helpers and routes): files
// uploaded as one document (POST /v1/documents:upload), and each
// document's qualifier pipeline phase by phase — vision (stage 1 per
// attachment, stage 2), content type with its reason and who decided,
// the extracted fields, chunks, graph links, routing and the analysis job
// a LIFT_UP started — with each phase's time, tokens and errors, followed
// live while it runs. #/intake/<document id> is a document's intake.
"use strict";

let intakeShown = "";
let intakeAbort = null; // the live follow of the shown document

const intakeList = pager({
  table: $("intakeList"), nav: $("intakePager"), path: "/v1/documents",
  items: (r) => r.documents || [],
  row(tr, d) {
    cell(tr, link(href("intake", d.id), d.title || tail(d.id)));
    cell(tr, d.contentType || "–");
    cell(tr, routingWords(d.routing) || "pending", "routing");
    cell(tr, when(d.createTime), "muted");
  },
});

function routingWords(r) {
  return { ROUTING_DONE: "done", ROUTING_LIFT_UP: "lift up" }[r] || "";
}

const decidedWords = { DECIDED_BY_RULES: "rules", DECIDED_BY_MODEL: "the model", DECIDED_BY_FALLBACK: "the fallback (the model gave no usable answer)" };

views.intake = {
  list: () => intakeList.reset(),
  async open(id) {
    intakeList.select(id);
    if (id && id === intakeShown && intakeAbort && !intakeAbort.signal.aborted) return; // already shown, or followed
    if (intakeAbort) intakeAbort.abort();
    intakeShown = id;
    if (!id) {
      $("intakeView").replaceChildren(el("p", "muted", "Upload files, or pick a document, to see its intake phase by phase."));
      return;
    }
    // Nothing of the document shown before stays while this one loads.
    $("intakeView").replaceChildren(el("p", "muted", "loading…"));
    await followIntake(id);
  },
};

// followIntake shows a document's intake and, until the pipeline finishes,
// follows it: its intake events as they happen (GET …/intake:watch, SSE),
// or GetDocument twice a second where the watch is not available.
async function followIntake(id) {
  const ctl = (intakeAbort = new AbortController());
  const path = "/v1/documents/" + encodeURIComponent(id);
  let d = (await api("GET", path, undefined, ctl.signal)).document;
  const running = (doc) => !!doc.pipeline && !doc.pipeline.finished;
  renderIntake(d, running(d));
  if (running(d)) {
    try {
      await stream("GET", path + "/intake:watch", undefined, (ev) => {
        const e = ev.data || {};
        if (ctl.signal.aborted || !e.pipeline) return;
        d = Object.assign({}, d, { pipeline: Object.assign({}, d.pipeline, e.pipeline) });
        renderIntake(d, !e.pipeline.finished);
      }, ctl.signal);
    } catch (err) {
      if (err.name === "AbortError") return;
    }
    // The finished document holds what events leave out (chunk ids, the
    // text); polled also when the watch failed or ended early.
    for (;;) {
      d = (await api("GET", path, undefined, ctl.signal)).document;
      if (!running(d)) break;
      renderIntake(d, true);
      await new Promise((res) => setTimeout(res, 500));
      if (ctl.signal.aborted) return;
    }
    renderIntake(d, false);
    intakeList.load();
  }
  await renderGraph(d, ctl.signal);
}

function section(view, name, title) {
  const s = el("section", "intake-section");
  s.dataset.section = name;
  s.append(el("h4", null, title));
  view.append(s);
  return s;
}

// renderIntake draws the pipeline of d; live marks it as still running.
function renderIntake(d, live) {
  const view = $("intakeView");
  const p = d.pipeline || {};
  const head = el("h3");
  head.append(link(href("intake", d.id), d.title || d.id), " ", link(href("documents", d.id), "the document", "small"));
  view.replaceChildren(head);
  if (!d.pipeline) {
    // The upload's answer carries no pipeline: its extraction is queued.
    if (!live) view.append(el("p", "muted", "No intake pipeline is recorded for this document."));
    else {
      const status = el("p", "intake-status");
      status.dataset.state = "running";
      status.append(el("span", "spinner"), " uploaded; extraction " + short(d.extractionStatus, "EXTRACTION_JOB_STATUS_").toLowerCase() + ", reading the pipeline…");
      view.append(status);
    }
    return;
  }
  const phases = intakePhases(p);
  const status = el("p", "intake-status");
  status.dataset.state = live ? "running" : "finished";
  const took = phases.reduce((s, ph) => s + (ph.seconds || 0), 0);
  const tokens = phases.reduce((s, ph) => s + ph.tokens, 0);
  if (live) {
    status.append(el("span", "spinner"), " running for " + human((Date.now() - at(d.createTime)) / 1000));
  } else {
    status.append(el("span", "ok", "finished"), " · " + human(took) + " in its phases" + (tokens ? " · " + count(tokens) + " model tokens" : ""));
  }
  view.append(status);

  const strip = el("ol", "phases");
  for (const ph of phases) {
    const li = el("li", "phase phase-" + ph.state);
    li.dataset.phase = ph.name;
    li.dataset.state = ph.state;
    li.append(el("span", "phase-name", ph.label));
    const time = ph.state === "skipped" ? "skipped" : ph.seconds != null ? human(ph.seconds) : ph.state === "running" ? "running…" : "–";
    li.append(el("span", "phase-time", time));
    if (ph.tokens) li.append(el("span", "phase-tokens", count(ph.tokens) + " tokens"));
    if (ph.skipped) li.append(el("span", "phase-note", ph.skipped));
    if (ph.errors.length) li.append(el("span", "phase-note bad", ph.errors.length === 1 ? "1 error" : ph.errors.length + " errors"));
    strip.append(li);
  }
  view.append(strip);
  const failed = phases.filter((ph) => ph.errors.length);
  if (failed.length) {
    const s = section(view, "errors", "Errors (collected; none stops the pipeline)");
    const ul = el("ul", "bad");
    for (const ph of failed) for (const e of ph.errors) ul.append(el("li", null, ph.label + ": " + e));
    s.append(ul);
  }

  renderVision(section(view, "vision", "Vision"), p);
  const ct = p.contentType || {};
  section(view, "content-type", "Content type").append(ct.type ? factList({
    Type: short(ct.type, "INTAKE_CONTENT_TYPE_").toLowerCase(), "Finer type": ct.fineType, Reason: ct.reason,
    "Decided by": decidedWords[ct.decidedBy] || "",
  }) : el("p", "muted", "not decided yet"));
  renderExtraction(section(view, "extraction", "Extraction"), p.extraction);

  const ix = p.indexing || {};
  const chunks = section(view, "chunks", "Chunks");
  if (ix.chunkCount != null || ix.processedCount != null) {
    const ids = el("ul", "chunk-ids");
    for (const c of ix.chunkIds || []) ids.append(el("li", "id", c));
    chunks.append(factList({
      Chunks: count(ix.chunkCount) + " to index, " + count(ix.processedCount) + " stored and linked",
      "Base node": ix.baseNodeKey, "Base info": ix.baseInfo, "Chunk ids": (ix.chunkIds || []).length ? ids : "",
      Problems: ix.errors,
    }));
  } else chunks.append(el("p", "muted", "not indexed yet"));
  const graph = section(view, "graph", "Graph links");
  graph.id = "intakeGraph";
  graph.append(el("p", "muted", live ? "shown when the intake finishes" : "reading the graph…"));

  const r = p.routing || {};
  const routing = section(view, "routing", "Routing");
  const job = r.liftedJobId || d.liftedJobId;
  routing.append(r.routing ? factList({
    Routing: routingWords(r.routing), Reason: r.reason, "Decided by": decidedWords[r.decidedBy] || "", Warning: r.warning,
    "Analysis job": job ? link(href("jobs", job), job, "id lifted-job") : "",
  }) : el("p", "muted", live ? "decided when extraction ends" : "not decided"));
}

// renderVision lists the attachments, what vision made of each (stage 1)
// and the content type's details it then read (stage 2).
function renderVision(s, p) {
  const atts = p.attachments || [];
  if (!atts.length) {
    s.append(el("p", "muted", "No attachments: vision had nothing to read."));
    return;
  }
  const t = el("table", "attachments");
  const h = t.createTHead().insertRow();
  for (const c of ["File", "Type", "Size", "Stage 1: what vision saw"]) h.append(el("th", null, c));
  const tb = t.createTBody();
  for (const a of atts) {
    const tr = tb.insertRow();
    tr.dataset.visual = a.visual ? "yes" : "no";
    cell(tr, a.name);
    cell(tr, a.mimeType + (a.declaredMimeType && a.declaredMimeType !== a.mimeType ? " (declared " + a.declaredMimeType + ")" : ""));
    cell(tr, bytes(a.sizeBytes));
    cell(tr, a.visual ? a.visionAnalysis || "not read yet" : "not sent to vision" + (a.note ? ": " + a.note : ""), a.visual ? "text" : "muted");
  }
  s.append(t);
  const v = p.vision || {};
  s.append(factList({ "Stage 1 summary": v.generalSummary, "Stage 2: details for the content type": v.typeSpecificDetails, "Vision model": v.model }));
}

// extractionFields are the labels of each extraction shape's fields, in
// the order people read them.
const extractionShapes = { email: "e-mail", jira: "ticket", confluence: "wiki page", log: "log", generic: "other content" };

function renderExtraction(s, x) {
  const shape = x && Object.keys(x).find((k) => x[k] && typeof x[k] === "object");
  if (!shape) {
    s.append(el("p", "muted", "not extracted yet"));
    return;
  }
  s.append(el("p", "muted small", "Fields of the " + (extractionShapes[shape] || shape) + " extraction"));
  const f = x[shape];
  const out = {};
  for (const [k, v] of Object.entries(f)) {
    let shown = v;
    if (/Time$|^date$/.test(k)) shown = when(v);
    else if (k === "summarizedBy") shown = decidedWords[v] || "";
    else if (k === "levelCounts") shown = Object.entries(v).map(([lvl, n]) => lvl + " " + count(n)).join(", ");
    else if (k === "lineCount") shown = count(v);
    out[words(k)] = shown;
  }
  const dl = factList(out);
  dl.classList.add("extraction");
  s.append(dl);
}

// renderGraph lists the document's links in the knowledge graph: its
// chunks PART_OF it, and what it MENTIONS.
async function renderGraph(d, signal) {
  const box = $("intakeGraph");
  if (!box || !d.pipeline) return;
  const key = "doc:" + d.id;
  const r = await api("GET", "/v1/graph/nodes/" + encodeURIComponent(key) + "/neighbors", undefined, signal);
  if (signal.aborted || !box.isConnected) return;
  const label = new Map((r.nodes || []).map((n) => [n.key, n.label || n.key]));
  label.set(key, "this document");
  const edges = (r.edges || []).filter((e) => e.fromKey === key || e.toKey === key)
    .sort((a, b) => (a.type === "PART_OF" ? 0 : 1) - (b.type === "PART_OF" ? 0 : 1) || a.fromKey.localeCompare(b.fromKey));
  box.replaceChildren(box.firstChild);
  if (!edges.length) {
    box.append(el("p", "muted", "no links"));
    return;
  }
  const n = (t) => edges.filter((e) => e.type === t).length;
  box.append(el("p", "muted small", n("PART_OF") + " chunks PART_OF the document, " + n("MENTIONS") + " entities it MENTIONS"));
  const t = el("table", "graph-links");
  const h = t.createTHead().insertRow();
  for (const c of ["From", "Link", "To"]) h.append(el("th", null, c));
  const tb = t.createTBody();
  for (const e of edges) {
    const tr = tb.insertRow();
    tr.dataset.type = e.type;
    cell(tr, clip(label.get(e.fromKey) || e.fromKey, 90));
    cell(tr, e.type, "edge");
    cell(tr, clip(label.get(e.toKey) || e.toKey, 90));
  }
  box.append(t);
}

$("uploadForm").addEventListener("submit", action($("uploadForm").firstElementChild, async () => {
  const form = new FormData();
  for (const f of $("uploadFiles").files) form.append("file", f, f.name);
  const title = $("uploadTitle").value.trim();
  if (title) form.append("title", title);
  if ($("uploadSourceType").value) form.append("source_type", $("uploadSourceType").value);
  const h = headers();
  delete h["Content-Type"]; // the browser sets multipart/form-data with its boundary
  const resp = await fetch("/v1/documents:upload", { method: "POST", headers: h, body: form });
  if (!resp.ok) throw await failure(resp);
  const r = await resp.json();
  $("uploadFiles").value = "";
  $("uploadTitle").value = "";
  if (intakeAbort) intakeAbort.abort();
  intakeShown = r.document.id;
  note("intake", r.document.id);
  renderIntake(r.document, true); // shown from the moment the upload answered
  intakeList.reset().then(() => intakeList.select(r.document.id));
  await followIntake(r.document.id);
  if (r.unchanged) $("intakeView").querySelector(".intake-status").append(" · the same content was uploaded before: nothing was redone");
}));
