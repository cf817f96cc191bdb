import { chromium } from "playwright-core";
// Drives the web console in headless Chromium against a running mesh on the
// simulator provider (cmd/agentmesh/e2e, TestConsoleInABrowser): every tab's
// main flow, start to finish. BASE is the gateway URL, CHROMIUM the browser,
// SHOTS a directory for screenshots.
const base = process.env.BASE + "/console/";
const shots = process.env.SHOTS;
function expect(ok, what) {
  if (!ok) throw new Error("console check failed: " + what);
}

const browser = await chromium.launch({ executablePath: process.env.CHROMIUM, args: ["--no-sandbox"] });
const page = await browser.newPage({ viewport: { width: 1200, height: 900 } });
const errors = [];
page.on("console", (m) => { if (m.type() === "error") errors.push(m.text()); });
page.on("pageerror", (e) => errors.push(String(e)));
await page.goto(base);
await page.waitForSelector("#health tbody tr");
await page.waitForSelector("#models tbody tr");
expect(await page.locator("#health tbody tr").count() === 6, "six services in the health table");
expect(await page.locator("#health tbody td.ok").count() === 6, "every service SERVING");
await page.screenshot({ path: shots + "/overview.png" });

await page.click("button[data-tab=chat]");
await page.fill("#chatInput", "What changed in the last release?");
await page.click("#chatForm button");
await page.waitForFunction(() => document.querySelector("#transcript").textContent.includes("done:"), null, { timeout: 20000 });
expect((await page.textContent("#transcript")).includes("[simulated] reply"), "the streamed answer in the transcript");

await page.click("button[data-tab=documents]");
await page.fill("#docTitle", "Runbook");
await page.fill("#docContent", "Restart the ingest worker when the queue stalls.");
await page.click("#ingestForm button");
await page.waitForFunction(() => document.querySelector("#ingestResult").textContent.startsWith("Stored"));
await page.fill("#searchQuery", "queue stalls");
await page.click("#searchForm button");
await page.waitForSelector("#hits tbody tr");
expect((await page.textContent("#hits tbody")).includes("queue stalls"), "the ingested passage found");

await page.click("button[data-tab=classifier]");
await page.fill("#instruction", "Classify chat conversations");
await page.click("#runForm button");
await page.waitForSelector("#approvals:not([hidden])", { timeout: 20000 });
expect((await page.textContent("#runEvents")).includes("sampleConversation"), "what the approval is about shown");
await page.screenshot({ path: shots + "/approval.png" });
await page.click("#approve");
await page.waitForFunction(() => document.querySelector("#runState").textContent === "AWAITING_BATCH_APPROVAL", null, { timeout: 20000 });
await page.click("#approve");
await page.waitForFunction(() => document.querySelector("#runState").textContent === "COMPLETED", null, { timeout: 20000 });
expect(await page.locator("#approvals").isHidden(), "no approval buttons once the run completed");
await page.screenshot({ path: shots + "/classifier.png" });

await page.click("button[data-tab=sql]");
await page.waitForSelector("#sqlConnection option", { state: "attached" });
await page.click("#sqlStart button");
await page.waitForSelector("#sqlOptions button");
await page.locator("#sqlOptions button", { hasText: /own/i }).first().click();
await page.waitForFunction(() => document.querySelector("#sqlTurns").textContent.includes("Type the SQL"));
await page.fill("#sqlInput", "SELECT country, count(*) AS customers FROM customers GROUP BY country ORDER BY 2 DESC");
await page.click("#sqlForm button");
await page.waitForSelector("#sqlToConfirm:not([hidden])");
expect((await page.textContent("#sqlToConfirm")).startsWith("SELECT country"), "the SQL shown before it runs");
expect((await page.locator("#sqlResult tbody tr").count()) === 0, "nothing run before confirmation");
await page.locator("#sqlOptions button", { hasText: /run/i }).first().click();
await page.waitForSelector("#sqlResult tbody tr");
expect(await page.locator("#sqlResult tbody tr").count() === 9, "nine countries in the sample");
await page.screenshot({ path: shots + "/sql.png" });

await page.click("button[data-tab=analysis]");
await page.fill("#analysisQuery", "Summarise our incident reports");
await page.click("#analysisForm button");
await page.waitForFunction(() => { const t = document.querySelector("#analysisResult").textContent; return !t.startsWith("running") && !t.startsWith("Start a job"); }, null, { timeout: 30000 });
expect(await page.locator("#jobs tbody tr").count() >= 3, "the job tree: request, planning, synthesis");
expect((await page.locator("#jobs tbody tr button").count()) === 0, "no cancel or retry on a finished analysis");
const firstShown = await page.textContent("#jobs tbody tr:first-child td:first-child");
await page.fill("#analysisQuery", "Summarise our incident reports again"); // a second analysis, within the same minute
await page.click("#analysisForm button");
await page.waitForFunction(() => {
  const row = document.querySelector("#jobs tbody tr:first-child");
  return row && row.cells[3].textContent.endsWith("again") && !document.querySelector("#analysisResult").textContent.startsWith("running");
}, null, { timeout: 30000 });
expect((await page.textContent("#jobs tbody tr:first-child td:first-child")) !== firstShown, "two analyses show different short ids");
expect((await page.textContent("#analysisResult")).includes('"summary"'), "the synthesis in the result");
await page.screenshot({ path: shots + "/analysis.png" });
// The simulator waits before each answer (MODELGATEWAY_SIM_LATENCY), so an
// analysis runs long enough to be cancelled from its row.
await page.fill("#analysisQuery", "An analysis to cancel");
await page.click("#analysisForm button");
await page.locator("#jobs tbody tr:first-child button", { hasText: "Cancel" }).click({ timeout: 10000 });
await page.waitForFunction(() => {
  const row = document.querySelector("#jobs tbody tr:first-child");
  return row && row.cells[3].textContent === "An analysis to cancel" && row.cells[2].textContent === "CANCELLED";
}, null, { timeout: 30000 });
expect((await page.locator("#jobs tbody tr button").count()) === 0, "nothing to cancel or retry in a cancelled analysis");
const shown = await page.textContent("#error");
if (shown || errors.length) throw new Error("the console showed " + JSON.stringify(shown) + ", page errors " + JSON.stringify(errors));
await browser.close();
console.log("console: every tab worked");
