// The console's usage tab (console.js holds the helpers and routes): the
// tokens the model gateway counted per logical model, provider and tenant
// over the last hour (per minute) or day (per hour), GET /v1/usage, as
// stacked columns over time and a table of totals.
// #/usage/<minute|hour>/<logicalModel|provider|tenantId> is a view of it.
"use strict";

const usageResolutions = { minute: "USAGE_RESOLUTION_MINUTE", hour: "USAGE_RESOLUTION_HOUR" };
const usageDimensions = { logicalModel: "logical model", provider: "provider", tenantId: "tenant" };
// Series colours, in the order of the series (largest first).
const usagePalette = ["#2563eb", "#15803d", "#b45309", "#7c3aed", "#be123c", "#0e7490", "#4d7c0f", "#9ca3af"];

views.usage = {
  async open(id) {
    const [res, by] = (id || "").split("/");
    $("usageResolution").value = usageResolutions[res] ? res : "minute";
    $("usageBy").value = usageDimensions[by] ? by : "logicalModel";
    await showUsage();
  },
};

// A changed choice is a view of its own: its URL, in the history.
for (const id of ["usageResolution", "usageBy"]) {
  $(id).addEventListener("change", () => { location.hash = "#/usage/" + $("usageResolution").value + "/" + $("usageBy").value; });
}
$("usageRefresh").addEventListener("click", action($("usageRefresh").parentElement, () => showUsage()));

async function showUsage() {
  const res = $("usageResolution").value;
  const by = $("usageBy").value;
  const r = await api("GET", "/v1/usage" + "?" + new URLSearchParams({ resolution: usageResolutions[res] }));
  const u = usageSeries(r, by);
  const replicas = (r.replicas || 1) + " model gateway replica" + ((r.replicas || 1) === 1 ? "" : "s") +
    (r.replicasUnanswered ? " (" + r.replicasUnanswered + " did not answer: their calls are missing)" : "");
  $("usageNote").textContent = "Counted in memory by " + replicas + ", each since it started, per " + res +
    "; tenants past the first " + count(r.tenantLimit) + " are counted as “other”, calls on no tenant's behalf as “none”. " +
    "A tenant's key sees its own tenant; an operator key (or tenant * without keys) every tenant.";
  renderUsageChart(u, res);
  renderUsageTotals(r.points || []);
}

// renderUsageChart draws one column per bucket, stacked by series, scaled
// to the fullest bucket; each column says its time and tokens on hover.
function renderUsageChart(u, res) {
  const chart = $("usageChart");
  const legend = $("usageLegend");
  chart.replaceChildren();
  legend.replaceChildren();
  if (!u.max) {
    chart.append(el("p", "muted", "No model calls counted in this window."));
    return;
  }
  const stamp = (ms) => new Date(ms).toLocaleTimeString(undefined, { hour: "2-digit", minute: "2-digit" });
  const plot = el("div", "usage-plot");
  u.buckets.forEach((t, i) => {
    const col = el("div", "usage-col");
    col.dataset.bucket = String(i);
    col.dataset.tokens = String(u.totals[i]);
    const parts = [];
    u.series.forEach((s, k) => {
      const v = s.values[i];
      if (!v) return;
      const seg = el("div", "usage-seg");
      seg.dataset.series = s.name;
      seg.style.height = (100 * v / u.max).toFixed(2) + "%";
      seg.style.background = usagePalette[Math.min(k, usagePalette.length - 1)];
      col.append(seg);
      parts.push(s.name + " " + count(v));
    });
    col.title = stamp(t) + (res === "hour" ? " (hour)" : "") + ": " + (parts.length ? count(u.totals[i]) + " tokens — " + parts.join(", ") : "no calls");
    plot.append(col);
  });
  const axis = el("div", "usage-axis");
  axis.append(el("span", null, stamp(u.buckets[0])), el("span", null, stamp(u.buckets[Math.floor(u.buckets.length / 2)])), el("span", null, "now"));
  chart.append(el("div", "usage-max muted small", count(u.max) + " tokens"), plot, axis);
  u.series.forEach((s, k) => {
    const item = el("span", "usage-key");
    item.dataset.series = s.name;
    const swatch = el("span", "swatch");
    swatch.style.background = usagePalette[Math.min(k, usagePalette.length - 1)];
    item.append(swatch, s.name + ": " + count(s.total) + " tokens in " + count(s.calls) + (s.calls === 1 ? " call" : " calls"));
    legend.append(item);
  });
}

// renderUsageTotals adds up the window per logical model, provider and
// tenant, the most tokens first.
function renderUsageTotals(points) {
  const rows = new Map();
  for (const p of points) {
    const key = [p.logicalModel, p.provider, p.tenantId].join("\u0000");
    const r = rows.get(key) || { model: p.logicalModel, provider: p.provider, tenant: p.tenantId, calls: 0, prompt: 0, completion: 0, reasoning: 0 };
    r.calls += Number(p.calls || 0);
    r.prompt += Number(p.promptTokens || 0);
    r.completion += Number(p.completionTokens || 0);
    r.reasoning += Number(p.reasoningTokens || 0);
    rows.set(key, r);
  }
  const tb = $("usageTotals").tBodies[0];
  tb.replaceChildren();
  for (const r of [...rows.values()].sort((a, b) => b.prompt + b.completion - (a.prompt + a.completion))) {
    const tr = tb.insertRow();
    tr.dataset.model = r.model;
    cell(tr, r.model);
    cell(tr, r.provider);
    cell(tr, r.tenant);
    for (const n of [r.calls, r.prompt, r.completion, r.reasoning, r.prompt + r.completion]) cell(tr, count(n), "num");
  }
  if (!tb.rows.length) cell(tb.insertRow(), "nothing counted yet", "muted").colSpan = 8;
}
