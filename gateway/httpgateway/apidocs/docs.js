"use strict";
// The API reference page: renderDocs turns the gateway's OpenAPI v2
// document (/openapi.json) into HTML, routes grouped by service tag, each
// with its method, path, parameters and request and response schemas.
// It is a pure function of the document, so a test runs it in node; in a
// browser the end of this file fetches the document and shows the result.

const METHODS = ["get", "post", "put", "patch", "delete"];
// Nesting shown inline before a schema is only named (recursive types
// such as Struct would otherwise never end).
const MAX_DEPTH = 4;

function esc(s) {
  return String(s == null ? "" : s).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
}

function refName(ref) {
  return String(ref).replace(/^#\/definitions\//, "");
}

// resolve follows a $ref to its definition.
function resolve(s, defs) {
  return s && s.$ref ? defs[refName(s.$ref)] || {} : s || {};
}

// typeText is a schema's type in a few words: "string (date-time)",
// "array of v1UsagePoint", "v1Role: ROLE_USER | ROLE_TOOL".
function typeText(s, defs) {
  if (!s) return "";
  if (s.$ref) {
    const name = refName(s.$ref), d = defs[name] || {};
    return d.enum ? name + ": " + d.enum.join(" | ") : name;
  }
  if (s.type === "array") return "array of " + typeText(s.items, defs);
  if (s.enum) return (s.type || "") + ": " + s.enum.join(" | ");
  if (s.type === "object" && s.additionalProperties) return "map of " + typeText(s.additionalProperties, defs);
  return (s.type || "object") + (s.format ? " (" + s.format + ")" : "");
}

// nested is the object schema a property leads to, if any (through arrays
// and $refs), with its name.
function nested(s, defs) {
  let cur = s;
  if (cur && cur.type === "array") cur = cur.items;
  if (!cur || !cur.$ref) return null;
  const d = defs[refName(cur.$ref)];
  return d && d.properties ? { name: refName(cur.$ref), def: d } : null;
}

// schemaHTML renders an object schema's properties as a table, nested
// objects in collapsible rows; seen breaks cycles.
function schemaHTML(s, defs, depth, seen) {
  const d = resolve(s, defs);
  const props = d.properties || {};
  const names = Object.keys(props);
  if (!names.length) return '<p class="note">' + esc(typeText(s, defs) || "empty object") + "</p>";
  const required = new Set(d.required || []);
  let h = '<table class="schema"><tr><th>field</th><th>type</th><th>description</th></tr>';
  for (const name of names) {
    const p = props[name];
    const desc = p.description || p.title || (p.$ref && (defs[refName(p.$ref)] || {}).description) || "";
    h += "<tr><td><code>" + esc(name) + "</code>" + (required.has(name) ? ' <span class="req">required</span>' : "") +
      '</td><td class="type">' + esc(typeText(p, defs)) + '</td><td class="desc">' + esc(desc);
    const n = nested(p, defs);
    if (n && depth < MAX_DEPTH && !seen.has(n.name)) {
      const next = new Set(seen).add(n.name);
      h += "<details><summary>" + esc(n.name) + " fields</summary>" + schemaHTML({ $ref: "#/definitions/" + n.name }, defs, depth + 1, next) + "</details>";
    }
    h += "</td></tr>";
  }
  return h + "</table>";
}

function schemaBlock(title, s, defs) {
  const name = s && s.$ref ? refName(s.$ref) : typeText(s, defs);
  const seen = new Set(s && s.$ref ? [refName(s.$ref)] : []);
  return "<h4>" + esc(title) + ' <span class="type">' + esc(name) + "</span></h4>" + schemaHTML(s, defs, 1, seen);
}

function operationHTML(o, defs) {
  const op = o.op, id = op.operationId || o.method + " " + o.path;
  const route = o.method.toUpperCase() + " " + o.path;
  let h = '<article class="op" id="op-' + esc(id) + '" data-route="' + esc(route) + '">' +
    '<h3><span class="method m-' + esc(o.method) + '">' + esc(o.method.toUpperCase()) + '</span><code class="path">' + esc(o.path) +
    '</code><span class="opid">' + esc(op.operationId || "") + "</span></h3>";
  const text = [op.summary, op.description].filter(Boolean).join("\n\n");
  if (text) h += '<p class="summary">' + esc(text) + "</p>";
  const params = (op.parameters || []).filter((p) => p.in !== "body");
  if (params.length) {
    h += "<h4>Parameters</h4><table><tr><th>name</th><th>in</th><th>type</th><th>description</th></tr>";
    for (const p of params) {
      const t = p.type === "array" ? "array of " + typeText(p.items, defs) : typeText(p.schema || p, defs);
      h += "<tr><td><code>" + esc(p.name) + "</code>" + (p.required ? ' <span class="req">required</span>' : "") +
        "</td><td>" + esc(p.in) + '</td><td class="type">' + esc(t) + '</td><td class="desc">' + esc(p.description || "") + "</td></tr>";
    }
    h += "</table>";
  }
  const body = (op.parameters || []).find((p) => p.in === "body");
  if (body) h += schemaBlock("Request body", body.schema, defs);
  const ok = Object.keys(op.responses || {}).find((c) => /^2/.test(c));
  if (ok) {
    const r = op.responses[ok];
    if (r.schema) h += schemaBlock("Response " + ok, r.schema, defs);
    else h += "<h4>Response " + esc(ok) + '</h4><p class="note">' + esc(r.description || "") + "</p>";
  }
  if ((op.responses || {}).default) h += '<p class="note">Errors: <code>{code, message, details}</code> with the HTTP status of the gRPC code.</p>';
  return h + "</article>";
}

// renderDocs returns {nav, main}: the HTML of the navigation and of the
// reference, one article per operation (data-route="METHOD /path").
function renderDocs(spec) {
  const defs = spec.definitions || {};
  const groups = new Map();
  for (const t of spec.tags || []) groups.set(t.name, { description: t.description || "", ops: [] });
  for (const path of Object.keys(spec.paths || {}).sort()) {
    for (const method of METHODS) {
      const op = spec.paths[path][method];
      if (!op) continue;
      const tag = (op.tags && op.tags[0]) || "Other";
      if (!groups.has(tag)) groups.set(tag, { description: "", ops: [] });
      groups.get(tag).ops.push({ path, method, op });
    }
  }
  let nav = "", main = "";
  for (const [tag, g] of groups) {
    if (!g.ops.length) continue;
    nav += "<h2>" + esc(tag) + "</h2><ul>";
    main += '<section class="tag" id="tag-' + esc(tag) + '"><h2>' + esc(tag) + "</h2>";
    if (g.description) main += '<p class="summary">' + esc(g.description) + "</p>";
    for (const o of g.ops) {
      const id = o.op.operationId || o.method + " " + o.path;
      nav += '<li><a href="#op-' + esc(id) + '" data-route="' + esc(o.method.toUpperCase() + " " + o.path) + '">' +
        esc(o.method.toUpperCase() + " " + o.path) + "</a></li>";
      main += operationHTML(o, defs);
    }
    nav += "</ul>";
    main += "</section>";
  }
  return { nav, main };
}

// filterRoutes hides the operations whose text does not hold every word
// of q.
function filterRoutes(root, q) {
  const words = q.toLowerCase().split(/\s+/).filter(Boolean);
  for (const el of root.querySelectorAll("article.op, nav li")) {
    const text = el.textContent.toLowerCase();
    el.hidden = !words.every((w) => text.includes(w));
  }
  for (const s of root.querySelectorAll("section.tag")) {
    s.hidden = !s.querySelector("article.op:not([hidden])");
  }
}

if (typeof document !== "undefined") {
  fetch("/openapi.json", { headers: { Accept: "application/json" } })
    .then((r) => {
      if (!r.ok) throw new Error("GET /openapi.json: HTTP " + r.status);
      return r.json();
    })
    .then((spec) => {
      const out = renderDocs(spec);
      document.getElementById("nav").innerHTML = out.nav;
      document.getElementById("docs").innerHTML = out.main;
      if (spec.info && spec.info.version) document.title += " " + spec.info.version;
      const box = document.getElementById("filter");
      box.addEventListener("input", () => filterRoutes(document, box.value));
      if (location.hash) {
        const target = document.getElementById(decodeURIComponent(location.hash.slice(1)));
        if (target) target.scrollIntoView();
      }
    })
    .catch((err) => {
      document.getElementById("docs").innerHTML = '<p class="error">' + esc(err.message) + "</p>";
    });
}
