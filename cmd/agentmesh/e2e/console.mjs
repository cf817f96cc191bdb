import { chromium } from "playwright-core";
import zlib from "node:zlib";
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
// A failed check leaves the page as it was (failed.png) and what it showed.
process.on("uncaughtException", async (err) => {
  console.error(String(err.stack || err));
  try {
    await shot("failed");
    console.error("at " + page.url() + "; error box: " + JSON.stringify(await page.textContent("#error")) + "; page errors: " + JSON.stringify(errors));
  } finally {
    process.exit(1);
  }
});

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
{
  // A failed search shows no hits of the one before; a document that is not
  // there says so instead of "loading…".
  const errorsBeforeRefusals = errors.length;
  await page.fill("#searchQuery", "x".repeat(2100));
  await page.click("#searchForm button");
  await page.waitForFunction(() => !document.querySelector("#error").hidden);
  expect((await page.locator("#hits tbody tr").count()) === 0 && (await page.textContent("#error")).includes("query"),
    "documents: a refused search leaves no hits of the search before");
  await page.goto(process.env.BASE + "/console/#/documents/doc_000000000000000000000000");
  await page.waitForFunction(() => document.querySelector("#documentView").textContent.startsWith("No document"));
  expect(true, "documents: a document that is not there is said to be missing, not loading");
  errors.push(...errors.splice(errorsBeforeRefusals).filter((e) => !/status of (400|404)/.test(e)));
  await page.goto(process.env.BASE + "/console/#/documents/" + doc);
  await page.waitForFunction(() => document.querySelector("#documentView h3"));
}
await page.selectOption("#docTypeFilter", "SOURCE_TYPE_TICKET");
await page.waitForFunction((id) => !document.querySelector(`#documentList tr[data-id="${id}"]`), doc);
expect(true, "documents: the source filter leaves the wiki page out");
await page.selectOption("#docTypeFilter", "SOURCE_TYPE_WIKI");
await page.waitForSelector(`#documentList tr[data-id="${doc}"]`);
await page.selectOption("#docSinceFilter", "3600");
await page.waitForSelector(`#documentList tr[data-id="${doc}"]`);
expect(true, "documents: the last hour's documents listed through the time filter");
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

// ---- intake
// A ticket with a screenshot, uploaded as one document and followed phase
// by phase. The PNG is built here: 40×30 red pixels.
function png(w, h) {
  const crcTable = Array.from({ length: 256 }, (_, n) => { let c = n; for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1; return c >>> 0; });
  const crc = (buf) => { let c = 0xffffffff; for (const b of buf) c = crcTable[(c ^ b) & 0xff] ^ (c >>> 8); return (c ^ 0xffffffff) >>> 0; };
  const chunk = (type, data) => {
    const len = Buffer.alloc(4); len.writeUInt32BE(data.length);
    const body = Buffer.concat([Buffer.from(type), data]);
    const sum = Buffer.alloc(4); sum.writeUInt32BE(crc(body));
    return Buffer.concat([len, body, sum]);
  };
  const ihdr = Buffer.alloc(13);
  ihdr.writeUInt32BE(w, 0); ihdr.writeUInt32BE(h, 4); ihdr[8] = 8; ihdr[9] = 2;
  const raw = Buffer.concat(Array.from({ length: h }, () => Buffer.concat([Buffer.from([0]), Buffer.alloc(3 * w, Buffer.from([255, 0, 0]))])));
  return Buffer.concat([Buffer.from("\x89PNG\r\n\x1a\n", "latin1"), chunk("IHDR", ihdr), chunk("IDAT", zlib.deflateSync(raw)), chunk("IEND", Buffer.alloc(0))]);
}
const ticket = "PAY-123: Checkout fails with 500 after deploy\nStatus: Open\nType: Bug\nPriority: High\nAssignee: Dana\nReporter: Sam\n" +
  "The checkout page returns HTTP 500 since the 2.4 deploy. See the screenshot.\n";
await page.click("a[data-tab=intake]");
expect(await hash() === "#/intake", "intake: the tab has its own URL");
// A file that says it is an image but is not: refused, naming the file.
// The intake's event streams the page opens, and each read of a document
// with whether its pipeline had finished.
const watched = [];
page.on("request", (r) => { if (r.url().includes("/intake:watch")) watched.push(r.url()); });
let reads = [];
page.on("response", async (r) => {
  if (!/\/v1\/documents\/doc_[^/?]+$/.test(r.url()) || r.request().method() !== "GET") return;
  const i = reads.push(null) - 1;
  try { reads[i] = !!((await r.json()).document.pipeline || {}).finished; } catch (_) { reads[i] = "unread"; }
});
// readsSettled waits (up to 2 s) until every read's body has been looked at.
async function readsSettled() {
  for (let i = 0; i < 100 && reads.includes(null); i++) await new Promise((res) => setTimeout(res, 20));
}
const errorsBefore = errors.length;
await page.setInputFiles("#uploadFiles", [{ name: "broken.png", mimeType: "image/png", buffer: Buffer.from("not a picture") }]);
await page.click("#uploadForm button");
await page.waitForFunction(() => !document.querySelector("#error").hidden);
// The browser logs the refused request; that one is expected.
errors.push(...errors.splice(errorsBefore).filter((e) => !/status of 400/.test(e)));
expect((await page.textContent("#error")).startsWith("400") && (await page.textContent("#error")).includes("broken.png") && await hash() === "#/intake",
  "intake: an image that is not one refused with 400 naming the file (" + await page.textContent("#error") + ")");
await page.setInputFiles("#uploadFiles", [
  { name: "PAY-123.txt", mimeType: "text/plain", buffer: Buffer.from(ticket) },
  { name: "screenshot.png", mimeType: "image/png", buffer: png(40, 30) },
]);
await page.fill("#uploadTitle", "Checkout fails after deploy");
await page.selectOption("#uploadSourceType", "SOURCE_TYPE_TICKET");
// Every state the status line takes, as the page draws it.
const recordIntakeStates = () => page.evaluate(() => {
  window.intakeStates = [];
  new MutationObserver((records) => {
    for (const r of records) for (const n of r.addedNodes) if (n.nodeType === 1 && n.classList.contains("intake-status")) window.intakeStates.push(n.dataset.state);
  }).observe(document.querySelector("#intakeView"), { childList: true });
});
await recordIntakeStates();
reads = [];
await page.click("#uploadForm button");
await page.waitForSelector("#uploadForm .busy .spinner");
expect(await page.locator("#uploadForm button").isDisabled(), "intake: Upload disabled while the document goes through intake");
// The extraction and routing run after the upload answers: the page
// shows the intake running from then on, and follows it to its end.
await page.waitForSelector(".intake-status[data-state=finished]", { timeout: 30000 });
const seen = await page.evaluate(() => window.intakeStates);
expect(/^(running )+(finished )+$/.test(seen.join(" ") + " "),
  "intake: shown running from the moment the upload answered, then finished (" + seen.join(" → ") + ")");
await readsSettled();
// The first read can already find the pipeline finished when the model
// answered quickly: then there is nothing to follow.
expect(reads[0] === true ? watched.length === 0 : watched.length === 1 && watched[0].endsWith("/intake:watch"),
  reads[0] === true ? "intake: finished at the first read, nothing to follow" : "intake: followed through the intake's event stream (GET …/intake:watch)");
await page.waitForSelector("#uploadForm .busy", { state: "detached" });
const upload = idFrom(await hash(), "intake");
expect(upload && upload.startsWith("doc_"), "intake: the document's URL (" + upload + ")");
const phaseStates = await page.locator("#intakeView .phase").evaluateAll((ps) => ps.map((p) => p.dataset.phase + ":" + p.dataset.state).join(" "));
expect(phaseStates === "vision_stage1:done content_type:done vision_stage2:done extraction:done indexing:done routing:done",
  "intake: every phase done, in order (" + phaseStates + ")");
const phaseTimes = await page.locator("#intakeView .phase-time").allTextContents();
expect(phaseTimes.every((d) => humanDuration.test(d)), "intake: each phase's time in human units (" + phaseTimes.join(", ") + ")");
const vision = page.locator("[data-section=vision]");
expect(await vision.locator("tr[data-visual=yes]").count() === 1 && (await vision.locator("tr[data-visual=yes]").textContent()).includes("screenshot.png") &&
  (await vision.locator("tr[data-visual=yes] td").last().textContent()).includes("sim-vision"), "intake: the screenshot read by vision, stage 1 per attachment");
expect((await vision.textContent()).includes("Stage 2: details for the content type"), "intake: vision's stage 2 for the ticket");
const ctText = await page.textContent("[data-section=content-type]");
expect(ctText.includes("jira") && ctText.includes("Reason") && ctText.includes("issue key") && /Decided by\s*rules/.test(ctText), "intake: the content type with its reason and who decided");
const extraction = await page.textContent("[data-section=extraction]");
expect(extraction.includes("PAY-123") && /Assignee\s*Dana/.test(extraction) && /Priority\s*High/.test(extraction), "intake: the ticket's extracted fields");
expect((await page.textContent("[data-section=chunks]")).includes("3 to index, 3 stored and linked") && await page.locator("[data-section=chunks] .chunk-ids li").count() === 3,
  "intake: three chunks, each stored and linked");
await page.waitForSelector("#intakeGraph table.graph-links");
expect(await page.locator("#intakeGraph tr[data-type=PART_OF]").count() === 3, "intake: three chunks PART_OF the document in the graph");
const routingText = await page.textContent("[data-section=routing]");
expect(/Routing\s*lift up/.test(routingText) && routingText.includes("Reason"), "intake: routing with its reason");
expect(!rawJSON.test(await page.textContent("#intakeView")), "intake: no raw JSON in the pipeline view");
await page.waitForSelector(`#intakeList tr[data-id="${upload}"]`);
expect((await page.textContent(`#intakeList tr[data-id="${upload}"]`)).includes("lift up"), "intake: the document in the list with its routing");
await shot("intake");
await page.reload();
await page.waitForSelector(".intake-status[data-state=finished]");
expect(await page.locator("#intakeView .phase[data-state=done]").count() === 6 && (await page.textContent("#intakeView h3")).startsWith("Checkout fails after deploy"),
  "intake: the link restores the pipeline after a reload");
// A log with no attachment: both vision phases skipped, saying why.
await page.setInputFiles("#uploadFiles", [{ name: "worker.log", mimeType: "text/plain", buffer: Buffer.from(Array.from({ length: 40 }, (_, i) =>
  `2026-11-25T10:${String(i).padStart(2, "0")}:00Z ${i % 10 === 9 ? "ERROR queue stalled code=Q17" : "INFO processed batch " + i}`).join("\n") + "\n") }]);
await page.selectOption("#uploadSourceType", "");
// With the event stream unavailable (a gateway without the route), the page
// reads the document until its pipeline has finished.
await page.route("**/intake:watch", (r) => r.fulfill({ status: 404, contentType: "application/json", body: '{"code":5,"message":"Not Found"}' }));
reads = [];
const errorsBeforeLog = errors.length;
await recordIntakeStates(); // anew: the page was reloaded since
await page.click("#uploadForm button");
await page.waitForFunction((old) => location.hash.startsWith("#/intake/") && location.hash !== "#/intake/" + old &&
  document.querySelector(".intake-status[data-state=finished]"), upload, { timeout: 30000 });
await page.unroute("**/intake:watch");
errors.push(...errors.splice(errorsBeforeLog).filter((e) => !/status of 404/.test(e)));
const seenLog = await page.evaluate(() => window.intakeStates);
await readsSettled();
// Read until finished, and not after (the first read may already find it
// finished when the model answered quickly: then nothing was left to poll).
expect(/^(running )+(finished )+$/.test(seenLog.join(" ") + " ") && reads[reads.length - 1] === true && reads.slice(0, -1).every((f) => f === false),
  "intake: without the event stream the page reads the document until its pipeline has finished (read finished: " + reads.join(", ") + "; " + seenLog.join(" → ") + ")");
const skipped = await page.locator("#intakeView .phase[data-state=skipped]").evaluateAll((ps) => ps.map((p) => p.dataset.phase + ": " + p.querySelector(".phase-note").textContent));
expect(skipped.length === 2 && skipped[0].startsWith("vision_stage1: ") && skipped[1].startsWith("vision_stage2: ") && skipped.every((t) => t.split(": ")[1].length > 0),
  "intake: a log without attachments skips both vision phases, saying why (" + skipped.join("; ") + ")");
const logFields = await page.textContent("[data-section=extraction]");
expect(logFields.includes("Fields of the log extraction") && /Line count\s*40/.test(logFields) && logFields.includes("Q17"), "intake: the log's fields: lines read and the error code");
expect(await page.locator("[data-section=vision] table").count() === 0, "intake: no attachments, nothing for vision");
await page.goBack();
await page.waitForFunction((id) => location.hash === "#/intake/" + id && document.querySelector(".intake-status[data-state=finished]") &&
  document.querySelector("#intakeView h3").textContent.startsWith("Checkout fails after deploy"), upload);
const lifted = await page.getAttribute("#intakeView a.lifted-job", "href");
await page.click("#intakeView a.lifted-job");
await page.waitForFunction((h) => location.hash === h && document.querySelector("#jobId").textContent === h.replace("#/jobs/", ""), lifted);
await page.waitForSelector("#timeline .bar-row[data-type=analysis]");
expect(true, "intake: the lifted analysis job opens from its link (" + lifted + ")");
await page.goBack();
await page.waitForFunction((id) => location.hash === "#/intake/" + id && document.querySelector(".intake-status[data-state=finished]") &&
  document.querySelector("#intakeView h3").textContent.startsWith("Checkout fails after deploy"), upload);
expect(true, "intake: back returns to the document's pipeline");

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
const sqlStepper = () => page.evaluate(() => [...document.querySelectorAll("#sqlStepper li")].map((li) => li.className + ":" + li.textContent).join(" "));
const lastAgentTurn = () => page.evaluate(() => [...document.querySelectorAll("#sqlTurns > div")].filter((d) => d.firstChild.textContent === "agent").pop().textContent);
// choose clicks the option button whose label matches and waits for the
// agent's next reply.
async function choose(label) {
  const turns = await page.locator("#sqlTurns > div").count();
  await page.locator("#sqlOptions button", { hasText: label }).first().click();
  await page.waitForFunction((n) => document.querySelectorAll("#sqlTurns > div").length >= n + 2 && !document.querySelector("#sqlOptions .busy"), turns);
}
async function say(text) {
  const turns = await page.locator("#sqlTurns > div").count();
  await page.fill("#sqlInput", text);
  await page.click("#sqlForm button");
  await page.waitForFunction((n) => document.querySelectorAll("#sqlTurns > div").length >= n + 2 && !document.querySelector("#sqlForm .busy"), turns);
}
await page.click("a[data-tab=sql]");
await page.waitForSelector("#sqlConnection option", { state: "attached" });
await page.click("#sqlStart button");
await page.waitForSelector("#sqlOptions button");
const session = idFrom(await hash(), "sql");
expect(session, "sql: the session's URL");
expect((await sqlStepper()).startsWith("done:database current:method"), "sql: the read's stepper at the method (" + await sqlStepper() + ")");
await choose(/own/i);
expect((await lastAgentTurn()).includes("Type the SQL"), "sql: the agent asks for the SQL");
await page.fill("#sqlInput", "SELECT country, count(*) AS customers FROM customers GROUP BY country ORDER BY 2 DESC");
await page.click("#sqlForm button");
await page.waitForSelector("#sqlToConfirm:not([hidden])");
expect((await page.textContent("#sqlToConfirm")).startsWith("SELECT country"), "sql: the SQL shown before it runs");
expect((await page.locator("#sqlResult tbody tr").count()) === 0, "sql: nothing run before confirmation");
expect(await page.locator("#sqlToConfirm .sql-keyword", { hasText: "GROUP" }).count() === 1, "sql: the SQL to confirm highlighted");
expect((await sqlStepper()).includes("current:confirm SQL"), "sql: the stepper at the confirmation");
await shot("sql-confirm");
await choose(/run it/i);
// EXECUTE_SQL: a confirmed read asks for its job name before it runs.
expect((await page.locator("#sqlResult tbody tr").count()) === 0 && (await sqlStepper()).includes("current:job name") &&
  await page.locator("#sqlOptions button", { hasText: "query on sample" }).count() === 1, "sql: the confirmed read asks for its job name, the default offered, nothing run yet");
await say("countries by customers");
await page.waitForSelector("#sqlResult tbody tr");
expect(await page.locator("#sqlResult tbody tr").count() === 9, "sql: nine countries in the sample");
expect((await sqlStepper()).includes("current:results"), "sql: the stepper at the results");
await page.waitForSelector("#sqlJobList tr[data-kind=read_sql] a:text('countries by customers')");
expect(true, "sql: the named read in the kept jobs list");
expect(await page.locator(`#sqlList tr[data-id="${session}"]`).count() === 1, "sql: the session in this browser's list");
await shot("sql");
// A query the checker refuses is never offered to run.
await choose(/own/i);
await say("DELETE FROM customers");
expect(await page.locator("#sqlToConfirm").isHidden() && await page.locator("#sqlOptions button", { hasText: /run it/i }).count() === 0,
  "sql: no SQL to confirm and no Run it for a refused DELETE");
// Sixty rows are shown 25 at a time.
await page.fill("#sqlInput", "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 60) SELECT i FROM n");
await page.click("#sqlForm button");
await page.waitForSelector("#sqlToConfirm:not([hidden])");
// A reload offers the last reply's choices again, from the session.
{
  const before = await page.evaluate(() => [...document.querySelectorAll("#sqlOptions button")].map((b) => b.textContent).join("|"));
  await page.reload();
  await page.waitForFunction((want) => [...document.querySelectorAll("#sqlOptions button")].map((b) => b.textContent).join("|") === want, before);
  expect(/run it/i.test(before) && await page.locator("#sqlToConfirm").isVisible(), "sql: after a reload the SQL to confirm and the same choices again (" + before + ")");
}
// Another client (a second tab, an MCP client) replaces the SQL waiting
// for approval before "Run it" is clicked: nothing runs, the error says
// why, and the page shows the session as it is now.
{
  const swapped = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 60) SELECT i FROM n ORDER BY i";
  await page.evaluate(([id, sql]) => api("POST", "/v1/sql/sessions/" + encodeURIComponent(id) + ":input", { text: sql }), [session, swapped]);
  const errorsBeforeSwap = errors.length;
  await page.locator("#sqlOptions button", { hasText: /run it/i }).first().click();
  await page.waitForFunction(() => !document.querySelector("#error").hidden);
  await page.waitForFunction((sql) => document.querySelector("#sqlToConfirm").textContent === sql, swapped);
  errors.push(...errors.splice(errorsBeforeSwap).filter((e) => !/status of 400/.test(e)));
  const said = await page.textContent("#error");
  expect(said.startsWith("400") && said.includes("the session changed since version") && (await page.locator("#sqlResult tbody tr").count()) === 0 &&
    (await sqlStepper()).includes("current:confirm SQL"),
    "sql: a confirmation after another client replaced the SQL runs nothing, and the SQL now waiting is shown (" + said + ")");
}
await choose(/run it/i);
await choose("query on sample");
await page.waitForSelector("#sqlPager:not([hidden])");
expect(await page.locator("#sqlResult tbody tr").count() === 25 && (await page.textContent("#sqlPager")).includes("rows 1–25 of 60"), "sql: the first 25 of 60 rows");
await page.click("#sqlPager button:has-text('Next')");
await page.click("#sqlPager button:has-text('Next')");
expect(await page.locator("#sqlResult tbody tr").count() === 10 && (await page.textContent("#sqlResult tbody tr:first-child")) === "51" &&
  await page.locator("#sqlPager button:has-text('Next')").isDisabled(), "sql: the last page holds rows 51–60");
await shot("sql-paged");
// WRITE_DATA: the sixty rows to a new table.
await choose(/write the result/i);
expect((await page.textContent("#sqlKindShown")) === "write to a table" && (await sqlStepper()).includes("current:table"), "sql: a write's own stepper (" + await sqlStepper() + ")");
expect(await page.locator("#sqlOptions").getAttribute("data-action") === "fetch_tables" &&
  (await page.locator("#sqlChoice option").allTextContents()).includes("customers (exists: replace or refill it)"),
  "sql: the schema's tables offered as a dropdown (FETCH_TABLES), a new name typed instead");
await say("numbers_60");
await choose(/create it/i);
expect((await sqlStepper()).includes("current:confirm write") && (await page.textContent("#sqlToConfirm")).includes("WITH RECURSIVE"), "sql: the write waits for confirmation, its query shown");
await choose(/run it/i);
await page.waitForSelector("#sqlJobList tr[data-kind=write_data]");
expect((await lastAgentTurn()).includes("Wrote 60 rows"), "sql: sixty rows written");
// SEND_EMAIL: previewed (recipients, subject, query, rows) before it is sent.
await choose(/e-mail the result/i);
expect((await page.textContent("#sqlKindShown")) === "e-mail" && (await sqlStepper()).includes("current:query"), "sql: an e-mail's stepper at its query");
await choose(/whole table/i);
await say("ops@example.com, lead@example.com");
await choose("numbers_60 from sample");
const preview = await page.textContent("#sqlCard");
expect(await page.locator("#sqlCard[data-kind=email]").isVisible() && preview.includes("E-mail to send") &&
  preview.includes("ops@example.com, lead@example.com") && preview.includes("numbers_60 from sample") &&
  preview.includes("60 rows: all of main.numbers_60 as written") && await page.locator("#sqlCard .sql-keyword", { hasText: "SELECT" }).count() === 1,
  "sql: the e-mail preview names the recipients, the subject, the highlighted query and the rows, before it is sent");
expect(!rawJSON.test(preview), "sql: no raw JSON in the e-mail preview");
expect((await sqlStepper()).includes("current:confirm e-mail") && await page.locator("#sqlOptions button", { hasText: /run it/i }).count() === 1, "sql: the e-mail waits for its confirmation");
await shot("sql-email");
await choose(/run it/i);
expect((await lastAgentTurn()).includes("Sent 60 rows to ops@example.com, lead@example.com"), "sql: the e-mail sent once confirmed");
await page.waitForSelector("#sqlJobList tr[data-kind=send_email]");
// COMPARE_SQL: two queries differing in three known rows.
await choose(/compare two queries/i);
expect((await sqlStepper()).startsWith("current:first query"), "sql: a comparison's stepper (" + await sqlStepper() + ")");
await choose(/own/i);
await say("SELECT customer_id, name, country FROM customers");
await choose(/run it/i);
await choose(/own/i);
await say("SELECT customer_id, name, CASE WHEN customer_id = 1 THEN 'Atlantis' ELSE country END AS country FROM customers WHERE customer_id <> 2 UNION ALL SELECT 99, 'Newcomer', 'Nowhere'");
await choose(/run it/i);
expect((await sqlStepper()).includes("current:columns"), "sql: the comparison asks which columns to compare");
await choose(/compare the matched columns/i);
await choose("customer_id identifies a row");
await choose(/only the differences/i);
// The target schema is a dropdown (FETCH_SCHEMAS): picked, then sent back.
expect(await page.locator("#sqlOptions").getAttribute("data-action") === "fetch_schemas" &&
  (await page.locator("#sqlChoice option").allTextContents()).includes("main on sample"), "sql: the comparison's target schemas offered as a dropdown");
{
  const turns = await page.locator("#sqlTurns > div").count();
  await page.selectOption("#sqlChoice", { label: "main on sample" });
  await page.click("#sqlOptions button:has-text('Use this schema')");
  await page.waitForFunction((n) => document.querySelectorAll("#sqlTurns > div").length >= n + 2 && !document.querySelector("#sqlOptions .busy"), turns);
}
await say("customer_diff");
await choose("compare into customer_diff");
const compareCard = await page.textContent("#sqlCard");
expect(await page.locator("#sqlCard[data-kind=compare]").isVisible() && compareCard.includes("customer_id = customer_id") && compareCard.includes("only the differences") &&
  compareCard.includes("main.customer_diff on sample") && !rawJSON.test(compareCard), "sql: the comparison's settings shown before it runs, without JSON");
expect((await page.textContent("#sqlToConfirm")).includes("-- second query") && (await sqlStepper()).includes("current:run"), "sql: both queries shown for confirmation");
await choose(/run it/i);
await page.waitForSelector("#sqlResult.diff tbody tr");
const diffRows = await page.locator("#sqlResult tbody tr").evaluateAll((rows) => rows.map((r) => r.dataset.status + ":" + r.cells[1].textContent));
expect(diffRows.sort().join(" ") === "changed:1 only_in_first:2 only_in_second:99", "sql: the diff holds exactly the three rows that differ (" + diffRows.join(" ") + ")");
expect(await page.locator("#sqlResult thead th.key").textContent() === "customer_id (key)", "sql: the key column marked");
const changed = await page.locator("#sqlResult tr[data-status=changed] td.changed").allTextContents();
expect(changed.join("/") === "Australia/Atlantis", "sql: only the changed values marked, A beside B (" + changed.join("/") + ")");
const countsShown = await page.locator("#sqlDiffCounts .diff-count").allTextContents();
expect(countsShown.join(", ") === "1 only in A, 1 only in B, 1 changed, 8 same", "sql: the rows per status (" + countsShown.join(", ") + ")");
expect((await sqlStepper()).endsWith("done:run current:diff written"), "sql: the comparison's stepper at its end (" + await sqlStepper() + ")");
await shot("sql-compare");
// The dropdown flow: plain words, no connection → the connections as a
// dropdown; the choice goes back as a typed selection.
await page.selectOption("#sqlConnection", "");
await page.fill("#sqlWords", "read data from customers");
await page.click("#sqlStart button");
await page.waitForFunction((old) => location.hash.startsWith("#/sql/") && location.hash !== "#/sql/" + old && document.querySelector("#sqlChoice"), session);
const routed = idFrom(await hash(), "sql");
expect(await page.locator("#sqlOptions").getAttribute("data-action") === "fetch_connections" &&
  (await page.locator("#sqlChoice option").allTextContents()).includes("sample (sqlite)"), "sql: the connections offered as a dropdown (FETCH_CONNECTIONS)");
await page.selectOption("#sqlChoice", "sample");
await page.click("#sqlOptions button:has-text('Use this database')");
await page.waitForFunction(() => document.querySelector("#sqlStage").textContent === "ASK_SQL_METHOD");
expect((await sqlStepper()).startsWith("done:database current:method") && (await page.textContent("#sqlTurns")).includes("sample (sqlite)"),
  "sql: the dropdown's choice sent back, the session at the method");
// A job kind picked with its connection: nothing left to ask, the job starts.
await page.selectOption("#sqlConnection", "sample");
await page.selectOption("#sqlKind", "JOB_KIND_COMPARE_SQL");
await page.click("#sqlStart button");
await page.waitForFunction((old) => location.hash !== "#/sql/" + old && document.querySelector("#sqlOptions").dataset.action === "tool", routed);
expect((await page.textContent("#sqlKindShown")) === "comparison" && (await sqlStepper()).startsWith("current:first query") &&
  (await page.textContent("#sqlOptions")).includes("it has started"), "sql: a comparison picked with its database starts at once (TOOL), at its first query");
await page.selectOption("#sqlKind", "");
// The kept jobs, newest first, each with its SQL, rows, time and destination.
const kinds = await page.locator("#sqlJobList tbody tr").evaluateAll((rows) => rows.map((r) => r.dataset.kind));
expect(kinds.slice(0, 5).join(" ") === "compare_sql send_email write_data read_sql read_sql", "sql: the jobs that ran, newest first (" + kinds.join(" ") + ")");
expect((await page.textContent("#sqlJobPager")).includes("page 1") && await page.locator("#sqlJobPager button").count() === 2 && kinds.length <= 10,
  "sql: the jobs that ran are listed a page of ten at a time");
const tookAll = await page.locator("#sqlJobList td.duration").allTextContents();
expect(tookAll.length >= 5 && tookAll.every((d) => humanDuration.test(d)), "sql: each job's duration in human units (" + tookAll.join(", ") + ")");
await page.click("#sqlJobList tr[data-kind=compare_sql] a");
await page.waitForSelector("#sqlJobView:not([hidden]) pre.sql");
const compareJob = decodeURIComponent((await hash()).replace(/^#\/sql\/job\//, ""));
expect(compareJob.startsWith(session + "/"), "sql: the job's URL (" + compareJob + ")");
let jobView = await page.textContent("#sqlJobView");
expect(jobView.includes("table main.customer_diff on sample") && jobView.includes("1 only in A · 1 only in B · 1 changed · 8 same") &&
  await page.locator("#sqlJobView pre.sql").count() === 2 && (await page.locator("#sqlJobView pre.sql").last().textContent()).includes("'Atlantis'"),
  "sql: the comparison job shows both queries as approved, its destination and counts");
expect(!rawJSON.test(jobView), "sql: no raw JSON in the job view");
await page.reload();
await page.waitForSelector("#sqlJobView:not([hidden]) pre.sql");
expect((await page.textContent("#sqlJobView h3")) === "compare into customer_diff", "sql: the job's link restores it after a reload");
await page.click("#sqlJobList tr[data-kind=send_email] a");
await page.waitForFunction(() => document.querySelector("#sqlJobView").textContent.includes("e-mail to ops@example.com, lead@example.com"));
jobView = await page.textContent("#sqlJobView");
expect(/Rows sent\s*60/.test(jobView) && /Took\s*(\d+ ms|\d+\.\d s)/.test(jobView) && /Subject\s*numbers_60 from sample/.test(jobView), "sql: the e-mail job: rows sent, time, destination, subject");
await shot("sql-jobs");
await page.goBack();
await page.waitForFunction(() => document.querySelector("#sqlJobView h3") && document.querySelector("#sqlJobView h3").textContent === "compare into customer_diff");
expect(true, "sql: back returns to the previous job");
await page.goto(base + "#/sql/" + session);
await page.waitForFunction(() => document.querySelector("#sqlTurns").textContent.includes("SELECT country"));
expect((await page.textContent("#sqlId")) === session && !(await page.locator("#sqlSessionView").isHidden()), "sql: the session's link restores its turns");
expect(routed !== session, "sql: the routed session is a session of its own");

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

// ---- usage: the tokens of everything above, counted by the model gateway
await page.click("a[data-tab=usage]");
await page.waitForSelector("#usageTotals tbody tr[data-model]");
expect(await hash() === "#/usage", "usage: the tab has its own URL");
const usageRows = await page.locator("#usageTotals tbody tr[data-model]").evaluateAll((rows) => rows.map((r) => [...r.cells].map((c) => c.textContent)));
const chatRows = usageRows.filter((r) => r[0] === "chat");
expect(chatRows.length > 0 && chatRows.every((r) => r[1] === "sim" && r[2] === "default") && usageRows.every((r) => Number(r[7].replace(/,/g, "")) > 0),
  "usage: tokens per logical model, provider and tenant (" + usageRows.map((r) => r.slice(0, 3).join("/") + " " + r[7]).join(", ") + ")");
expect(await page.locator("#usageChart .usage-col").count() === 60 && await page.locator("#usageChart .usage-seg").count() > 0, "usage: the last hour as 60 columns, tokens stacked in them");
const chatTotal = chatRows.reduce((n, r) => n + Number(r[7].replace(/,/g, "")), 0);
const chatKey = await page.textContent("#usageLegend .usage-key[data-series=chat]");
expect(chatKey.startsWith("chat: " + chatTotal.toLocaleString("en-US") + " tokens"), "usage: the chart's chat series adds up to the table's chat rows (" + chatKey + ")");
await page.selectOption("#usageBy", "tenantId");
await page.waitForFunction(() => location.hash === "#/usage/minute/tenantId" && document.querySelector("#usageLegend .usage-key[data-series=default]"));
expect(await page.locator("#usageLegend .usage-key").count() >= 1, "usage: the series by tenant");
await page.selectOption("#usageResolution", "hour");
await page.waitForFunction(() => location.hash === "#/usage/hour/tenantId" && document.querySelectorAll("#usageChart .usage-col").length === 24);
expect(true, "usage: the last day as 24 hourly columns");
await shot("usage");
await page.reload();
await page.waitForFunction(() => document.querySelectorAll("#usageChart .usage-col").length === 24 && document.querySelector("#usageBy").value === "tenantId");
expect(true, "usage: the link restores the window and the series after a reload");
await page.goBack();
await page.waitForFunction(() => location.hash === "#/usage/minute/tenantId" && document.querySelectorAll("#usageChart .usage-col").length === 60);
expect(true, "usage: back returns to the hour per minute");
// Another tenant chats once: each tenant sees its own tokens, an operator
// (tenant * without keys) every tenant's.
const elsewhere = { "X-Tenant-Id": "elsewhere" };
const conv = await (await page.request.post(process.env.BASE + "/v1/conversations", { headers: elsewhere, data: {} })).json();
expect((await page.request.post(process.env.BASE + "/v1/conversations/" + conv.conversation.id + "/messages", { headers: elsewhere, data: { content: "hello" } })).ok(),
  "usage: another tenant's chat turn");
const usageTenants = () => page.locator("#usageTotals tbody tr[data-model] td:nth-child(3)").allTextContents().then((t) => [...new Set(t)].sort().join(", "));
await page.click("#usageRefresh");
await page.waitForFunction(() => !document.querySelector("#usageRefresh").disabled && document.querySelector("#usageTotals tbody tr[data-model]"));
expect(await usageTenants() === "default", "usage: the default tenant sees its own tokens only");
await page.fill("#tenant", "elsewhere");
await page.dispatchEvent("#tenant", "change");
await page.waitForFunction(() => [...document.querySelectorAll("#usageTotals tbody tr[data-model] td:nth-child(3)")].some((td) => td.textContent === "elsewhere"));
expect(await usageTenants() === "elsewhere", "usage: another tenant sees its own tokens only");
await page.fill("#tenant", "*");
await page.dispatchEvent("#tenant", "change");
await page.waitForFunction(() => new Set([...document.querySelectorAll("#usageTotals tbody tr[data-model] td:nth-child(3)")].map((td) => td.textContent)).size >= 2);
const allTenants = await usageTenants();
expect(allTenants.includes("default") && allTenants.includes("elsewhere"), "usage: an operator sees every tenant's tokens (" + allTenants + ")");
await page.fill("#tenant", "");
await page.dispatchEvent("#tenant", "change");
await page.waitForSelector("#usageTotals tbody tr[data-model]");
expect(!rawJSON.test(await page.textContent("#usage")), "usage: no raw JSON");

expect(!protoDuration.test(await page.evaluate(() => document.querySelector("main").innerText)), "no protobuf duration anywhere on the page");
const shown = await page.textContent("#error");
if (shown || errors.length) throw new Error("the console showed " + JSON.stringify(shown) + ", page errors " + JSON.stringify(errors));
await browser.close();
for (const p of passed) console.log("ok  " + p);
console.log("console: every tab worked (" + passed.length + " checks)");
