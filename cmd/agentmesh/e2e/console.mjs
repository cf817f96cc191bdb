import { chromium } from "playwright-core";
// Drives the web console in headless Chromium against a running mesh on the
// simulator provider (cmd/agentmesh/e2e, TestConsoleInABrowser): every tab's
// main action, start to finish, and what a person relies on around it —
// each item's link restores its view after a reload and through back and
// forward, lists are filled and paged, work in progress shows as busy with
// its elapsed time, an analysis is a timeline of bars, results are rendered
// rather than raw JSON, and durations are in human units. BASE is the
// gateway URL, CHROMIUM the browser, SHOTS a directory for screenshots.
const base = process.env.BASE + "/console/";
const shots = process.env.SHOTS;
const passed = [];
function expect(ok, what) {
  if (!ok) throw new Error("console check failed: " + what);
  passed.push(what);
}
// JSON as a person would see it pasted: an object or array opening on a
// quoted key or string.
const rawJSON = /[{[]\s*"/;
// A duration as the console spells it: 420 ms, 2.8 s, 3 min 5 s, 1 h 2 min.
const humanDuration = /^(\d+ ms|\d+\.\d s|\d+ min \d+ s|\d+ h \d+ min)$/;
const protoDuration = /\d+(\.\d+)?s\b/;
async function shot(name) {
  await page.screenshot({ path: shots + "/" + name + ".png", fullPage: true });
}
const idFrom = (hash, tab) => (new RegExp("^#/" + tab + "/([^/]+)$").exec(hash) || [])[1];
const hash = () => page.evaluate(() => location.hash);

const browser = await chromium.launch({ executablePath: process.env.CHROMIUM, args: ["--no-sandbox"] });
const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
const errors = [];
page.on("console", (m) => { if (m.type() === "error") errors.push(m.text()); });
page.on("pageerror", (e) => errors.push(String(e)));

// ---- overview
await page.goto(base);
await page.waitForSelector("#health tbody tr");
await page.waitForSelector("#models tbody tr");
expect(await page.locator("#health tbody tr").count() === 6, "overview: six services in the health table");
expect(await page.locator("#health tbody td.ok").count() === 6, "overview: every service SERVING");
await shot("overview");

// ---- chat
await page.click("a[data-tab=conversations]");
expect(await hash() === "#/conversations", "chat: the tab has its own URL");
await page.fill("#chatInput", "What changed in the last release?");
await page.click("#chatForm button");
await page.waitForSelector("#chatForm .busy .spinner");
expect(await page.locator("#chatForm button").isDisabled(), "chat: Send disabled while the turn streams");
await page.waitForFunction(() => {
  const said = [...document.querySelectorAll("#transcript .who")].find((w) => w.textContent === "assistant");
  return said && said.nextSibling.textContent.length > 0 && document.querySelector("#chatForm .busy") &&
    !document.querySelector("#transcript").textContent.includes("done:");
}, null, { timeout: 20000, polling: 10 });
expect(true, "chat: the answer shown as it streams, before the turn ends");
await page.waitForFunction(() => document.querySelector("#transcript").textContent.includes("done:"), null, { timeout: 20000 });
await page.waitForSelector("#chatForm .busy", { state: "detached" });
expect(await page.locator("#chatForm button").isEnabled(), "chat: Send enabled again when the turn ends");
const transcript = await page.textContent("#transcript");
expect(transcript.includes("[simulated] reply"), "chat: the streamed answer in the transcript");
const took = /done: \d+ tokens in (.+)$/m.exec(await page.locator("#transcript .event", { hasText: "done:" }).last().textContent());
expect(took && humanDuration.test(took[1]), "chat: the turn's duration in human units (" + (took && took[1]) + ")");
const conversation = idFrom(await hash(), "conversations");
expect(conversation && (await page.textContent("#conversationId")) === conversation, "chat: the new conversation's id in the URL and on the page");
await page.waitForSelector(`#conversationList tr[data-id="${conversation}"]`);
expect(true, "chat: the conversation in the list");
await page.reload();
await page.waitForFunction(() => document.querySelector("#transcript").textContent.includes("[simulated] reply"));
expect((await page.textContent("#transcript")).includes("What changed in the last release?"), "chat: the link restores the conversation after a reload");
await shot("chat");
// Pages of conversations: eleven more than one page of ten.
for (let i = 0; i < 11; i++) {
  const r = await page.request.post(process.env.BASE + "/v1/conversations", { data: { title: "paged " + i } });
  expect(r.ok(), "chat: conversation created for paging");
}
await page.click("a[data-tab=overview]");
await page.click("a[data-tab=conversations]");
await page.waitForFunction(() => document.querySelectorAll("#conversationList tbody tr").length === 10);
expect(await page.locator("#conversationPager button", { hasText: "Next" }).isEnabled(), "chat: a next page offered past ten conversations");
const firstPage = await page.textContent("#conversationList tbody");
await page.click("#conversationPager button:has-text('Next')");
await page.waitForFunction((first) => document.querySelector("#conversationList tbody").textContent !== first, firstPage);
expect(await page.locator("#conversationList tbody tr").count() >= 2, "chat: the second page lists the rest");
await page.click("#conversationPager button:has-text('Previous')");
await page.waitForFunction((first) => document.querySelector("#conversationList tbody").textContent === first, firstPage);
expect(true, "chat: previous returns to the first page");
// Another tenant sees none of these conversations (and not the one open);
// back to the default, all.
if (await page.locator(`#conversationList tr[data-id="${conversation}"] a`).count()) {
  await page.click(`#conversationList tr[data-id="${conversation}"] a`);
} else { // on the other page: its link then
  await page.goto(base + "#/conversations/" + conversation);
}
await page.waitForFunction(() => document.querySelector("#transcript").textContent.includes("[simulated] reply"));
await page.fill("#tenant", "elsewhere");
await page.dispatchEvent("#tenant", "change");
await page.waitForFunction(() => document.querySelector("#conversationList tbody").textContent === "nothing yet" &&
  location.hash === "#/conversations" && document.querySelector("#transcript").childNodes.length === 0);
await page.fill("#tenant", "");
await page.dispatchEvent("#tenant", "change");
await page.waitForFunction(() => document.querySelectorAll("#conversationList tbody tr[data-id]").length === 10);
expect(true, "chat: a change of tenant leaves the previous tenant's conversation and lists the new tenant's");

// ---- documents
await page.click("a[data-tab=documents]");
await page.fill("#docTitle", "Runbook");
await page.fill("#docContent", "Restart the ingest worker when the queue stalls.");
await page.click("#ingestForm button");
await page.waitForFunction(() => document.querySelector("#ingestResult").textContent.startsWith("Stored"));
const doc = idFrom(await hash(), "documents");
expect(doc, "documents: the ingested document's URL");
await page.waitForSelector(`#documentList tr[data-id="${doc}"]`);
await page.fill("#searchQuery", "queue stalls");
await page.click("#searchForm button");
await page.waitForSelector("#hits tbody tr");
expect((await page.textContent("#hits tbody")).includes("queue stalls"), "documents: the ingested passage found");
await page.selectOption("#docTypeFilter", "SOURCE_TYPE_TICKET");
await page.waitForFunction((id) => !document.querySelector(`#documentList tr[data-id="${id}"]`), doc);
expect(true, "documents: the source filter leaves the wiki page out");
await page.selectOption("#docTypeFilter", "SOURCE_TYPE_WIKI");
await page.waitForSelector(`#documentList tr[data-id="${doc}"]`);
await page.reload();
await page.waitForFunction(() => document.querySelector("#documentView h3") && document.querySelector("#documentView").textContent.includes("Restart the ingest worker"));
expect((await page.textContent("#documentView h3")) === "Runbook", "documents: the link restores the document after a reload");
expect(!rawJSON.test(await page.textContent("#documentView")), "documents: no raw JSON in the document view");
await shot("documents");

// A chat turn shows the passages its search gave the model, each linked to
// its document; the conversation list filters by creation time.
await page.click("a[data-tab=conversations]");
await page.fill("#chatInput", "When should the ingest worker be restarted?");
await page.click("#chatForm button");
await page.waitForSelector(`#transcript .passage a[href$="/${doc}"]`, { timeout: 20000 });
const passages = await page.evaluate((id) => [...document.querySelectorAll("#transcript .passage")]
  .filter((p) => p.querySelector(`a[href$="/${id}"]`)).map((p) => p.textContent), doc);
expect(passages.some((t) => /^\[\d+\]Runbook \S/.test(t)),
  "chat: the turn's retrieved passages shown numbered with their text, linked to their document (" + passages.join(" | ") + ")");
await page.waitForFunction(() => document.querySelector("#transcript").textContent.includes("done:"), null, { timeout: 20000 });
await page.selectOption("#conversationSinceFilter", "3600");
await page.waitForSelector("#conversationList tbody tr[data-id]");
expect(true, "chat: the last hour's conversations listed through the time filter");
await shot("chat-passages");

// ---- classification
await page.click("a[data-tab=runs]");
await page.fill("#instruction", "Classify chat conversations");
await page.click("#runForm button");
await page.waitForFunction(() => document.querySelector("#runId").textContent !== "none yet" && document.querySelector("#runForm .busy"), null, { timeout: 20000 });
expect(true, "classification: the run id shown while its stream still runs");
await page.waitForSelector("#approvals:not([hidden])", { timeout: 20000 });
const run = idFrom(await hash(), "runs");
expect(run && (await page.textContent("#runId")) === run, "classification: the run's URL");
let card = await page.textContent("#approvalCard");
expect(card.includes("Strategy") && card.includes("Sample conversation"), "classification: the fetch approval card shows the plan and the sample");
expect(!rawJSON.test(card), "classification: no raw JSON in the fetch approval card");
expect((await page.textContent("#approve")) === "Approve fetch", "classification: the button says what it approves");
const stepper = () => page.evaluate(() => [...document.querySelectorAll("#stepper li")].map((li) => li.className + ":" + li.textContent).join(" "));
expect(await stepper() === "done:plan done:fetch current:approve fetch todo:classify todo:approve labels todo:save todo:summary",
  "classification: the stepper at the fetch approval (" + await stepper() + ")");
await shot("approval-fetch");
await page.reload();
await page.waitForSelector("#approvals:not([hidden])");
expect((await page.textContent("#runState")) === "AWAITING_FETCH_APPROVAL" && (await page.textContent("#approvalCard")).includes("Strategy") &&
  (await stepper()).includes("current:approve fetch"),
  "classification: the link restores the awaiting run and its card after a reload");
await page.click("#approve");
await page.waitForSelector("#runStatus .busy");
expect(await page.locator("#approvals").isHidden(), "classification: the approval card leaves once approved, the run busy");
await page.waitForFunction(() => document.querySelector("#runState").textContent === "AWAITING_BATCH_APPROVAL" && !document.querySelector("#approvals").hidden, null, { timeout: 20000 });
card = await page.textContent("#approvalCard");
expect(await page.locator("#approvalCard table.labels tbody tr").count() > 0, "classification: the batch card lists the proposed labels");
expect(!rawJSON.test(card), "classification: no raw JSON in the batch approval card");
expect(await stepper() === "done:plan done:fetch done:approve fetch done:classify current:approve labels todo:save todo:summary",
  "classification: the stepper at the batch approval (" + await stepper() + ")");
expect(await page.locator("#runProgress").isVisible(), "classification: a progress bar toward the plan's target");
await shot("approval-batch");
await page.click("#approve");
await page.waitForFunction(() => document.querySelector("#runState").textContent === "COMPLETED" && !document.querySelector("#runStatus .busy"), null, { timeout: 20000 });
expect(await page.locator("#approve").isHidden(), "classification: no approval buttons once the run completed");
expect(/^done:plan .*done:summary$/.test(await stepper()) && !(await stepper()).includes("current"), "classification: every step done once completed");
const progress = await page.textContent("#runProgress .progress-text");
expect(/^(\d+) of \1 labelled \(100%\)$/.test(progress), "classification: progress full once completed (" + progress + ")");
await page.waitForSelector(`#runList tr[data-id="${run}"]`);
expect((await page.textContent(`#runList tr[data-id="${run}"]`)).includes("completed"), "classification: the run in the list, completed");
await shot("classifier");
// A run stopped at its first approval: the stepper marks where it stopped.
await page.fill("#instruction", "Classify chat conversations, then stop");
await page.click("#runForm button");
await page.waitForFunction((old) => !document.querySelector("#approvals").hidden && document.querySelector("#runId").textContent !== old, run, { timeout: 20000 });
await page.click("#stopRun");
await page.waitForFunction(() => document.querySelector("#runState").textContent === "STOPPED" && !document.querySelector("#runStatus .busy"), null, { timeout: 20000 });
expect((await stepper()).includes("failed:approve fetch") && !(await stepper()).includes("current"), "classification: a stopped run's stepper marks the step it stopped at (" + await stepper() + ")");
expect(await page.locator("#approvals").isHidden(), "classification: nothing to approve in a stopped run");
await page.reload();
await page.waitForFunction(() => document.querySelector("#runState").textContent === "STOPPED");
expect((await stepper()).includes("failed:approve fetch"), "classification: read back after a reload, the stopped run's stepper the same");

// ---- SQL
await page.click("a[data-tab=sql]");
await page.waitForSelector("#sqlConnection option", { state: "attached" });
await page.click("#sqlStart button");
await page.waitForSelector("#sqlOptions button");
const session = idFrom(await hash(), "sql");
expect(session, "sql: the session's URL");
await page.locator("#sqlOptions button", { hasText: /own/i }).first().click();
await page.waitForFunction(() => document.querySelector("#sqlTurns").textContent.includes("Type the SQL"));
await page.fill("#sqlInput", "SELECT country, count(*) AS customers FROM customers GROUP BY country ORDER BY 2 DESC");
await page.click("#sqlForm button");
await page.waitForSelector("#sqlToConfirm:not([hidden])");
expect((await page.textContent("#sqlToConfirm")).startsWith("SELECT country"), "sql: the SQL shown before it runs");
expect((await page.locator("#sqlResult tbody tr").count()) === 0, "sql: nothing run before confirmation");
expect(await page.locator("#sqlToConfirm .sql-keyword", { hasText: "GROUP" }).count() === 1, "sql: the SQL to confirm highlighted");
await shot("sql-confirm");
await page.locator("#sqlOptions button", { hasText: /run/i }).first().click();
await page.waitForSelector("#sqlResult tbody tr");
expect(await page.locator("#sqlResult tbody tr").count() === 9, "sql: nine countries in the sample");
expect(await page.locator(`#sqlList tr[data-id="${session}"]`).count() === 1, "sql: the session in this browser's list");
await shot("sql");
// A query the checker refuses is never offered to run.
await page.locator("#sqlOptions button", { hasText: /own/i }).first().click();
await page.waitForFunction(() => document.querySelector("#sqlTurns").lastChild.textContent.includes("Type the SQL"));
await page.fill("#sqlInput", "DELETE FROM customers");
await page.click("#sqlForm button");
await page.waitForFunction(() => document.querySelector("#sqlTurns").lastChild.textContent.startsWith("agent") &&
  document.querySelector("#sqlTurns").lastChild.previousSibling.textContent.includes("DELETE"));
expect(await page.locator("#sqlToConfirm").isHidden() && await page.locator("#sqlOptions button", { hasText: /run it/i }).count() === 0,
  "sql: no SQL to confirm and no Run it for a refused DELETE");
// Sixty rows are shown 25 at a time.
await page.fill("#sqlInput", "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 60) SELECT i FROM n");
await page.click("#sqlForm button");
await page.waitForSelector("#sqlToConfirm:not([hidden])");
await page.locator("#sqlOptions button", { hasText: /run/i }).first().click();
await page.waitForSelector("#sqlPager:not([hidden])");
expect(await page.locator("#sqlResult tbody tr").count() === 25 && (await page.textContent("#sqlPager")).includes("rows 1–25 of 60"), "sql: the first 25 of 60 rows");
await page.click("#sqlPager button:has-text('Next')");
await page.click("#sqlPager button:has-text('Next')");
expect(await page.locator("#sqlResult tbody tr").count() === 10 && (await page.textContent("#sqlResult tbody tr:first-child")) === "51" &&
  await page.locator("#sqlPager button:has-text('Next')").isDisabled(), "sql: the last page holds rows 51–60");
await shot("sql-paged");
await page.reload();
await page.waitForFunction(() => document.querySelector("#sqlTurns").textContent.includes("SELECT country"));
expect((await page.textContent("#sqlId")) === session, "sql: the link restores the session's turns after a reload");

// ---- analysis
await page.click("a[data-tab=jobs]");
await page.fill("#analysisQuery", "Summarise our incident reports");
await page.click("#analysisForm button");
await page.waitForSelector("#analysisForm .busy .elapsed");
expect(await page.locator("#analysisForm button").isDisabled(), "analysis: Start disabled while the analysis runs");
await page.waitForSelector("#timeline .bar-row[data-type=planning]", { timeout: 20000 });
expect(await page.locator("#timeline .bar-row[data-type=analysis] .bar").count() === 1, "analysis: a live timeline bar for the request while it runs");
await shot("analysis-running");
await page.waitForFunction(() => document.querySelector("#jobState").textContent === "COMPLETE" && document.querySelector("#analysisResult .summary"), null, { timeout: 30000 });
const job = idFrom(await hash(), "jobs");
expect(job && (await page.textContent("#jobId")) === job, "analysis: the job's URL");
const types = await page.locator("#timeline .bar-row[data-job]").evaluateAll((rows) => rows.map((r) => r.dataset.type));
expect(types[0] === "analysis" && types.includes("planning") && types[types.length - 1] === "synthesis", "analysis: timeline bars planning → tools → synthesis (" + types.join(", ") + ")");
expect(await page.locator("#timeline .bar-row[data-job] .bar.status-complete").count() === types.length, "analysis: every bar coloured complete");
const durations = await page.locator("#timeline .duration").allTextContents();
expect(durations.length === types.length && durations.every((d) => humanDuration.test(d)), "analysis: bar durations in human units (" + durations.join(", ") + ")");
const widths = await page.locator("#timeline .bar-row[data-job] .bar").evaluateAll((bars) => bars.map((b) => b.getBoundingClientRect().width));
expect(widths.every((w) => w > 0) && widths[0] >= Math.max(...widths), "analysis: the request's bar spans its children's");
const result = await page.textContent("#analysisResult");
expect(!rawJSON.test(result) && !result.includes('"summary"'), "analysis: no raw JSON in the default result view");
const findings = page.locator("#analysisResult .findings li");
expect(await findings.count() > 0 && await findings.locator(".statement").count() === await findings.count() &&
  await findings.locator(".source").count() === await findings.count(), "analysis: each finding rendered with its source");
expect(await page.locator("#analysisResult .sources li").count() > 0 && await page.locator("#analysisResult .gaps li").count() > 0, "analysis: the data sources and gaps rendered");
expect(await page.locator("#analysisRaw").isHidden(), "analysis: the raw JSON hidden by default");
await page.click("#rawToggle");
expect((await page.textContent("#analysisRaw")).includes('"summary"'), "analysis: the raw JSON behind the toggle");
expect(await page.locator("#analysisForm button").isEnabled(), "analysis: Start enabled again");
await page.waitForSelector(`#jobList tr[data-id="${job}"] td.duration:not(:empty)`);
const jobTook = await page.textContent(`#jobList tr[data-id="${job}"] td.duration`);
expect(humanDuration.test(jobTook), "analysis: the list says how long the analysis took in human units (" + jobTook + ")");
await shot("analysis");
const barCount = types.length;
await page.reload();
await page.waitForFunction((n) => document.querySelectorAll("#timeline .bar-row[data-job]").length === n && document.querySelector("#analysisResult .summary"), barCount);
expect(true, "analysis: the link restores the timeline and the result after a reload");
await page.click("a[data-tab=documents]");
await page.goBack();
await page.waitForFunction((n) => location.hash.startsWith("#/jobs/") && document.querySelectorAll("#timeline .bar-row[data-job]").length === n, barCount);
expect(true, "analysis: back returns to the job's timeline");
await page.goForward();
await page.waitForFunction(() => location.hash === "#/documents" && !document.querySelector("#documents").hidden);
expect(true, "analysis: forward returns to the documents tab");
await page.goBack();
await page.waitForSelector("#timeline .bar-row[data-job]");
// The simulator waits before each answer (MODELGATEWAY_SIM_LATENCY), so an
// analysis runs long enough to be cancelled from its bar.
await page.fill("#analysisQuery", "An analysis to cancel");
await page.click("#analysisForm button");
await page.waitForFunction((old) => location.hash !== "#/jobs/" + old, job);
await page.locator("#timeline .bar-row[data-type=analysis] button", { hasText: "Cancel" }).click({ timeout: 10000 });
await page.waitForFunction(() => document.querySelector("#jobState").textContent === "CANCELLED", null, { timeout: 30000 });
expect((await page.locator("#timeline button").count()) === 0, "analysis: nothing to cancel or retry in a cancelled analysis");
expect(await page.locator("#timeline .bar-row[data-type=analysis] .bar.status-cancelled").count() === 1, "analysis: the cancelled request's bar coloured cancelled");
const cancelled = idFrom(await hash(), "jobs");
await page.selectOption("#jobSinceFilter", "3600");
await page.waitForSelector(`#jobList tr[data-id="${job}"]`);
expect(true, "analysis: the time filter accepted by the API, the last hour's analyses listed");
await page.selectOption("#jobStatusFilter", "JOB_STATUS_CANCELLED");
await page.waitForFunction(([c, j]) => document.querySelector(`#jobList tr[data-id="${c}"]`) && !document.querySelector(`#jobList tr[data-id="${j}"]`), [cancelled, job]);
expect(true, "analysis: the status filter lists the cancelled analysis, not the completed one");
await shot("analysis-cancelled");

expect(!protoDuration.test(await page.evaluate(() => document.querySelector("main").innerText)), "no protobuf duration anywhere on the page");
const shown = await page.textContent("#error");
if (shown || errors.length) throw new Error("the console showed " + JSON.stringify(shown) + ", page errors " + JSON.stringify(errors));
await browser.close();
for (const p of passed) console.log("ok  " + p);
console.log("console: every tab worked (" + passed.length + " checks)");
