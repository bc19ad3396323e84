// The VS Code extension in real VS Code (code-server in headless Chromium,
// the built .vsix installed) against a real coordinator and a real gVisor
// sandbox. Requests come from inside the sandbox (lazaret-escalate).
// Issue 26 (agent text is data): every surface is checked against the hostile
// corpus (tests/hostile/strings.json) for raw unsafe characters and for
// anything rendered from agent text as a link, markup or a codicon.
// Environment: LAZARET_BIN, LAZARET_VSIX, LAZARET_VSCODE_ARTIFACTS, LAZARET_VSCODE_BENCH=1.
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import { after, afterEach, before, describe, test } from "node:test";
import { FakeCoordinator } from "./fakecoord.mjs";
import { LazaretEnv, sleep, waitUntil } from "./lzenv.mjs";
import { Workbench } from "./workbench.mjs";

const HERE = path.dirname(new URL(import.meta.url).pathname);
const VSIX = process.env.LAZARET_VSIX || path.resolve(HERE, "../../vscode-extension/lazaret.vsix");
const ARTIFACTS = process.env.LAZARET_VSCODE_ARTIFACTS || path.join(HERE, "artifacts");
const BENCH = process.env.LAZARET_VSCODE_BENCH === "1";
const STATUS = ".statusbar-item";
const measurements = {};
/** The API version the extension speaks (its generated protocol.ts). */
const EXTENSION_API = Number(fs.readFileSync(path.resolve(HERE, "../../vscode-extension/src/protocol.ts"), "utf8").match(/export const API_VERSION = (\d+);/)[1]);
const CORPUS = JSON.parse(fs.readFileSync(path.resolve(HERE, "../hostile/strings.json"), "utf8"));

// The unsafe set of DECISIONS D16 (controls, bidi, invisible, whitespace but the space).
const UNSAFE =
  /[\u0000-\u001f\u007f-\u009f\u202a-\u202e\u2066-\u2069\u200e\u200f\u061c\u00ad\u034f\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200d\u2060-\u2065\u206a-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff9-\ufffb\u{1d173}-\u{1d17a}\u{e0000}-\u{e007f}\u{e0100}-\u{e01ef}\u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]/u;

let env, repo, wb, keeper;

/** The corpus, each entry expanded (repeat) with its marker file. */
function corpus(marker) {
  return CORPUS.entries.map((e) => ({ name: e.name, text: e.text.repeat(e.repeat ?? 1).split(CORPUS.marker).join(marker) }));
}

/** The start of `text` that fits in `max` UTF-8 bytes (never half a character). */
function cutBytes(text, max) {
  let out = "";
  let bytes = 0;
  for (const ch of text) {
    const n = Buffer.byteLength(ch);
    if (bytes + n > max) break;
    out += ch;
    bytes += n;
  }
  return out;
}

/**
 * What is wrong with the surfaces as rendered now: raw unsafe characters in
 * their text (the newlines that separate the lines of our own tooltips and
 * dialogs aside), and anything rendered as a link, markup or a codicon.
 */
function inertProblems(surfaces, where) {
  const problems = [];
  const multiline = new Set(["hover", "dialog"]);
  for (const [area, list] of Object.entries(surfaces.texts)) {
    for (const text of list) {
      const bad = [...(multiline.has(area) ? text.replace(/\n/g, "") : text)].filter((c) => UNSAFE.test(c));
      if (bad.length) problems.push(`${where}: ${area} shows raw ${[...new Set(bad.map((c) => `U+${c.codePointAt(0).toString(16).padStart(4, "0")}`))].join(" ")} in ${JSON.stringify(text.slice(0, 160))}`);
    }
  }
  for (const r of surfaces.rendered) problems.push(`${where}: rendered ${r}`);
  return problems;
}

async function checkInert(where, problems) {
  const found = inertProblems(await wb.surfaces(), where);
  problems.push(...found);
  return found;
}

/** Runs one step of a test; a failure is recorded and the test goes on (so that one run lists every problem). */
async function stage(problems, name, fn) {
  try {
    await fn();
  } catch (e) {
    problems.push(`${name}: ${String(e?.message ?? e).split("\n")[0]}`);
    const shot = `stage-failed-${name.replace(/[^A-Za-z0-9-]+/g, "-").slice(0, 60)}.png`;
    await wb.screenshot(shot).then((f) => console.log(`stage ${JSON.stringify(name)} failed; screenshot ${f}`), () => undefined);
    await wb.page.keyboard.press("Escape").catch(() => undefined);
    await sleep(200);
  }
}

function pendingIds() {
  return env.pending().map((p) => p.requestId ?? p.request_id);
}

function auditOf(marker) {
  const records = env.audit(repo).filter((r) => (r.requestedArgv ?? r.requested_argv ?? []).join(" ").includes(marker));
  assert.equal(records.length, 1, JSON.stringify(records));
  return records[0];
}

/**
 * A request from the sandbox, seen in the status bar; then (unless `arm` is
 * false) past the arming delay, so that the test may answer it.
 */
async function requestAndSee(argv, justification, { arm = true } = {}) {
  const { session, t0 } = await env.escalate(repo, argv, justification);
  // Generous: latency is measured (and reported), never asserted here.
  const seen = await wb.waitText(STATUS, "Lazaret: 1 pending", 30_000);
  if (arm) await armed();
  return { session, t0, latency: seen - t0 };
}

/**
 * Past the arming delay (DECISIONS D20): an answer given within a second of a
 * request's arrival in the window, or of a request moving onto the row or
 * selection it is given on, is refused.
 */
const ARMED_MS = 1300;
const armed = () => sleep(ARMED_MS);
/** What the refusal of an answer within the arming delay says. */
const REFUSED = "less than a second ago";

/** The confirmation's question, and the command it names (the first line of its detail). */
async function confirmation() {
  await wb.dialog().waitFor({ timeout: 5_000 });
  const question = (await wb.dialog().locator(".dialog-message-text").textContent()) ?? "";
  // As rendered (innerText): its lines, whether VS Code draws them as text or <br>.
  const detail = (await wb.dialog().locator(".dialog-message-detail").innerText()) ?? "";
  return { question, command: detail.split("\n")[0], detail, text: (await wb.dialog().textContent()) ?? "" };
}

/**
 * The second step of an approval: the modal that asks "Run this command on
 * the host?", names COMMAND (exactly: the first line of its detail) and each
 * of NAMES, with a "Run on host" button; clicks it (or Enter, with
 * `keyboard`). Returns the modal's text.
 */
async function confirmRun(command, names = [], { keyboard = false, shot } = {}) {
  const { question, command: named, text } = await confirmation();
  assert.equal(question, "Run this command on the host?", `the confirmation's question: ${text}`);
  assert.equal(named, command, `the command the confirmation names: ${text}`);
  for (const n of names) assert.ok(text.includes(n), `the confirmation names ${JSON.stringify(n)}: ${text}`);
  if (shot) await wb.screenshot(shot);
  if (keyboard) await wb.page.keyboard.press("Enter");
  else await wb.dialog().locator(".monaco-button", { hasText: "Run on host" }).click();
  await wb.dialog().waitFor({ state: "hidden", timeout: 5_000 });
  return text;
}

/** Approve on the row showing LABEL, confirmed in the modal, which must name the command LABEL (and NAMES). */
async function approveInTree(label, names = [], options = {}) {
  await rowAction(label, "Approve Escalation");
  return confirmRun(label, names, options);
}

function visibleReview() {
  return wb.page.locator(".multiDiffEditor, .multi-diff-editor, .monaco-multi-diff-editor").filter({ visible: true }).first();
}

async function rowAction(text, action) {
  const row = wb.row(text);
  await row.waitFor({ timeout: 10_000 });
  const button = row.locator(`.action-label[aria-label^="${action}"]`);
  // Up to three hovers, as in `hoverText`: a tree that re-renders the row
  // under the pointer (a refresh after an event) hides its inline actions
  // again until the pointer moves onto the new row.
  for (let attempt = 1; ; attempt++) {
    await wb.page.mouse.move(700, 5);
    await row.hover();
    const clicked = await button.click({ timeout: 4_000 }).then(() => true, (e) => (attempt < 3 ? false : Promise.reject(e)));
    if (clicked) return;
  }
}

/**
 * Closes the open quick input: Escape sent to its own box (the page's focus
 * may be elsewhere, and the box ignores focus moving away), then waits until
 * it is gone (a box left open covers the rows the next step hovers: CI run
 * of 12f57bf).
 */
async function escapeQuickInput() {
  await wb.page.locator(".quick-input-widget input").press("Escape");
  await wb.page.locator(".quick-input-widget").waitFor({ state: "hidden", timeout: 5_000 });
}

/** The static test host (scripts/build puts it beside the lazaret binary's target). */
const TESTHOST = path.resolve(path.dirname(process.env.LAZARET_BIN || "target/debug/lazaret"), "../x86_64-unknown-linux-musl/static/lazaret-testhost");

/**
 * Runs FN({session, prefix, container}) against a domain of the profile
 * `ask` (`ask = true`, DNS questions held 1 s) on a podman network of the
 * test's own, created --internal inside the suite's loopback-only namespace
 * (tests/vscode/run): nothing reaches past this machine. The session runs
 * SCRIPT once the sandbox is up; with `echoHost`, a TCP echo host
 * (`lazaret-testhost echo 8081`) runs at PREFIX.13. Afterwards the session
 * is ended, the configuration is as before, and the network and its host
 * are gone.
 */
async function withAskDomain(script, fn, { echoHost = false } = {}) {
  return withNetworkDomain(
    {
      profile: "ask",
      config: (network) => `[network]\npodman_network = "${network}"\nask_hold_seconds = 1\n\n[profiles.ask]\nimage = "localhost/lazaret-default:1"\nask = true\n`,
      hosts: echoHost ? [{ host: 13, args: ["echo", "8081"] }] : [],
    },
    script,
    fn,
  );
}

/**
 * Runs FN({session, prefix, container}) against a domain of PROFILE on a
 * podman network of the test's own (created --internal inside the suite's
 * loopback-only namespace, tests/vscode/run: nothing reaches past this
 * machine), with CONFIG(network, prefix) appended to the configuration and
 * the test hosts HOSTS ({host, args, volumes}: `lazaret-testhost ARGS` at
 * PREFIX.HOST, runc) started first. The session (`lazaret run`, with the
 * variables SHELL added to its environment: the user's shell, never the
 * editor's) runs SCRIPT once the sandbox is up. Afterwards the session is
 * ended, the configuration is as before, and the network and its hosts are
 * gone.
 */
async function withNetworkDomain({ profile, config: extra, hosts: wanted = [], shell = {} }, script, fn) {
  const config = path.join(env.root, "config/lazaret/config.toml");
  const original = fs.readFileSync(config, "utf8");
  let network, prefix, session;
  const hosts = [];
  try {
    for (let i = 0; i < 20 && !network; i++) {
      const name = `lzv-${profile}-${process.pid}-${i}`;
      const candidate = `10.213.${220 + ((process.pid + i) % 20)}`;
      const r = spawnSync("podman", ["network", "create", "--internal", "--disable-dns", "--subnet", `${candidate}.0/24`, name], { encoding: "utf8" });
      if (r.status === 0) [network, prefix] = [name, candidate];
      else if (!/already used|exists/.test(r.stderr)) throw new Error(`podman network create: ${r.stderr}`);
    }
    assert.ok(network, "a podman network of the test's own");
    for (const { host, args, volumes = [] } of typeof wanted === "function" ? wanted(prefix) : wanted) {
      const name = `${network}-host${host}`;
      // runc cannot raise limits past the suite's own: the suite's --ulimit values.
      const r = spawnSync("podman", ["run", "-d", "--replace", "--name", name, "--runtime=runc", "--ulimit=nofile=4096:4096", "--ulimit=nproc=4096:4096", `--volume=${TESTHOST}:/testhost:ro`, ...volumes.map((v) => `--volume=${v}`), "--network", network, "--ip", `${prefix}.${host}`, "localhost/lazaret-default:1", "/testhost", ...args], { encoding: "utf8" });
      if (r.status !== 0) throw new Error(`test host: ${r.stderr}`);
      hosts.push(name);
      const up = await waitUntil(10_000, () => /listening/.test(spawnSync("podman", ["logs", name], { encoding: "utf8" }).stdout), 100);
      assert.ok(up, `test host .${host} came up`);
    }
    fs.writeFileSync(config, `${original}\n${extra(network, prefix)}`);
    const child = spawn(env.binary, ["run", "--profile", profile, "--workspace", repo, "--", "sh", "-c", `echo lazaret-ready; ${script}`], { env: { ...env.environ(), ...shell }, cwd: env.root, stdio: ["ignore", "pipe", "pipe"], detached: true });
    let stderr = "";
    let stdout = "";
    child.stderr.on("data", (d) => (stderr += d));
    child.stdout.on("data", (d) => (stdout += d));
    session = { child, done: new Promise((resolve) => child.on("close", (code) => resolve({ code, stdout, stderr }))), stdout: () => stdout, stderr: () => stderr };
    env.sessions.push(session);
    const ready = await waitUntil(180_000, () => stdout.startsWith("lazaret-ready\n") || child.exitCode !== null, 200);
    assert.ok(ready && stdout.startsWith("lazaret-ready\n"), `the ${profile} domain's session: ${stdout} ${stderr}`);
    const container = JSON.parse(env.lazaret(["domain", "--json", "--profile", profile, "--workspace", repo]).stdout).container_name;
    await fn({ session, prefix, container, network });
  } finally {
    if (session && session.child.exitCode === null) {
      try {
        process.kill(-session.child.pid, "SIGTERM");
      } catch {}
      await Promise.race([session.done, sleep(30_000)]);
    }
    fs.writeFileSync(config, original);
    for (const name of hosts) spawnSync("podman", ["rm", "-f", "-t", "0", name], { encoding: "utf8" });
    if (network) {
      // The domain tears down after its last session: then the network is free.
      await waitUntil(30_000, () => !spawnSync("podman", ["ps", "-aq", "--filter", `network=${network}`], { encoding: "utf8" }).stdout.trim(), 500);
      spawnSync("podman", ["network", "rm", "-f", network], { encoding: "utf8" });
    }
  }
}

/** Folds the suite's default domain, so that the ask domain's rows are in view. */
async function collapseDefaultDomain() {
  const row = wb.row("project (default)");
  if ((await row.getAttribute("aria-expanded").catch(() => "")) === "true") await row.locator(".monaco-tl-twistie").click();
}

/**
 * Unfolds "Rules and grants" until the row GRANTED shows (bounded): the
 * refresh that follows a grant can fold the section again right after the
 * click (seen in a full run: the grant's row never showed).
 */
async function showGrant(granted) {
  return unfoldUntil(wb.row("Rules and grants"), granted);
}

/**
 * Unfolds ROW until a row showing NEEDLE is in the tree (bounded, 10 s): a
 * refresh can fold a section again right after the click.
 */
async function unfoldUntil(row, needle) {
  return waitUntil(10_000, async () => {
    if ((await wb.treeText()).includes(needle)) return true;
    if ((await row.getAttribute("aria-expanded").catch(() => "")) === "false") await row.locator(".monaco-tl-twistie").click().catch(() => undefined);
    return false;
  }, 300);
}

/** The network grants `lazaret rules --json` lists (every domain). */
function listedGrants() {
  return Object.values(JSON.parse(env.lazaret(["rules", "--json"]).stdout)).flatMap((r) => r.network ?? []);
}

/** What the scope's quick pick offers for an address, wider than the request (issue 45, D19). */
const widerItem = (dest) => `every protocol and port of ${dest} (wider than asked)`;

/**
 * Opens the scope's quick pick of the network request on the row showing
 * DEST (past its arming delay): with the row's Allow button, or with
 * `keyboard`, by Show Pending Escalations (which selects the oldest request:
 * this one) and Ctrl+Alt+A on the selected row. Checks that the pick names
 * what an allow opens (OPENS: the name, or the address and its protocol and
 * port) and that the wider item (every protocol and port) is offered for an
 * address only (WIDER). Returns the quick pick's input.
 */
async function openAllowPick(dest, problems, { keyboard = false, opens = dest, wider = false } = {}) {
  await armed();
  if (keyboard) {
    await wb.page.keyboard.press("Escape");
    await wb.palette("Lazaret: Show Pending Escalations");
    await wb.page.locator(".monaco-list-row.selected", { hasText: dest }).waitFor({ timeout: 5_000 });
    await wb.page.keyboard.press("Control+Alt+A");
  } else await rowAction(dest, "Allow Network Request");
  const input = wb.page.locator(".quick-input-widget input");
  await input.waitFor({ state: "visible" });
  await wb.page.locator(".quick-input-widget .monaco-list-row", { hasText: "For 15 minutes" }).waitFor({ timeout: 5_000 });
  // As rendered (innerText: not the list's <style> rules), one line per title, label and detail.
  const pick = (await wb.page.locator(".quick-input-widget").innerText()) ?? "";
  if (!pick.includes(`Lazaret: allow ${opens}`)) problems.push(`the scope pick's title does not name what opens (${opens}): ${pick}`);
  if (!pick.includes(`opens ${opens}${wider ? " only" : ""} · `)) problems.push(`the scope pick's items do not say they open ${opens}: ${pick}`);
  if (wider !== pick.includes(widerItem(dest))) problems.push(`the wider item (${widerItem(dest)}) is ${wider ? "not offered for an address" : "offered for a name"}: ${pick}`);
  return input;
}

/**
 * Answers the network request on the row showing DEST: allowed for 15
 * minutes, the scope's quick pick (openAllowPick: OPENS, WIDER) saved as SHOT.
 */
async function allowFor15Minutes(dest, problems, { keyboard = false, shot = "network-scope-pick.png", opens = dest, wider = false } = {}) {
  const input = await openAllowPick(dest, problems, { keyboard, opens, wider });
  // The quick input fades in: a screenshot at once shows it half transparent.
  await sleep(500);
  await wb.screenshot(shot);
  await input.fill("For 15 minutes");
  await sleep(300);
  await input.press("Enter");
  await wb.waitText(STATUS, "Lazaret: 0 pending", 10_000).catch(async () => problems.push(`status bar after Allow: ${await wb.statusText()}`));
}

/**
 * Revokes the grant on the row showing GRANTED through its modal (whose text
 * NAMES checks); waits until the row is gone. Returns when Revoke was clicked.
 */
async function revokeFromTree(granted, problems, names, shot = "revoke-confirm.png") {
  await rowAction(granted, "Revoke Rule or Grant");
  await wb.dialog().waitFor({ timeout: 5_000 });
  const dialog = await wb.dialog().textContent();
  if (!names(dialog)) problems.push(`the confirmation does not name the grant: ${dialog}`);
  await wb.screenshot(shot);
  await wb.dialog().locator(".monaco-button", { hasText: "Revoke" }).click();
  const clicked = Date.now();
  await waitUntil(10_000, async () => !(await wb.treeText()).includes(granted));
  if ((await wb.treeText()).includes(granted)) problems.push(`the grant is still shown after Revoke:\n${await wb.treeText()}`);
  return clicked;
}

/** The text of the visible editor's rendered lines (Monaco shows spaces as U+00A0). */
async function editorText() {
  const editor = wb.page.locator(".editor-instance .monaco-editor .view-lines").filter({ visible: true }).first();
  return ((await editor.textContent().catch(() => "")) ?? "").replace(/\u00a0/g, " ");
}

describe("VS Code extension against a real sandbox", { concurrency: 1 }, () => {
  before(async () => {
    assert.ok(fs.existsSync(VSIX), `no .vsix at ${VSIX}: build it first (tests/vscode/run does)`);
    env = new LazaretEnv({ approvalTimeout: 120 });
    env.ensureImage();
    repo = env.repository();
    wb = new Workbench(env, repo, VSIX, ARTIFACTS);
    measurements.installMs = wb.install();
    // The editor opens on a folder whose domain is not running yet.
    await wb.start();
  });

  // A failed test leaves no request behind for the next one.
  afterEach(async () => {
    await wb?.page?.keyboard.press("Escape").catch(() => undefined);
    for (const p of env?.pending() ?? []) env.lazaret(["deny", (p.requestId ?? p.request_id).slice(0, 8)], { check: false });
    const others = (env?.sessions ?? []).filter((s) => s !== keeper);
    await Promise.race([Promise.all(others.map((s) => s.done)), sleep(20_000)]);
    if (env) env.sessions = env.sessions.filter((s) => s === keeper || s.child.exitCode === null);
  });

  after(async () => {
    await wb?.close();
    await env?.close();
    const log = Object.entries(measurements).map(([k, v]) => `${k}=${typeof v === "number" ? Math.round(v) : JSON.stringify(v)}`).join(" ");
    console.log(`# measurements: ${log}`);
    if (env?.sessions?.length) console.log("# sessions left");
  });

  test("activates on every window: status bar 'Lazaret: 0 pending'; the folder's domain shows while nothing runs", async () => {
    const seen = await wb.waitText(STATUS, "Lazaret: 0 pending", 60_000);
    measurements.loadToStatusBarMs = seen - wb.loadedAt;
    await wb.openView();
    await waitUntil(10_000, async () => (await wb.treeText()).includes("Not running"));
    const text = await wb.treeText();
    assert.match(text, /project \(default\)/, text);
    assert.match(text, /Not running/, text);
    const log = wb.extensionLog();
    const ui = log.match(/activate: UI ready in ([\d.]+) ms/);
    const first = log.match(/activate: first discovery done in ([\d.]+) ms/);
    assert.ok(ui && first, `activation times in the extension log:\n${log}`);
    measurements.activateUiMs = Number(ui[1]);
    measurements.activateDiscoveryMs = Number(first[1]);
  });

  test("issue 26 item 8: a window that cannot run lazaret (wrong lazaret.path) says so with the fix, never '0 pending'", async () => {
    const problems = [];
    await wb.setMachineSetting("lazaret.path", path.join(env.root, "no-such-dir/lazaret"));
    try {
      const said = await wb.waitText(STATUS, "Lazaret: cannot ask", 15_000).catch(() => false);
      const status = await wb.statusText();
      if (!said) problems.push(`the status bar does not say it cannot ask: ${status}`);
      if (/Lazaret: 0 pending/.test(status)) problems.push(`the status bar says 0 pending: ${status}`);
      await waitUntil(5_000, async () => /Lazaret cannot ask/.test(await wb.treeText()));
      const tree = await wb.treeText();
      if (!/Lazaret cannot ask/.test(tree)) problems.push(`the view does not say it cannot ask:\n${tree}`);
      const tip = await wb.hoverText(wb.page.locator(STATUS, { hasText: "Lazaret" }).first()).catch((e) => `(no tooltip: ${e.message})`);
      if (!/lazaret\.path/.test(tip) || !/cannot run the lazaret binary/.test(tip)) problems.push(`the tooltip names no fix: ${tip}`);
      await wb.screenshot("cannot-ask.png");
    } finally {
      await wb.setMachineSetting("lazaret.path", env.binary);
    }
    await wb.waitText(STATUS, "Lazaret: 0 pending", 15_000);
    assert.deepEqual(problems, []);
  });

  test("a coordinator that starts later is found (socket directory watch) and its state shows in the tree", async () => {
    keeper = await env.startDomain(repo);
    await waitUntil(10_000, async () => /running/.test(await wb.treeText()) && /Pending escalations \(0\)/.test(await wb.treeText()));
    const text = await wb.treeText();
    assert.match(text, /Sandbox: running/, text);
    assert.match(text, /Agent branch lazaret\/agent-default/, text);
    assert.match(text, /Network/, text);
    assert.match(text, /Recent audit records/, text);
  });

  test("issue 26 item 8: a coordinator that does not answer, or whose pending/list fails, is shown as that failure, never as '0 pending'", async () => {
    const problems = [];
    await wb.waitText(STATUS, "Lazaret: 0 pending", 10_000);
    const hung = new FakeCoordinator(env.socketDir, "deadbeef0001", { mode: "silent" });
    const failing = new FakeCoordinator(env.socketDir, "deadbeef0002", { mode: "list-error" });
    try {
      await hung.listen();
      // The hung one: no answer within the extension's timeout (8 s).
      const said = await wb.waitText(STATUS, "Lazaret: cannot ask", 20_000).catch(() => false);
      if (!said) problems.push(`a hung coordinator: the status bar says ${await wb.statusText()}`);
      await waitUntil(5_000, async () => /does not answer/.test(await wb.treeText()));
      const tree = await wb.treeText();
      if (!/Cannot ask this coordinator/.test(tree) || !/does not answer/.test(tree)) problems.push(`a hung coordinator: the view says\n${tree}`);
      await wb.screenshot("cannot-ask-hung.png");
      await hung.close();
      await wb.waitText(STATUS, "Lazaret: 0 pending", 15_000).catch(async () => problems.push(`after the hung one left: ${await wb.statusText()}`));
      await failing.listen();
      const saidList = await wb.waitText(STATUS, "Lazaret: cannot ask", 10_000).catch(() => false);
      if (!saidList) problems.push(`pending/list failing: the status bar says ${await wb.statusText()}`);
      const tip = await wb.hoverText(wb.page.locator(STATUS, { hasText: "Lazaret" }).first()).catch((e) => `(no tooltip: ${e.message})`);
      if (!/pending\/list failed/.test(tip)) problems.push(`pending/list failing: the tooltip says ${tip}`);
    } finally {
      await hung.close().catch(() => undefined);
      await failing.close().catch(() => undefined);
    }
    await wb.waitText(STATUS, "Lazaret: 0 pending", 15_000);
    assert.deepEqual(problems, []);
  });

  test("issue 28 item 5: a coordinator of another API version is shown with both versions and what to update; its requests are not asked for", async () => {
    await wb.waitText(STATUS, "Lazaret: 0 pending", 10_000);
    const request = { requestId: "other-api", argv: ["touch", "other-api"], display: "touch other-api", cwd: "/w", domainHash: "deadbeef0004", profile: "fake", sessionId: "s", reasons: [], riskNotes: [], receivedAtMs: Date.now(), expiresAtMs: Date.now() + 300_000 };
    const newer = new FakeCoordinator(env.socketDir, "deadbeef0004", { apiVersion: EXTENSION_API + 1, pending: [request] });
    try {
      await newer.listen();
      await wb.waitText(STATUS, "Lazaret: cannot ask", 10_000);
      const said = new RegExp(`speaks API ${EXTENSION_API + 1}, this extension speaks API ${EXTENSION_API}`);
      await waitUntil(5_000, async () => said.test(await wb.treeText()));
      const tip = await wb.hoverText(wb.page.locator(STATUS, { hasText: "Lazaret" }).first()).catch((e) => `(no tooltip: ${e.message})`);
      assert.match(tip, said);
      assert.match(tip, /Update the Lazaret extension/);
      assert.ok(!(await wb.treeText()).includes("touch other-api"), "its request is not shown as pending");
      assert.deepEqual([...new Set(newer.calls)], ["domain/status"], "asked nothing but its version");
    } finally {
      await newer.close().catch(() => undefined);
    }
    await wb.waitText(STATUS, "Lazaret: 0 pending", 15_000);
  });

  test("a request shows as '1 pending'; Approve in the tree asks first in a modal that names the command (Cancel runs nothing), Run on host runs it, audited as rpc:vscode", async () => {
    const { session, latency } = await requestAndSee(["touch", "approved-marker"], "create the marker");
    measurements.requestToStatusBarMs = latency;
    const warning = await wb.page.evaluate(() => [...document.querySelectorAll(".statusbar-item")].find((e) => e.textContent.includes("Lazaret: 1 pending"))?.className ?? "");
    assert.match(warning, /\bwarning-kind\b/, `the warning background (statusBarItem.warningBackground): ${warning}`);
    // The tree renders its rows in more than one pass: wait (up to 5 s) until
    // the group's count and the request's rows are all there.
    const wanted = ["touch approved-marker", `cwd: ${repo}`, "justification: create the marker", "not auto-approved:", "Pending escalations (1)"];
    await waitUntil(5_000, async () => { const shown = await wb.treeText(); return wanted.every((expected) => shown.includes(expected)); });
    const text = await wb.treeText();
    for (const expected of wanted) assert.ok(text.includes(expected), `${expected} in\n${text}`);
    const badge = await wb.page.locator(".activitybar .badge-content").allTextContents();
    assert.ok(badge.includes("1"), `badge on the view container: ${badge}`);
    await wb.screenshot("status-bar.png", { x: 0, y: 760, width: 1400, height: 100 });
    await wb.screenshot("tree-pending.png");
    assert.ok(!fs.existsSync(path.join(repo, "approved-marker")), "nothing runs before the answer");
    // Issue 45 (D20): Approve is a deliberate second step: a modal names the command; Escape (Cancel) answers nothing.
    await rowAction("touch approved-marker", "Approve Escalation");
    const shown = await confirmation();
    const dialog = shown.text;
    assert.equal(shown.question, "Run this command on the host?", dialog);
    assert.equal(shown.command, "touch approved-marker", dialog);
    for (const expected of [`In ${repo}`, "Program: touch (2 words", "Justification (the agent's words): create the marker", "Run on host"]) assert.ok(dialog.includes(expected), `${expected} in the confirmation: ${dialog}`);
    assert.deepEqual(inertProblems(await wb.surfaces(), "approve confirmation"), []);
    await wb.screenshot("approve-confirm.png");
    await wb.dialog().locator(".monaco-button", { hasText: "Cancel" }).click();
    await wb.dialog().waitFor({ state: "hidden", timeout: 5_000 });
    await sleep(1000);
    assert.equal(env.pending().length, 1, "Cancel answered nothing");
    assert.ok(!fs.existsSync(path.join(repo, "approved-marker")), "nothing ran after Cancel");
    await approveInTree("touch approved-marker");
    const out = await session.done;
    assert.match(out.stdout, /status=0/, JSON.stringify(out));
    assert.ok(fs.existsSync(path.join(repo, "approved-marker")), "it ran on the host");
    const record = auditOf("approved-marker");
    assert.deepEqual([record.outcome, record.decidedBy], ["approved", "rpc:vscode"]);
    await wb.waitText(STATUS, "Lazaret: 0 pending", 5_000);
  });

  test("Edit shows the shell-quoted argv, parses the edit back, shows it before it runs, runs the edited argv", async () => {
    const { session } = await requestAndSee(["touch", "requested marker"]);
    await rowAction("touch 'requested marker'", "Edit and Run Escalation");
    const input = wb.page.locator(".quick-input-widget input");
    await input.waitFor({ state: "visible" });
    assert.equal(await input.inputValue(), "touch 'requested marker'", "prefilled with the shell-quoted argv");
    await input.fill("touch 'edited marker' second");
    await input.press("Enter");
    const shown = await confirmation();
    const dialog = shown.text;
    assert.equal(shown.question, "Run this edited command on the host?", dialog);
    assert.equal(shown.command, "touch 'edited marker' second", dialog);
    assert.ok(dialog.includes('["touch","edited marker","second"]'), dialog);
    assert.ok(!fs.existsSync(path.join(repo, "edited marker")), "nothing runs before the confirmation");
    await wb.dialog().locator(".monaco-button", { hasText: "Run Edited Command" }).click();
    const out = await session.done;
    assert.match(out.stdout, /status=0/, JSON.stringify(out));
    assert.ok(fs.existsSync(path.join(repo, "edited marker")) && fs.existsSync(path.join(repo, "second")), "the edited argv ran");
    assert.ok(!fs.existsSync(path.join(repo, "requested marker")));
    const record = auditOf("requested marker");
    assert.deepEqual([record.outcome, record.decidedBy], ["edited", "rpc:vscode"]);
    assert.deepEqual((record.executedArgv ?? []).slice(1), ["edited marker", "second"]);
  });

  test("Deny sends the reason given", async () => {
    const { session } = await requestAndSee(["touch", "denied-marker"]);
    await rowAction("touch denied-marker", "Deny Escalation");
    const input = wb.page.locator(".quick-input-widget input");
    await input.waitFor({ state: "visible" });
    await input.fill("not today");
    await wb.page.keyboard.press("Enter");
    const out = await session.done;
    assert.doesNotMatch(out.stdout, /status=0/, JSON.stringify(out));
    assert.match(out.stderr, /not today/, out.stderr);
    assert.ok(!fs.existsSync(path.join(repo, "denied-marker")));
    const record = auditOf("denied-marker");
    assert.deepEqual([record.outcome, record.decidedBy, record.reason], ["denied", "rpc:vscode", "not today"]);
  });

  test("a request answered with `lazaret approve` in a terminal leaves the tree within a second", async () => {
    const { session } = await requestAndSee(["touch", "cli-marker"]);
    await waitUntil(5_000, async () => (await wb.treeText()).includes("touch cli-marker"));
    const pending = env.pending();
    assert.equal(pending.length, 1, JSON.stringify(pending));
    const id = pending[0].requestId ?? pending[0].request_id;
    env.lazaret(["approve", id.slice(0, 8)]);
    const answered = Date.now();
    const gone = await wb.waitGoneFromTree("touch cli-marker", 30_000);
    measurements.answeredElsewhereToGoneMs = gone - answered;
    await wb.waitText(STATUS, "Lazaret: 0 pending", 30_000);
    const out = await session.done;
    assert.match(out.stdout, /status=0/);
    assert.equal(auditOf("cli-marker").decidedBy, "rpc:cli");
  });

  test("issue 45 item 9: a request's notification goes away once the request is answered elsewhere (lazaret approve in a terminal): from the toasts and from the notification center", async () => {
    const problems = [];
    await wb.palette("Notifications: Clear All Notifications");
    const { session } = await requestAndSee(["touch", "notified-marker"], undefined, { arm: false });
    const text = "asks to run a command on the host";
    await wb.page.locator(".notification-toast", { hasText: text }).first().waitFor({ timeout: 10_000 });
    await wb.screenshot("notification-pending.png");
    const [pending] = env.pending();
    env.lazaret(["approve", pending.requestId.slice(0, 8)]);
    const answered = Date.now();
    const gone = await wb.waitGone(".notification-toast", text, 10_000).catch(() => undefined);
    if (gone) measurements.answeredElsewhereToNotificationGoneMs = gone - answered;
    else problems.push("the notification is still up 10 s after the request was answered in a terminal");
    await wb.palette("Notifications: Show Notifications");
    await wb.page.locator(".notifications-center").filter({ visible: true }).waitFor({ timeout: 5_000 });
    await sleep(300);
    const listed = await wb.page.locator(".notifications-center .notification-list-item", { hasText: text }).allTextContents();
    if (listed.length) problems.push(`the notification center still lists it: ${listed.join(" | ")}`);
    await wb.screenshot("notification-center-after-answer.png");
    await wb.palette("Notifications: Hide Notifications");
    assert.match((await session.done).stdout, /status=0/);
    assert.equal(auditOf("notified-marker").decidedBy, "rpc:cli");
    assert.deepEqual(problems, []);
  });

  test("issue 45 (D20): an Approve within a second of the request's arrival is refused with a message to look at it first; a second later it asks for the confirmation", async () => {
    const problems = [];
    let refused = false;
    for (let attempt = 1; attempt <= 3 && !refused && !problems.length; attempt++) {
      const marker = `early-marker-${attempt}`;
      const label = `touch ${marker}`;
      const { session } = await env.escalate(repo, ["touch", marker]);
      // At once: Approve on its row as soon as the row shows.
      const shown = await wb.waitText(".pane .monaco-list-row", label, 30_000);
      await rowAction(label, "Approve Escalation");
      const clicked = Date.now() - shown;
      const outcome = await Promise.race([
        wb.dialog().waitFor({ timeout: 4_000 }).then(() => "a confirmation"),
        wb.page.locator(".notification-toast", { hasText: REFUSED }).first().waitFor({ timeout: 4_000 }).then(() => "refused"),
      ]).catch(() => "nothing shown");
      if (outcome === "refused") {
        refused = true;
        measurements.earlyApproveClickMs = clicked;
        await wb.screenshot("approve-too-early.png");
        const message = await wb.page.locator(".notification-toast", { hasText: REFUSED }).first().textContent();
        if (!/nothing was answered/.test(message) || !/Look at it first/.test(message)) problems.push(`the refusal says: ${message}`);
        await sleep(500);
        if (!env.pending().some((p) => (p.argv ?? []).includes(marker))) problems.push(`refused, yet the request is no longer pending (clicked ${clicked} ms after its row showed)`);
        if (fs.existsSync(path.join(repo, marker))) problems.push("refused, yet it ran");
        // Past the delay, the same click asks for the confirmation, which runs it.
        await armed();
        await approveInTree(label);
        if (!/status=0/.test((await session.done).stdout)) problems.push("the approval after the delay did not run it");
      } else if (outcome === "a confirmation" && clicked > 400) {
        // Too slow a click to tell (more than 0.4 s after the row showed): cancel, try again.
        console.log(`# attempt ${attempt}: the click came ${clicked} ms after the row showed; again`);
        await wb.page.keyboard.press("Escape");
        for (const p of env.pending()) env.lazaret(["deny", p.requestId.slice(0, 8)], { check: false });
        await session.done;
      } else {
        problems.push(`Approve ${clicked} ms after the row showed: ${outcome}; pending: ${env.pending().map((p) => (p.argv ?? []).join(" "))}; ran: ${fs.existsSync(path.join(repo, marker))}`);
        await wb.page.keyboard.press("Escape");
      }
    }
    if (!refused && !problems.length) problems.push("no click came within 0.4 s of the row in 3 attempts");
    assert.deepEqual(problems, []);
  });

  test("issue 45 (D20): a request that moves onto the row under the pointer (the one there was answered elsewhere) is refused for a second; then its Approve asks for its own confirmation", async () => {
    const problems = [];
    let refused = false;
    for (let attempt = 1; attempt <= 3 && !refused && !problems.length; attempt++) {
      const names = [`moved-a${attempt}`, `moved-b${attempt}`];
      const session = await env.escalateMany(repo, names.map((n) => ({ argv: ["touch", n] })), `moved${attempt}`);
      await wb.waitText(STATUS, "Lazaret: 2 pending", 20_000);
      await waitUntil(5_000, async () => { const t = await wb.treeText(); return names.every((n) => t.includes(`touch ${n}`)); });
      await armed();
      const rows = (await wb.treeText()).split("\n");
      const [upper, lower] = [...names].sort((a, b) => rows.findIndex((r) => r.includes(`touch ${a}`)) - rows.findIndex((r) => r.includes(`touch ${b}`)));
      // The pointer on the upper request's Approve button.
      const row = wb.row(`touch ${upper}`);
      await wb.page.mouse.move(700, 5);
      await row.hover();
      const button = row.locator('.action-label[aria-label^="Approve Escalation"]');
      await button.waitFor({ timeout: 5_000 });
      const box = await button.boundingBox();
      const at = { x: box.x + box.width / 2, y: box.y + box.height / 2 };
      // The upper one is denied in a terminal: the lower one moves up, under the pointer; the click lands on it.
      const id = env.pending().find((p) => (p.argv ?? []).includes(upper)).requestId;
      env.lazaret(["deny", id.slice(0, 8)]);
      const gone = await wb.waitGoneFromTree(`touch ${upper}`, 10_000);
      await wb.page.mouse.click(at.x, at.y);
      const clicked = Date.now() - gone;
      const outcome = await Promise.race([
        wb.dialog().waitFor({ timeout: 4_000 }).then(() => "a confirmation"),
        wb.page.locator(".notification-toast", { hasText: REFUSED }).first().waitFor({ timeout: 4_000 }).then(() => "refused"),
      ]).catch(() => "nothing shown");
      const lowerPending = () => env.pending().some((p) => (p.argv ?? []).includes(lower));
      if (outcome === "refused") {
        refused = true;
        await wb.screenshot("approve-moved-refused.png");
        await sleep(500);
        if (!lowerPending()) problems.push(`refused, yet ${lower} is no longer pending`);
        // The premise: the same place is now the lower request's Approve; a second later it asks for its confirmation.
        await armed();
        await wb.page.mouse.move(700, 5);
        await wb.page.mouse.move(at.x, at.y);
        await wb.page.mouse.click(at.x, at.y);
        await confirmRun(`touch ${lower}`);
        const out = await session.done;
        if ((out.stdout.match(/status\d=0/g) ?? []).length !== 1) problems.push(`not exactly the lower request ran: ${out.stdout}`);
        if (!fs.existsSync(path.join(repo, lower)) || fs.existsSync(path.join(repo, upper))) problems.push(`ran: ${upper} ${fs.existsSync(path.join(repo, upper))}, ${lower} ${fs.existsSync(path.join(repo, lower))}`);
      } else if ((outcome === "a confirmation" && clicked > 400) || (outcome === "nothing shown" && lowerPending())) {
        // Too slow to tell, or the click landed beside the button while the row was redrawn: again.
        console.log(`# attempt ${attempt}: ${outcome}, ${clicked} ms after the upper row went; again`);
        await wb.page.keyboard.press("Escape");
        for (const p of env.pending()) env.lazaret(["deny", p.requestId.slice(0, 8)], { check: false });
        await session.done;
      } else {
        problems.push(`a click ${clicked} ms after ${lower} moved onto the row: ${outcome}; ${lower} pending: ${lowerPending()}; ran: ${fs.existsSync(path.join(repo, lower))}`);
        await wb.page.keyboard.press("Escape");
      }
    }
    if (!refused && !problems.length) problems.push("no click came in time in 3 attempts");
    assert.deepEqual(problems, []);
  });

  test("keyboard only: the palette's Approve shows the request in full, its confirmation names the command, Enter runs it", async () => {
    const { session } = await requestAndSee(["touch", "keyboard-marker"], "typed approval");
    await wb.page.keyboard.press("Escape");
    await wb.palette("Lazaret: Approve Escalation");
    const pick = wb.page.locator(".quick-input-widget .monaco-list-row", { hasText: "touch keyboard-marker" });
    await pick.waitFor({ timeout: 5_000 });
    const shown = await wb.page.locator(".quick-input-widget").textContent();
    for (const expected of ["touch keyboard-marker", `cwd ${repo}`, "why: typed approval", "not auto-approved"]) assert.ok(shown.includes(expected), `${expected} in ${shown}`);
    await wb.page.keyboard.press("Enter");
    await confirmRun("touch keyboard-marker", ["typed approval"], { keyboard: true });
    const out = await session.done;
    assert.match(out.stdout, /status=0/, JSON.stringify(out));
    assert.deepEqual([auditOf("keyboard-marker").outcome, auditOf("keyboard-marker").decidedBy], ["approved", "rpc:vscode"]);
  });

  test("keyboard only: Show Pending focuses the request in the tree and Ctrl+Alt+A approves the selected one after its confirmation", async () => {
    const { session } = await requestAndSee(["touch", "keybinding-marker"]);
    await wb.page.keyboard.press("Escape");
    await wb.palette("Lazaret: Show Pending Escalations");
    await wb.page.locator(".monaco-list-row.selected", { hasText: "touch keybinding-marker" }).waitFor({ timeout: 5_000 });
    await wb.page.keyboard.press("Control+Alt+A");
    await confirmRun("touch keybinding-marker", [], { keyboard: true });
    const out = await session.done;
    assert.match(out.stdout, /status=0/, JSON.stringify(out));
    assert.equal(auditOf("keybinding-marker").decidedBy, "rpc:vscode");
  });

  test("issue 26 item 1: a command link in agent text is never rendered, and lazaret.approve/deny with a forged argument (string, object, tree handle) answers nothing", async () => {
    const problems = [];
    const link = "[Show details](command:lazaret.approve?%5B%22REQUEST%22%5D)";
    const { session } = await requestAndSee(["touch", "link-marker", link], `see ${link}`);
    const [id] = pendingIds();
    await wb.page.locator(".notification-toast").first().waitFor({ timeout: 5_000 });
    await waitUntil(5_000, async () => (await wb.treeText()).includes("touch link-marker"));
    await checkInert("link request", problems);
    const toasts = (await wb.surfaces()).texts.notifications.join("\n");
    if (toasts.includes("command:") || toasts.includes("Show details")) problems.push(`agent text in a notification: ${toasts}`);
    await wb.screenshot("command-link.png");
    // A command link (or a keybinding) can pass any JSON argument: forge them.
    const socket = env.domain(repo).control_socket ?? env.domain(repo).controlSocket;
    const forged = [
      ["lazaret.approve", id],
      ["lazaret.approve", { type: "escalation", socket, requestId: id }],
      ["lazaret.approve", { type: "escalation", requestId: id }],
      ["lazaret.approve", { $treeViewId: "lazaret.tree", $treeItemHandle: `1/escalation:${id}` }],
      ["lazaret.deny", id],
      ["lazaret.edit", { type: "leaf", socket, requestId: id, id: "x", label: "x" }],
    ];
    const keys = ["u", "i", "o", "p", "j", "k"];
    await wb.setKeybindings(forged.map(([command, args], i) => ({ key: `ctrl+alt+shift+${keys[i]}`, command, args })));
    for (const [i, [command, args]] of forged.entries()) {
      await wb.page.locator(".monaco-workbench").click({ position: { x: 900, y: 400 } });
      await wb.page.keyboard.press(`Control+Alt+Shift+Key${keys[i].toUpperCase()}`);
      // Not ours: the quick pick of every pending request asks instead.
      const asked = await wb.page.locator(".quick-input-widget .quick-input-title", { hasText: "which request?" }).waitFor({ timeout: 3_000 }).then(() => true, () => false);
      await wb.page.keyboard.press("Escape");
      await sleep(300);
      if (!pendingIds().includes(id)) {
        problems.push(`${command} ${JSON.stringify(args)} answered the request`);
        break;
      }
      if (!asked) problems.push(`${command} ${JSON.stringify(args)}: no quick pick asked which request`);
    }
    const records = env.audit(repo).filter((r) => (r.requestId ?? r.request_id) === id);
    if (records.length) problems.push(`audited: ${JSON.stringify(records)}`);
    if (fs.existsSync(path.join(repo, "link-marker"))) problems.push("touch link-marker ran on the host");
    await wb.setKeybindings([]);
    assert.deepEqual(problems, []);
    env.lazaret(["deny", id.slice(0, 8)]);
    await session.done;
  });

  test("issue 26 item 5: an answer the coordinator refuses (edit to an empty program: 1004) leaves the request pending in the tree and the status bar", async () => {
    const problems = [];
    const { session } = await requestAndSee(["touch", "kept-marker"]);
    await rowAction("touch kept-marker", "Edit and Run Escalation");
    const input = wb.page.locator(".quick-input-widget input");
    await input.waitFor({ state: "visible" });
    await input.fill("''");
    await input.press("Enter");
    await wb.dialog().locator(".monaco-button", { hasText: "Run Edited Command" }).click();
    // The refusal is shown in a modal.
    const failed = await wb.dialog().filter({ hasText: "failed" }).waitFor({ timeout: 10_000 }).then(() => true, () => false);
    const dialog = failed ? await wb.dialog().textContent() : "";
    if (!failed) problems.push("no error was shown");
    else if (!/still pending/.test(dialog)) problems.push(`the error does not say the request is still pending: ${dialog}`);
    await wb.screenshot("failed-edit.png");
    await wb.page.keyboard.press("Escape");
    await sleep(500);
    if (!pendingIds().length) problems.push("the coordinator does not list the request any more (test premise)");
    const status = await wb.statusText();
    if (!status.includes("Lazaret: 1 pending")) problems.push(`status bar after the failed answer: ${status}`);
    if (!(await wb.treeText()).includes("touch kept-marker")) problems.push(`the tree dropped the request:\n${await wb.treeText()}`);
    await wb.palette("Lazaret: Refresh");
    await sleep(1000);
    if (!(await wb.statusText()).includes("Lazaret: 1 pending")) problems.push(`status bar after Refresh: ${await wb.statusText()}`);
    assert.deepEqual(problems, []);
    // Still answerable from the tree.
    await approveInTree("touch kept-marker");
    assert.match((await session.done).stdout, /status=0/);
    assert.ok(fs.existsSync(path.join(repo, "kept-marker")));
  });

  test("issue 26 item 6: a bidi override reaches no surface raw (notification, status bar and its tooltip, tree row and tooltip, quick pick, approve modal, deny box, edit box, edit modal)", async () => {
    const problems = [];
    const argv = ["rm", "-rf", "x-\u202ehs.ecnetnes", "ass-line"];
    const session = await env.escalateMany(repo, [{ argv, justification: "clean up x-\u202ehs.ecnetnes" }], "bidi");
    await wb.waitText(STATUS, "Lazaret: 1 pending", 10_000);
    await armed();
    const label = "rm -rf";
    await waitUntil(5_000, async () => (await wb.treeText()).includes(label));
    await checkInert("notification, status bar, tree", problems);
    await stage(problems, "tree tooltip", async () => {
      await wb.hoverText(wb.row(label));
      await checkInert("tree tooltip", problems);
    });
    await stage(problems, "status bar tooltip", async () => {
      await wb.hoverText(wb.page.locator(STATUS, { hasText: "Lazaret" }).first());
      await checkInert("status bar tooltip", problems);
    });
    await wb.page.mouse.move(700, 5);
    await stage(problems, "quick pick", async () => {
      await wb.palette("Lazaret: Approve Escalation");
      await wb.page.locator(".quick-input-widget .monaco-list-row", { hasText: label }).waitFor({ timeout: 5_000 });
      await checkInert("quick pick", problems);
      await escapeQuickInput();
    });
    await stage(problems, "approve modal", async () => {
      await rowAction(label, "Approve Escalation");
      await wb.dialog().waitFor({ timeout: 5_000 });
      await checkInert("approve modal", problems);
      if (!/rm -rf .*x-\\u\{?202e\}?hs\.ecnetnes/i.test(await wb.dialog().textContent())) problems.push(`the approve modal does not name the command with the override escaped: ${await wb.dialog().textContent()}`);
      await wb.screenshot("bidi-approve-modal.png");
      await wb.page.keyboard.press("Escape");
      await wb.dialog().waitFor({ state: "hidden", timeout: 5_000 });
    });
    await stage(problems, "deny box", async () => {
      await rowAction(label, "Deny Escalation");
      await wb.page.locator(".quick-input-widget input").waitFor({ state: "visible" });
      await checkInert("deny box", problems);
      await escapeQuickInput();
    });
    await stage(problems, "edit box and modal", async () => {
      await rowAction(label, "Edit and Run Escalation");
      await wb.page.locator(".quick-input-widget input").waitFor({ state: "visible" });
      await checkInert("edit box", problems);
      // Through the box itself: it keeps its place when something else takes the focus (ignoreFocusOut), the keyboard does not.
      await wb.page.locator(".quick-input-widget input").press("Enter");
      await wb.dialog().waitFor({ timeout: 5_000 });
      await checkInert("edit modal", problems);
      await wb.screenshot("bidi-modal.png");
      await wb.page.keyboard.press("Escape");
    });
    await sleep(300);
    if (!pendingIds().length) problems.push("the request was answered");
    assert.deepEqual(problems, []);
    for (const id of pendingIds()) env.lazaret(["deny", id.slice(0, 8)]);
    await session.done;
  });

  test("issue 26 item 7 (long text): a 64 KiB argv shows the program and its start first, says it was cut, its Approve confirmation shows its start and its end (issue 45), and Show Full Request opens all of it read-only", async () => {
    const problems = [];
    // The longest argv that can wait for a human: the coordinator refuses a
    // pending request over 192 KiB as shown (argv, display and reasons).
    const long = "A".repeat(60_000);
    const session = await env.escalateMany(repo, [{ argv: ["echo", long, "the-end-word"], justification: `${"B".repeat(4000)} justification-end` }], "long");
    await wb.waitText(STATUS, "Lazaret: 1 pending", 10_000);
    await armed();
    await waitUntil(5_000, async () => (await wb.treeText()).includes("echo AAAA"));
    const rows = (await wb.treeText()).split("\n");
    const label = rows.find((r) => r.startsWith("echo AAAA")) ?? "";
    if (!/cut: [56][0-9],[0-9]{3} more characters/.test(label)) problems.push(`the row does not say it was cut: ${label.slice(0, 200)}…${label.slice(-120)}`);
    if (!rows.some((r) => /^Show Full Request \(cut here/.test(r))) problems.push(`no Show Full Request row:\n${rows.join("\n").slice(0, 1500)}`);
    await stage(problems, "quick pick", async () => {
      await wb.palette("Lazaret: Approve Escalation");
      const pick = wb.page.locator(".quick-input-widget .monaco-list-row", { hasText: "echo AAAA" });
      await pick.waitFor({ timeout: 5_000 });
      if (!/cut: [0-9,]+ more characters/.test(await pick.textContent())) problems.push("the quick pick does not say it was cut");
      await wb.screenshot("long-request.png");
      await wb.page.keyboard.press("Escape");
    });
    // The confirmation cuts in the middle: the program and the start, how much was cut, and the end (the last word).
    await stage(problems, "approve confirmation", async () => {
      await rowAction("echo AAAA", "Approve Escalation");
      const { command } = await confirmation();
      if (!/^echo AAAA+ …\(59,\d{3} characters cut\)… A+ the-end-word$/.test(command)) problems.push(`the confirmation's command: ${command.slice(0, 120)}…${command.slice(-120)}`);
      if (command.length > 300) problems.push(`the confirmation's command is ${command.length} characters`);
      const shown = await wb.textVisible(wb.dialog().locator(".dialog-message-detail"), "the-end-word");
      if (!shown.visible) problems.push(`the command's end is not visible in the confirmation: ${shown.why}`);
      if (!(await wb.dialog().textContent()).includes("Show Full Request")) problems.push("the confirmation does not point at Show Full Request");
      await wb.screenshot("long-approve-confirm.png");
      await wb.page.keyboard.press("Escape");
      await wb.dialog().waitFor({ state: "hidden", timeout: 5_000 });
      if (pendingIds().length !== 1) problems.push("Escape answered the request");
    });
    await stage(problems, "Show Full Request action", () => rowAction("echo AAAA", "Show Full Request"));
    const opened = await wb.page.locator(".tab.active", { hasText: "request-" }).waitFor({ timeout: 5_000 }).then(() => true, () => false);
    if (!opened) problems.push("Show Full Request opened no document");
    else {
      await waitUntil(5_000, async () => (await editorText()).includes("Command ("));
      const head = await editorText();
      if (!head.includes("echo AAAA")) problems.push(`the document does not start with the command: ${head.slice(0, 300)}`);
      await wb.page.locator(".editor-instance .monaco-editor").filter({ visible: true }).first().click();
      await wb.page.keyboard.press("Control+End");
      await sleep(500);
      const tail = await editorText();
      if (!tail.includes("justification-end")) problems.push(`the document's end is not the request's end: ${tail.slice(-400)}`);
      await wb.page.keyboard.press("Control+Home");
      await wb.page.keyboard.press("Control+F");
      await wb.page.keyboard.type("the-end-word");
      await sleep(500);
      const found = await wb.page.locator(".find-widget .matchesCount").textContent().catch(() => "");
      if (!/^[1-9]\d* of [1-9]/.test(found ?? "")) problems.push(`the last argv word is not in the document: ${found}`);
      await wb.page.keyboard.press("Escape");
      await wb.screenshot("full-request.png");
      await wb.page.keyboard.press("Control+W");
    }
    assert.deepEqual(problems, []);
    for (const id of pendingIds()) env.lazaret(["deny", id.slice(0, 8)]);
    await session.done;
  });

  test("issue 26 item 7 (ids): the same request id from two domains is two entries, each under its own domain, each answered alone [a fake second coordinator: ids are minted per coordinator]", async () => {
    const problems = [];
    const { session } = await requestAndSee(["touch", "same-id-real"]);
    const [id] = pendingIds();
    const real = env.pending()[0];
    const fake = new FakeCoordinator(env.socketDir, "deadbeef0003", {
      pending: [{ ...real, argv: ["touch", "from-the-fake"], display: "touch from-the-fake", reasons: ["the fake coordinator's request"], domainHash: "deadbeef0003", profile: "fake", cwd: "/nonexistent/fake-workspace" }],
    });
    try {
      await fake.listen();
      const both = await wb.waitText(STATUS, "Lazaret: 2 pending", 10_000).then(() => true, () => false);
      if (!both) problems.push(`status bar: ${await wb.statusText()}`);
      await waitUntil(8_000, async () => (await wb.treeText()).includes("touch from-the-fake") && (await wb.treeText()).includes("touch same-id-real"));
      const rows = (await wb.treeText()).split("\n");
      const at = (t) => rows.findIndex((r) => r.includes(t));
      const [fakeDomain, fakeRow, realDomain, realRow] = [at("fake-workspace (fake)"), at("touch from-the-fake"), at("project (default)"), at("touch same-id-real")];
      if (fakeRow < 0 || realRow < 0) problems.push(`not both listed:\n${rows.join("\n")}`);
      else if (!(fakeDomain < fakeRow && fakeRow < realDomain && realDomain < realRow)) problems.push(`not each under its own domain:\n${rows.join("\n")}`);
      await wb.screenshot("same-id.png");
      // Approve the real one in the tree: it runs; the fake's stays pending and got no answer.
      await stage(problems, "approve the real request in the tree", async () => {
        // The fake domain's request came before it in the view: the real one moved, and waits its arming delay again.
        await armed();
        await approveInTree("touch same-id-real");
        const out = await Promise.race([session.done, sleep(10_000).then(() => ({ stdout: "(still waiting after 10 s)" }))]);
        if (!/status=0/.test(out.stdout)) problems.push(`the real request did not run: ${out.stdout}`);
      });
      await sleep(500);
      if (fake.responses.length) problems.push(`the fake coordinator got an answer: ${JSON.stringify(fake.responses)}`);
      if (!(await wb.treeText()).includes("touch from-the-fake")) problems.push("the other domain's request left the tree");
      if (!(await wb.statusText()).includes("Lazaret: 1 pending")) problems.push(`status bar after the answer: ${await wb.statusText()}`);
      if (!id) problems.push("no id");
    } finally {
      await fake.close();
    }
    assert.deepEqual(problems, []);
    await wb.waitText(STATUS, "Lazaret: 0 pending", 10_000);
  });

  describe("the agent branch", { concurrency: 1 }, () => {
    before(async () => {
      const script =
        "cd /workspace && printf 'pub fn answer() -> u32 { 43 }\\n' > src/lib.rs && echo hi > new.txt && " +
        "mkdir -p .vscode && echo '{}' > .vscode/tasks.json && git add -A && git commit -qm agent && echo scratch > notes.txt";
      const r = env.execIn(repo, script);
      assert.equal(r.status, 0, JSON.stringify(r));
      assert.ok(await waitUntil(15_000, () => env.git(repo, "for-each-ref", "refs/heads/lazaret/agent-default").trim(), 100), "the agent commit reached the host");
    });

    test("the tree shows the branch with its warning; Open Agent Branch Diff warns in a modal first, then shows the changed files", async () => {
      await waitUntil(10_000, async () => (await wb.treeText()).includes("warning"));
      assert.match(await wb.treeText(), /1 commit\(s\) ahead/);
      await wb.palette("Lazaret: Open Agent Branch Diff");
      await wb.dialog().waitFor({ timeout: 10_000 });
      const dialog = await wb.dialog().textContent();
      assert.ok(dialog.includes(".vscode/tasks.json"), dialog);
      assert.match(dialog, /run code/, dialog);
      await wb.screenshot("review-warning.png");
      await wb.dialog().locator(".monaco-button", { hasText: "Open Review" }).click();
      const tab = wb.page.locator(".tab.active", { hasText: "Agent branch lazaret/agent-default" });
      await tab.waitFor({ timeout: 15_000 });
      await wb.page.locator(".tab", { hasText: "Uncommitted in the sandbox" }).waitFor({ timeout: 5_000 });
      const editor = visibleReview();
      await waitUntil(10_000, async () => /lib\.rs/.test((await editor.textContent().catch(() => "")) ?? ""));
      const text = await editor.textContent();
      for (const f of ["tasks.json", "lib.rs", "new.txt"]) assert.ok(text.includes(f), `${f} in the review: ${text.slice(0, 500)}`);
      assert.ok((await wb.page.locator(".tab").allTextContents()).some((t) => t.includes("⚠ .vscode/tasks.json")), "the warning in the review's title");
      assert.equal(await wb.page.locator(".tab", { hasText: "Uncommitted in the sandbox" }).count(), 1, "the uncommitted changes as a separate group");
    });

    test("the review's documents come from branch/fileContents (base 42, agent head 43) [needs protocol v1 additions]", async () => {
      await wb.page.locator(".tab.active", { hasText: "Agent branch lazaret/agent-default" }).waitFor({ timeout: 5_000 });
      const editor = visibleReview();
      const text = async () => ((await editor.textContent().catch(() => "")) ?? "").replace(/\u00a0/g, " ");
      const ok = await waitUntil(10_000, async () => {
        const t = await text();
        return t.includes("{ 43 }") && t.includes("{ 42 }");
      }, 200);
      await wb.screenshot("review-diff.png");
      const t = await text();
      assert.ok(!t.includes("does not serve branch/fileContents"), `this lazaret (${env.binary}) does not serve branch/fileContents (protocol v1 additions)`);
      assert.ok(ok, `base and head contents in the review: ${t.slice(0, 800)}`);
    });

    const agentHead = () => { try { return env.git(repo, "rev-parse", "lazaret/agent-default").trim(); } catch { return ""; } };
    const hostHead = () => { try { return env.git(repo, "rev-parse", "HEAD").trim(); } catch { return ""; } };
    /** A commit inside the sandbox; resolves with the agent branch's new head on the host. */
    async function agentCommits(script) {
      const before = agentHead();
      const r = env.execIn(repo, `cd /workspace && ${script} && git commit -qm 'agent commit'`);
      assert.equal(r.status, 0, JSON.stringify(r));
      assert.ok(await waitUntil(15_000, () => agentHead() !== before, 100), "the agent's commit reached the host");
      return agentHead();
    }

    test("issue 26 item 3: a review shows the commits its title names: the branch moves while its warning modal is up, the review still shows the reviewed commit", async () => {
      await wb.palette("View: Close All Editors");
      const reviewed = agentHead();
      await wb.palette("Lazaret: Open Agent Branch Diff");
      await wb.dialog().waitFor({ timeout: 10_000 });
      // Between the diff the modal describes and the documents of the review, the agent commits.
      await agentCommits("printf 'pub fn answer() -> u32 { 44 }\\n' > src/lib.rs && git add src/lib.rs");
      await wb.dialog().locator(".monaco-button", { hasText: "Open Review" }).click();
      await wb.page.locator(".tab.active", { hasText: `..${reviewed.slice(0, 8)}` }).waitFor({ timeout: 15_000 });
      const editor = visibleReview();
      const text = async () => ((await editor.textContent().catch(() => "")) ?? "").replace(/\u00a0/g, " ");
      await waitUntil(15_000, async () => /\{ 4[34] \}/.test(await text()), 200);
      await sleep(1000);
      const t = await text();
      await wb.screenshot("review-after-move.png");
      assert.ok(t.includes("{ 43 }"), `the reviewed commit's text (43) in the review titled ..${reviewed.slice(0, 12)}: ${t.slice(0, 600)}`);
      assert.ok(!t.includes("{ 44 }"), `the newer head's text (44) in the review titled ..${reviewed.slice(0, 12)}: ${t.slice(0, 600)}`);
      await wb.palette("View: Close All Editors");
    });

    test("issue 26 item 3: the branch moves while the merge confirmation is up: nothing is merged, the user is told it moved and offered the review again", async () => {
      const problems = [];
      await waitUntil(10_000, async () => /Agent branch lazaret\/agent-default/.test(await wb.treeText()));
      await wb.palette("Lazaret: Open Agent Branch Diff");
      await wb.dialog().waitFor({ timeout: 10_000 }).catch(async (e) => {
        await wb.screenshot("failure-no-review-modal.png");
        throw e;
      });
      await wb.dialog().locator(".monaco-button", { hasText: "Open Review" }).click();
      const reviewed = agentHead();
      await wb.page.locator(".tab.active", { hasText: reviewed.slice(0, 8) }).waitFor({ timeout: 15_000 });
      const before = hostHead();
      await wb.palette("Lazaret: Merge Agent Branch");
      await wb.dialog().waitFor({ timeout: 10_000 }).catch(async (e) => {
        await wb.screenshot("failure-no-merge-confirmation.png");
        console.log(`# extension log:\n${wb.extensionLog().split("\n").slice(-20).join("\n")}`);
        throw e;
      });
      const confirm = await wb.dialog().textContent();
      if (!confirm.includes(reviewed.slice(0, 8))) problems.push(`the confirmation does not name the reviewed commit ${reviewed}: ${confirm}`);
      // While the confirmation is up, the agent commits a file that makes hosts run code.
      const moved = await agentCommits("echo 'touch /tmp/envrc-ran' > .envrc && git add .envrc");
      await wb.screenshot("merge-confirm.png");
      await wb.dialog().locator(".monaco-button", { hasText: /^Merge$/ }).click();
      const told = await wb.dialog().filter({ hasText: "moved since the review" }).waitFor({ timeout: 15_000 }).then(() => true, () => false);
      await sleep(500);
      if (hostHead() !== before) problems.push(`HEAD moved from ${before} to ${hostHead()} (the agent's new head is ${moved})`);
      if (fs.existsSync(path.join(repo, ".envrc"))) problems.push(".envrc was merged into the host checkout");
      if (!told) problems.push(`not told the branch moved: ${await wb.dialog().textContent().catch(() => "(no dialog)")}`);
      else {
        const dialog = await wb.dialog().textContent();
        if (!dialog.includes(reviewed.slice(0, 12)) || !dialog.includes(moved.slice(0, 12))) problems.push(`the message does not name both commits: ${dialog}`);
        await wb.screenshot("merge-moved.png");
        await wb.dialog().locator(".monaco-button", { hasText: "Reopen Review" }).click();
        // The review again, at the new commit, with its warnings first.
        const warned = await wb.dialog().filter({ hasText: ".envrc" }).waitFor({ timeout: 10_000 }).then(() => true, () => false);
        if (!warned) problems.push("Reopen Review did not warn about .envrc");
        else {
          await wb.dialog().locator(".monaco-button", { hasText: "Open Review" }).click();
          const tab = await wb.page.locator(".tab.active", { hasText: moved.slice(0, 12) }).waitFor({ timeout: 15_000 }).then(() => true, () => false);
          if (!tab) problems.push(`no review at ${moved}`);
        }
      }
      assert.deepEqual(problems, []);
    });

    test("Merge Agent Branch names the reviewed commit and repeats its warnings, then merges exactly that commit (lazaret merge --expect)", async () => {
      const reviewed = agentHead();
      await wb.palette("Lazaret: Merge Agent Branch");
      await wb.dialog().waitFor({ timeout: 20_000 }).catch(async (e) => {
        await wb.screenshot("failure-no-merge-modal.png");
        console.log(`# extension log:\n${wb.extensionLog().split("\n").slice(-20).join("\n")}`);
        throw e;
      });
      const dialog = await wb.dialog().textContent();
      assert.ok(dialog.includes("Merge lazaret/agent-default"), dialog);
      assert.ok(dialog.includes(reviewed.slice(0, 12)), `the commit ${reviewed} in ${dialog}`);
      assert.ok(dialog.includes(".vscode/tasks.json") && dialog.includes(".envrc"), dialog);
      assert.ok(!fs.existsSync(path.join(repo, "new.txt")), "nothing merged before the confirmation");
      await wb.dialog().locator(".monaco-button", { hasText: /^Merge$/ }).click();
      // The merge rewrites the working tree file by file: wait until it has
      // finished (HEAD moved) before reading what it wrote.
      assert.ok(await waitUntil(15_000, () => fs.existsSync(path.join(repo, "new.txt")) && hostHead() === reviewed, 100), `merged: HEAD ${hostHead()}, reviewed ${reviewed}`);
      assert.equal(fs.readFileSync(path.join(repo, "src/lib.rs"), "utf8"), "pub fn answer() -> u32 { 44 }\n");
      assert.ok(fs.existsSync(path.join(repo, ".envrc")), "the reviewed commit's .envrc");
      assert.ok(!fs.existsSync(path.join(repo, "notes.txt")), "uncommitted sandbox changes are not merged");
      assert.match(wb.extensionLog(), new RegExp(`lazaret merge --expect ${reviewed}: exit 0`));
    });
  });

  describe("issue 26: the hostile corpus (tests/hostile/strings.json) through every surface", { concurrency: 1 }, () => {
    let marker, entries;
    const seenProblems = (problems) => [...new Set(problems)];

    before(() => {
      marker = path.join(env.root, "hostile-marker");
      entries = corpus(marker);
      assert.ok(entries.length >= 34, `${entries.length} corpus entries`);
    });

    test("every entry as argv words and as justification: inert in the notification, tree rows and tooltips, status bar and tooltip, quick pick, approve modal, deny box, edit box, edit modal, full request; nothing runs; the view stays usable", async () => {
      const problems = [];
      const small = entries.filter((e) => e.text.length < 1000);
      const longWords = entries.find((e) => e.name === "long-words").text;
      const longLine = entries.find((e) => e.name === "long-line").text;
      // Groups whose escaped text fits one tooltip; every small entry in one group's argv and justification.
      const groups = [[]];
      let size = 0;
      for (const e of small) {
        const n = [...e.text].reduce((k, c) => k + (UNSAFE.test(c) ? 9 : 1), 0);
        if (size + n > 900 && groups.at(-1).length) {
          groups.push([]);
          size = 0;
        }
        groups.at(-1).push(e);
        size += n;
      }
      const requests = [
        ...groups.map((g, i) => ({ argv: ["echo", `hostile-group-${i}`, ...g.map((e) => e.text)], justification: g.map((e) => e.text).join(" | ") })),
        { argv: ["echo", "hostile-long-words", longWords], justification: cutBytes(longWords, 4000) },
        // The coordinator takes at most 64 KiB of argv: the 64 KiB line cut to fit, and whole (refused).
        // (and the longest that can wait for a human: a pending request is at most 192 KiB as shown).
        { argv: ["echo", "hostile-long-line", longLine.slice(0, 60_000)], justification: cutBytes(longLine, 4000) },
        { argv: ["echo", longLine] },
      ];
      assert.ok(requests.length <= 8, `${requests.length} requests in one session (at most 8 wait at once)`);
      const n = requests.length - 1;
      const session = await env.escalateMany(repo, requests, "corpus");
      const shown = await wb.waitText(STATUS, `Lazaret: ${n} pending`, 20_000).then(() => true, () => false);
      assert.ok(shown, `${n} pending: ${await wb.statusText()} (${session.lines.rest()} ${session.stderr()})`);
      const refused = await waitUntil(10_000, () => session.lines.rest().includes(`status${n}=`) || undefined).then(() => session.lines.rest());
      assert.match(refused ?? "", new RegExp(`status${n}=99`), "the 64 KiB argv is refused (over the coordinator's limit)");
      const labels = [...groups.map((_, i) => `echo hostile-group-${i} `), "echo hostile-long-words ", "echo hostile-long-line "];
      // A tall window: every row of every request is rendered (lists render only what is visible).
      await wb.tall(async () => {
      await waitUntil(10_000, async () => (await Promise.all(labels.map((l) => wb.row(l.trim()).isVisible()))).every(Boolean));
      await checkInert("notifications, status bar and tree after the hostile requests", problems);
      await wb.screenshot("hostile-tree.png");
      for (const l of labels) {
        await stage(problems, `tooltip of ${l}`, async () => {
          await wb.hoverText(wb.row(l.trim()));
          await checkInert(`tooltip of ${l}`, problems);
        });
      }
      await stage(problems, "status bar tooltip", async () => {
        await wb.hoverText(wb.page.locator(STATUS, { hasText: "Lazaret" }).first());
        await checkInert("status bar tooltip", problems);
      });
      await wb.page.mouse.move(700, 5);
      // Every row of every request: expand them all and scroll through the view.
      for (const l of labels) {
        const row = wb.row(l.trim());
        if ((await row.getAttribute("aria-expanded")) === "false") await row.locator(".monaco-tl-twistie").click();
      }
      await wb.screenshot("hostile-tree-expanded.png");
      await checkInert("tree rows (every request expanded)", problems);
      for (const l of labels) {
        const row = wb.row(l.trim());
        if ((await row.getAttribute("aria-expanded").catch(() => "")) === "true") await row.locator(".monaco-tl-twistie").click().catch(() => undefined);
      }
      await stage(problems, "quick pick", async () => {
        await wb.palette("Lazaret: Approve Escalation");
        await wb.page.locator(".quick-input-widget .monaco-list-row", { hasText: "hostile-group-0" }).waitFor({ timeout: 5_000 });
        await checkInert("quick pick", problems);
        await wb.screenshot("hostile-quick-pick.png");
        await escapeQuickInput();
      });
      await armed();
      for (const l of labels) {
        // Issue 45: the approval's confirmation names the command (its program and start, inert); Escape answers nothing.
        await stage(problems, `approve modal of ${l}`, async () => {
          await rowAction(l.trim(), "Approve Escalation");
          await wb.dialog().waitFor({ timeout: 5_000 });
          await checkInert(`approve modal of ${l}`, problems);
          const { question, command } = await confirmation();
          if (question !== "Run this command on the host?" || !command.startsWith(l)) problems.push(`approve modal of ${l} does not name the command first: ${JSON.stringify([question, command.slice(0, 80)])}`);
          if (l.includes("group-0")) await wb.screenshot("hostile-approve-modal.png");
          await wb.page.keyboard.press("Escape");
          await wb.dialog().waitFor({ state: "hidden", timeout: 5_000 });
        });
        await stage(problems, `deny box of ${l}`, async () => {
          await rowAction(l.trim(), "Deny Escalation");
          await wb.page.locator(".quick-input-widget input").waitFor({ state: "visible" });
          await checkInert(`deny box of ${l}`, problems);
          await escapeQuickInput();
        });
        await stage(problems, `edit box and modal of ${l}`, async () => {
          await rowAction(l.trim(), "Edit and Run Escalation");
          const input = wb.page.locator(".quick-input-widget input");
          await input.waitFor({ state: "visible" });
          // The box is shown before its value is set: wait (bounded) for the value, then judge what is there.
          const filled = async () => {
            const value = await input.inputValue();
            return value.startsWith(l) ? value : undefined;
          };
          const value = (await waitUntil(5_000, filled)) ?? (await input.inputValue());
          await checkInert(`edit box of ${l}`, problems);
          if (!value.startsWith(l)) problems.push(`edit box of ${l} does not start with the command: ${JSON.stringify(value.slice(0, 80))}`);
          await input.press("Enter");
          const modal = await wb.dialog().waitFor({ timeout: 5_000 }).then(() => true, () => false);
          if (!modal) problems.push(`edit of ${l}: no confirmation modal (the edit box did not read its own text back)`);
          await checkInert(`edit modal of ${l}`, problems);
          if (l.includes("group-0")) await wb.screenshot("hostile-edit-modal.png");
          await wb.page.keyboard.press("Escape");
          await sleep(200);
        });
        await stage(problems, `full request of ${l}`, async () => {
          await rowAction(l.trim(), "Show Full Request");
          await wb.page.locator(".tab.active", { hasText: "request-" }).waitFor({ timeout: 10_000 });
          await waitUntil(5_000, async () => (await editorText()).includes("Command ("));
          const doc = await editorText();
          const raw = [...doc].filter((c) => UNSAFE.test(c));
          if (raw.length) problems.push(`full request of ${l} shows raw ${raw.map((c) => c.codePointAt(0).toString(16))}`);
          await checkInert(`full request tab of ${l}`, problems);
          await wb.page.keyboard.press("Control+W");
        });
      }
      }, 2400);
      if (pendingIds().length !== n) problems.push(`${pendingIds().length} of ${n} still pending after looking at them`);
      // Still usable: a normal request shows, is answered from the tree; the hostile ones stay listed.
      await stage(problems, "a normal request after the hostile ones", async () => {
        const normal = await env.escalate(repo, ["touch", "usable-marker"]);
        await wb.waitText(STATUS, `Lazaret: ${n + 1} pending`, 10_000);
        await armed();
        await approveInTree("touch usable-marker");
        const out = await Promise.race([normal.session.done, sleep(10_000).then(() => ({ stdout: "(still waiting after 10 s)" }))]);
        if (!/status=0/.test(out.stdout) || !fs.existsSync(path.join(repo, "usable-marker"))) problems.push(`the normal request did not run: ${out.stdout}`);
        await wb.waitText(STATUS, `Lazaret: ${n} pending`, 10_000);
      });
      const tree = await wb.treeText();
      for (const l of labels) if (!tree.includes(l.trim())) problems.push(`${l} is no longer listed`);
      if (fs.existsSync(marker)) problems.push(`the marker exists: ${fs.readFileSync(marker, "utf8")}`);
      for (const id of pendingIds()) env.lazaret(["deny", id.slice(0, 8)]);
      const out = await session.done;
      for (let i = 0; i < n; i++) if (!new RegExp(`status${i}=97`).test(out.stdout)) problems.push(`request ${i} was not denied: ${out.stdout}`);
      assert.deepEqual(seenProblems(problems), []);
      assert.ok(!fs.existsSync(marker), "nothing the agent wrote ran");
    });

    test("every entry as a file name, committed on the agent branch and uncommitted in the sandbox: inert in the tree, the review's titles and file headers", async () => {
      const problems = [];
      const names = entries.map((e, i) => `${String(i).padStart(2, "0")}-${cutBytes(e.text.replace(/\//g, "_"), 196)}`);
      env.writeIn(repo, "/tmp/lzv-files/names", Buffer.from(names.join("\0") + "\0"));
      env.writeIn(
        repo,
        "/tmp/lzv-files/make.sh",
        Buffer.from("cd /workspace && mkdir -p hostile wip && while IFS= read -r -d '' n; do printf 'x\\n' > \"hostile/$n\"; printf 'y\\n' > \"wip/$n\"; done < /tmp/lzv-files/names && git add hostile && git commit -qm 'hostile file names'\n"),
      );
      const before = env.git(repo, "rev-parse", "lazaret/agent-default").trim();
      const r = env.execIn(repo, "bash /tmp/lzv-files/make.sh");
      assert.equal(r.status, 0, JSON.stringify(r));
      assert.ok(await waitUntil(15_000, () => env.git(repo, "rev-parse", "lazaret/agent-default").trim() !== before, 100), "the commit reached the host");
      await waitUntil(10_000, async () => /34 file\(s\)/.test(await wb.treeText()));
      const branch = wb.row("Agent branch lazaret/agent-default");
      if ((await branch.getAttribute("aria-expanded")) === "false") await branch.locator(".monaco-tl-twistie").click();
      const inTree = new Set();
      await wb.tall(async () => {
        const surfaces = await wb.surfaces();
        problems.push(...inertProblems(surfaces, "tree rows of the agent branch"));
        for (const t of surfaces.texts.tree) for (const m of t.matchAll(/(hostile|wip)\/(\d\d)-/g)) inTree.add(`${m[1]}/${m[2]}`);
        await wb.screenshot("hostile-files-tree.png");
      });
      if (inTree.size < 2 * entries.length) problems.push(`the tree listed ${inTree.size} of ${2 * entries.length} hostile files`);
      if ((await branch.getAttribute("aria-expanded")) === "true") await branch.locator(".monaco-tl-twistie").click();
      await wb.palette("View: Close All Editors");
      await wb.palette("Lazaret: Open Agent Branch Diff");
      const modal = await wb.dialog().waitFor({ timeout: 5_000 }).then(() => true, () => false);
      if (modal) {
        await checkInert("the review's warning modal", problems);
        await wb.dialog().locator(".monaco-button", { hasText: "Open Review" }).click();
      }
      const head = env.git(repo, "rev-parse", "lazaret/agent-default").trim();
      await wb.page.locator(".tab.active", { hasText: head.slice(0, 8) }).waitFor({ timeout: 15_000 });
      for (const [title, dir] of [["Agent branch", "hostile"], ["Uncommitted in the sandbox", "wip"]]) await stage(problems, `review "${title}"`, async () => {
        await wb.page.locator(".tab", { hasText: title }).filter({ hasText: head.slice(0, 8) }).first().click({ timeout: 10_000 });
        const seen = new Set();
        // Every file's header at once: collapsed, in a tall window (lists render only what is visible).
        await wb.tall(async () => {
          await waitUntil(30_000, async () => (await wb.surfaces()).texts.reviewHeaders.length > 0, 300);
          await wb.page.locator('.editor-actions .action-label[aria-label^="Collapse All"]').first().click({ timeout: 3_000 }).catch(() => undefined);
          await waitUntil(30_000, async () => {
            for (const t of (await wb.surfaces()).texts.reviewHeaders) {
              const m = t.match(/^(\d\d)-/);
              if (m) seen.add(m[1]);
            }
            return seen.size >= entries.length;
          }, 500);
          problems.push(...inertProblems(await wb.surfaces(), `review "${title}"`));
          if (dir === "hostile") await wb.screenshot("hostile-review.png");
        }, 4000);
        if (seen.size < entries.length) problems.push(`the review "${title}" showed ${seen.size} of ${entries.length} ${dir} file headers`);
      });
      if (fs.existsSync(marker)) problems.push("the marker exists");
      assert.deepEqual(seenProblems(problems), []);
    });
  });

  test("Show Audit Trail opens the domain's records with the vscode answers and the chain's verification", async () => {
    await wb.palette("Lazaret: Show Audit Trail");
    const tab = wb.page.locator(".tab.active", { hasText: "audit.log" });
    await tab.waitFor({ timeout: 10_000 });
    const editor = wb.page.locator(".editor-instance .monaco-editor .view-lines").filter({ visible: true }).first();
    const text = async () => ((await editor.textContent().catch(() => "")) ?? "").replace(/\u00a0/g, " ");
    await waitUntil(10_000, async () => (await text()).includes("Hash chain: intact"));
    const t = await text();
    assert.ok(t.includes("Hash chain: intact"), t.slice(0, 400));
    assert.match(t, /approved\s+by rpc:vscode: touch approved-marker/, t.slice(0, 1500));
    assert.match(t, /denied\s+by rpc:vscode: touch denied-marker.*reason: not today/, t.slice(0, 1500));
    // The hostile corpus's records (the last ones): escaped, one line each.
    await wb.page.locator(".editor-instance .monaco-editor").filter({ visible: true }).first().click();
    await wb.page.keyboard.press("Control+End");
    await sleep(500);
    const tail = await editorText();
    assert.ok(tail.includes("hostile-"), tail.slice(-1500));
    assert.deepEqual([...tail].filter((c) => UNSAFE.test(c)).map((c) => c.codePointAt(0).toString(16)), [], "raw unsafe characters in the audit document");
    assert.deepEqual(inertProblems(await wb.surfaces(), "audit document"), []);
  });

  test("Allow Network Destination sends network/allow to the coordinator (this domain has no sidecar: its refusal is shown)", async () => {
    await wb.palette("Lazaret: Allow Network Destination");
    const input = wb.page.locator(".quick-input-widget input");
    await input.waitFor({ state: "visible" });
    await input.fill("10.99.0.0/16");
    await input.press("Enter");
    const toast = wb.page.locator(".notification-toast", { hasText: "network/allow failed" });
    await toast.waitFor({ timeout: 10_000 });
    assert.match(await toast.textContent(), /Network Sidecar/);
  });

  test("Start Agent Session opens a terminal running `lazaret run` for the folder; its session shows in the tree", async () => {
    // Toasts (one per request of the tests before) must not cover the terminal.
    await wb.palette("Notifications: Clear All Notifications");
    await wb.palette("Lazaret: Start Agent Session");
    await waitUntil(30_000, async () => (await wb.treeText()).includes("2 session(s)"), 200);
    const text = await wb.treeText();
    assert.match(text, /2 session\(s\)/, text);
    // The session's shell runs in the sandbox: leave it from the terminal.
    try {
      await wb.page.locator(".terminal-wrapper.active .xterm, .terminal .xterm").first().click();
      await wb.page.keyboard.type("exit\n");
      await waitUntil(30_000, async () => (await wb.treeText()).includes("1 session(s)"), 200);
      assert.match(await wb.treeText(), /1 session\(s\)/, "the terminal's session ended");
    } finally {
      // Whatever happened, the terminal's session must not keep the domain up for the next tests.
      if (!(await wb.treeText()).includes("1 session(s)")) await wb.palette("Terminal: Kill the Active Terminal Instance").catch(() => undefined);
    }
  });

  test("the folder's domain is found with `editor-info --workspace` [needs protocol v1 additions]", () => {
    const r = env.lazaret(["editor-info", "--json", "--workspace", repo], { check: false });
    assert.equal(r.status, 0, `editor-info --workspace is not supported by ${env.binary}: ${r.stderr.split("\n")[0]}`);
    const info = JSON.parse(r.stdout);
    assert.equal(info.folders[0].workspace, repo);
    assert.equal(info.folders[0].running, true);
    assert.equal(info.apiVersion, EXTENSION_API, `${env.binary} speaks another API version than the extension`);
    // The fake coordinator of another API version (deadbeef0004, its own test) is logged as one; nothing else.
    const versionProblems = wb.extensionLog().split("\n").filter((line) => /speaks (API|no API)/.test(line) && !line.includes("deadbeef0004"));
    assert.deepEqual(versionProblems, [], "no version problem was logged for the real domain");
  });

  test("a restarted coordinator is reconnected: its requests show again", async () => {
    process.kill(-keeper.child.pid, "SIGTERM");
    await keeper.done;
    await waitUntil(30_000, async () => (await wb.treeText()).includes("Not running"), 200);
    assert.match(await wb.treeText(), /Not running/);
    keeper = await env.startDomain(repo);
    const { session } = await requestAndSee(["touch", "after-restart"]);
    await approveInTree("touch after-restart");
    // Seen once (CI-like run, not reproduced): the click answered nothing and
    // the request timed out 120 s later. Say what the window showed then.
    const answered = await wb.waitText(STATUS, "Lazaret: 0 pending", 20_000).then(() => true, () => false);
    if (!answered) {
      await wb.screenshot("restart-approve-unanswered.png");
      assert.fail(`the Approve click answered nothing: status bar ${await wb.statusText()}; tree:\n${await wb.treeText()}\nextension log:\n${wb.extensionLog().split("\n").slice(-30).join("\n")}`);
    }
    assert.match((await session.done).stdout, /status=0/);
  });

  // Last: these add a profile to the configuration (Start Agent Session would ask which one) and start a second domain.
  test("issue 29 items 3-4: a DNS name on no allow entry is a network request in the tree and the status bar; Allow for 15 minutes makes a grant in Rules and grants; Revoke removes it", async () => {
    // Its one question is refused when its hold (1 s) ends, and the grant
    // comes after that, with nothing in the sandbox asking again (an allowed
    // name's next question would go upstream).
    const problems = [];
    const dest = `grant-${process.pid}.test`;
    // One question (A only) for a name nobody allows, then nothing but sleep.
    await withAskDomain(`busybox nslookup -type=A ${dest} >/dev/null 2>&1; echo asked=$?; sleep 900`, async ({ session }) => {
      const asked = await waitUntil(180_000, () => /asked=\d+/.test(session.stdout()) || session.child.exitCode !== null, 200);
      assert.ok(asked && /asked=\d+/.test(session.stdout()), `the sandbox's question: ${session.stdout()} ${session.stderr()}`);
      // The question was refused at the end of its hold (nslookup is done); the request waits for a human.
      await wb.waitText(STATUS, "Lazaret: 1 pending", 20_000).catch(async () => problems.push(`status bar: ${await wb.statusText()}`));
      await collapseDefaultDomain();
      await waitUntil(10_000, async () => (await wb.treeText()).includes(dest));
      const tree = await wb.treeText();
      for (const expected of ["Pending network requests (1)", dest, "network · A", "Rules and grants"]) if (!tree.includes(expected)) problems.push(`${expected} not in the tree:\n${tree}`);
      const badge = await wb.page.locator(".activitybar .badge-content").allTextContents();
      if (!badge.includes("1")) problems.push(`badge on the view container: ${badge}`);
      await checkInert("tree and status bar with a network request", problems);
      await wb.screenshot("tree-network-request.png");
      await sleep(1500);
      if (!/asked=\d+\n$/.test(session.stdout())) problems.push(`the sandbox printed more than its one question: ${session.stdout()}`);
      await allowFor15Minutes(dest, problems);
      const granted = `allow ${dest}`;
      await waitUntil(5_000, async () => (await wb.treeText()).includes("1 network"));
      await showGrant(granted);
      const after = await wb.treeText();
      if (after.includes("Pending network requests")) problems.push(`the request is still listed:\n${after}`);
      if (!after.includes(granted)) problems.push(`no grant in Rules and grants:\n${after}`);
      else if (!/1[45]m \d+s left · 0 hits · by rpc:vscode/.test(after)) problems.push(`the grant's row: ${after.split("\n").find((l) => l.includes(granted))}`);
      const listed = env.lazaret(["rules", "--json"]).stdout;
      if (!listed.includes(dest)) problems.push(`lazaret rules does not list the grant: ${listed}`);
      await wb.screenshot("tree-rules.png");
      // Revoke it from the tree: a modal names it first.
      await revokeFromTree(granted, problems, (dialog) => dialog.includes(`"allow ${dest}"`) && /15 minutes/.test(dialog));
      if (env.lazaret(["rules", "--json"]).stdout.includes(dest)) problems.push("lazaret rules still lists the grant");
      if (!/asked=\d+\n$/.test(session.stdout())) problems.push(`the sandbox printed more than its one question: ${session.stdout()}`);
    });
    assert.deepEqual(problems, []);
  });

  test("issue 29 items 1 and 4: a direct connection to an unlisted address is a network request (its protocol and port shown, issue 45); Ctrl+Alt+A on its selected row allows that protocol and port for 15 minutes, a flow goes through; Revoke cuts the flow", async () => {
    const problems = [];
    await withAskDomain("exec sleep 900", async ({ prefix, container }) => {
      const address = `${prefix}.13`;
      const dest = `${address}/32`;
      const put = spawnSync("podman", ["exec", "-i", container, "sh", "-c", "cat > /tmp/lazaret-testhost && chmod 755 /tmp/lazaret-testhost"], { input: fs.readFileSync(TESTHOST), timeout: 60_000 });
      assert.equal(put.status, 0, `the test host binary into the sandbox: ${put.stderr}`);
      const probe = (seconds) => ["exec", container, "/tmp/lazaret-testhost", "echo-probe", address, "8081", String(seconds)];
      const started = Date.now();
      const refused = spawnSync("podman", probe(1), { encoding: "utf8", timeout: 60_000 });
      if (!/Connection refused/.test(refused.stdout + refused.stderr)) problems.push(`not refused at once: ${refused.stdout} ${refused.stderr}`);
      const seen = await wb.waitText(STATUS, "Lazaret: 1 pending", 20_000).catch(async () => problems.push(`status bar: ${await wb.statusText()}`));
      if (typeof seen === "number") measurements.directConnectionToStatusBarMs = seen - started;
      await collapseDefaultDomain();
      await waitUntil(10_000, async () => (await wb.treeText()).includes(dest));
      const tree = await wb.treeText();
      for (const expected of ["Pending network requests (1)", `${dest} tcp/8081`, "network · tcp/8081"]) if (!tree.includes(expected)) problems.push(`${expected} not in the tree:\n${tree}`);
      await wb.screenshot("tree-direct-request.png");
      // Issue 45: the pick names the one protocol and port an allow opens, and offers every port as its own, wider item.
      await allowFor15Minutes(dest, problems, { keyboard: true, shot: "direct-scope-pick.png", opens: `${dest} tcp/8081`, wider: true });
      const grants = listedGrants().filter((g) => g.destination === dest);
      if (grants.length !== 1 || grants[0].service !== "tcp/8081" || grants[0].everyPort) problems.push(`lazaret rules: not one grant of tcp/8081 only: ${JSON.stringify(grants)}`);
      // Another port of the address is not open: a request of its own.
      const other = spawnSync("podman", ["exec", container, "/tmp/lazaret-testhost", "echo-probe", address, "8082", "1"], { encoding: "utf8", timeout: 60_000 });
      if (!/Connection refused/.test(other.stdout + other.stderr)) problems.push(`tcp/8082 is not refused under a grant of tcp/8081: ${other.stdout} ${other.stderr}`);
      const asked = await waitUntil(10_000, async () => (await wb.treeText()).includes(`${dest} tcp/8082`));
      if (!asked) problems.push(`no request for ${dest} tcp/8082 in the tree:\n${await wb.treeText()}`);
      for (const p of env.pending()) env.lazaret(["deny", p.requestId.slice(0, 8)], { check: false });
      await wb.waitText(STATUS, "Lazaret: 0 pending", 10_000).catch(async () => problems.push(`status bar after denying tcp/8082: ${await wb.statusText()}`));
      // A flow through the grant: the probe's byte comes back every 200 ms.
      const flow = spawn("podman", probe(120), { stdio: ["ignore", "pipe", "pipe"] });
      let out = "";
      flow.stdout.on("data", (d) => (out += d));
      const closed = new Promise((resolve) => flow.on("close", resolve));
      try {
        await waitUntil(30_000, () => out.includes("connected\n"), 50);
        if (!out.startsWith("connected\n")) problems.push(`the grant does not let the connection through: ${out}`);
        const granted = `allow ${dest} tcp/8081`;
        await showGrant(granted);
        await sleep(1000);
        if (flow.exitCode !== null) problems.push(`the flow ended before the revoke: ${out}`);
        const revoked = await revokeFromTree(granted, problems, (dialog) => dialog.includes(`"allow ${dest} tcp/8081"`), "direct-revoke-confirm.png");
        const cut = await waitUntil(30_000, () => out.includes("cut after_ms="), 50);
        if (cut) measurements.revokeToFlowCutMs = Date.now() - revoked;
        else problems.push(`revoking from VS Code does not cut the flow: ${out}`);
      } finally {
        if (flow.exitCode === null) flow.kill("SIGKILL");
        await closed;
      }
      const again = spawnSync("podman", probe(1), { encoding: "utf8", timeout: 60_000 });
      if (!/Connection refused/.test(again.stdout + again.stderr)) problems.push(`a new connection is not refused after the revoke: ${again.stdout} ${again.stderr}`);
    }, { echoHost: true });
    assert.deepEqual(problems, []);
  });

  test("issue 45 (D19): every protocol and port of an address is its own item of the Allow pick, named \"every protocol and port of ADDRESS (wider than asked)\"; its scope is asked next; the grant shows \"every port\" and opens more than the port asked", async () => {
    const problems = [];
    // Its pick is the README's picture: nothing open behind it.
    await wb.palette("View: Close All Editors");
    await withAskDomain("exec sleep 900", async ({ prefix, container }) => {
      const address = `${prefix}.13`;
      const dest = `${address}/32`;
      const put = spawnSync("podman", ["exec", "-i", container, "sh", "-c", "cat > /tmp/lazaret-testhost && chmod 755 /tmp/lazaret-testhost"], { input: fs.readFileSync(TESTHOST), timeout: 60_000 });
      assert.equal(put.status, 0, `the test host binary into the sandbox: ${put.stderr}`);
      const probe = (port) => spawnSync("podman", ["exec", container, "/tmp/lazaret-testhost", "echo-probe", address, String(port), "1"], { encoding: "utf8", timeout: 60_000 });
      const refused = probe(8081);
      if (!/Connection refused/.test(refused.stdout + refused.stderr)) problems.push(`not refused at once: ${refused.stdout} ${refused.stderr}`);
      await wb.waitText(STATUS, "Lazaret: 1 pending", 20_000).catch(async () => problems.push(`status bar: ${await wb.statusText()}`));
      await collapseDefaultDomain();
      await waitUntil(10_000, async () => (await wb.treeText()).includes(`${dest} tcp/8081`));
      const input = await openAllowPick(dest, problems, { opens: `${dest} tcp/8081`, wider: true });
      const item = wb.page.locator(".quick-input-widget .monaco-list-row", { hasText: widerItem(dest) });
      const detail = (await item.innerText()) ?? "";
      if (!detail.includes("not only the one the request shows")) problems.push(`the wider item does not say it is wider: ${detail}`);
      await sleep(500);
      await wb.screenshot("every-port-pick.png");
      await input.fill("every protocol and port");
      await sleep(300);
      await input.press("Enter");
      // The second step: the scope of the wider answer, named in its title and items.
      const title = wb.page.locator(".quick-input-widget .quick-input-title");
      const titled = await waitUntil(5_000, async () => ((await title.textContent().catch(() => "")) ?? "").includes(`Lazaret: allow ${widerItem(dest)}`));
      if (!titled) problems.push(`the scope pick of the wider answer is titled ${await title.textContent().catch(() => "(none)")}`);
      const pick = (await wb.page.locator(".quick-input-widget").innerText()) ?? "";
      if (!pick.includes(`opens every protocol and port of ${dest} · `)) problems.push(`its items do not say they open every port: ${pick}`);
      if (env.pending().length !== 1) problems.push("answered before its scope was picked");
      await sleep(500);
      await wb.screenshot("every-port-scope-pick.png");
      await input.fill("For 15 minutes");
      await sleep(300);
      await input.press("Enter");
      await wb.waitText(STATUS, "Lazaret: 0 pending", 10_000).catch(async () => problems.push(`status bar after Allow: ${await wb.statusText()}`));
      const grants = listedGrants().filter((g) => g.destination === dest);
      if (grants.length !== 1 || !grants[0].everyPort || grants[0].service) problems.push(`lazaret rules: not one every-port grant: ${JSON.stringify(grants)}`);
      const granted = `allow ${dest} every port`;
      await showGrant(granted);
      const tree = await wb.treeText();
      if (!tree.includes(granted)) problems.push(`no "${granted}" in Rules and grants:\n${tree}`);
      await stage(problems, "the grant's tooltip", async () => {
        const tip = await wb.hoverText(wb.row(granted));
        if (!tip.includes("covers: every protocol and port of the address")) problems.push(`the grant's tooltip: ${tip}`);
      });
      await wb.page.mouse.move(700, 5);
      await wb.screenshot("tree-grant-every-port.png");
      // It opens more than the port asked: the echo host's port, and another port asks nothing (the host refuses it itself).
      const through = probe(8081);
      if (!through.stdout.startsWith("connected\n")) problems.push(`tcp/8081 is not open: ${through.stdout} ${through.stderr}`);
      probe(8082);
      await sleep(2000);
      if (env.pending().length) problems.push(`another port of an every-port grant was asked about: ${JSON.stringify(env.pending())}`);
      await revokeFromTree(granted, problems, (dialog) => dialog.includes(`"allow ${dest} every port"`), "every-port-revoke-confirm.png");
    }, { echoHost: true });
    assert.deepEqual(problems, []);
  });

  test("issue 45 (D19), the hostile corpus's network entries: the sandbox asks for each name; each surface that shows the request shows its end (tail), visible and inert (tree row and tooltip, status bar tooltip, request pick, scope pick), and so do the grant's row, tooltip and Revoke confirmation; the notification names nothing and goes away once answered", async () => {
    const problems = [];
    const network = CORPUS.entries.filter((e) => e.network);
    assert.ok(network.length >= 1 && network.every((e) => e.tail && !e.repeat), `network entries with a tail: ${network.map((e) => e.name)}`);
    for (const { name: entry, text: name, tail } of network) {
      await withAskDomain(`busybox nslookup -type=A ${name} >/dev/null 2>&1; echo asked=$?; sleep 900`, async ({ session }) => {
        const asked = await waitUntil(180_000, () => /asked=\d+/.test(session.stdout()) || session.child.exitCode !== null, 200);
        assert.ok(asked && /asked=\d+/.test(session.stdout()), `${entry}: the sandbox's question: ${session.stdout()} ${session.stderr()}`);
        await wb.waitText(STATUS, "Lazaret: 1 pending", 20_000).catch(async () => problems.push(`${entry}: status bar: ${await wb.statusText()}`));
        await collapseDefaultDomain();
        await waitUntil(10_000, async () => (await wb.treeText()).includes(tail));
        const seen = async (where, locator) => {
          const v = await wb.textVisible(locator, tail);
          if (!v.visible) problems.push(`${entry}: ${where}: ${tail} is not visible: ${v.why}`);
        };
        const hover = () => wb.page.locator(".monaco-hover, .workbench-hover").filter({ visible: true });
        const notified = "asks for a network destination";
        await stage(problems, `${entry}: notification`, async () => {
          const toast = wb.page.locator(".notification-toast", { hasText: notified }).first();
          await toast.waitFor({ timeout: 5_000 });
          const text = (await toast.textContent()) ?? "";
          if (text.includes(tail) || text.includes("anthropic")) problems.push(`${entry}: the notification names the destination: ${text}`);
        });
        await stage(problems, `${entry}: tree row`, async () => {
          await seen("tree row", wb.row(tail));
          await checkInert(`${entry}: tree`, problems);
          await wb.screenshot("long-name-tree.png");
        });
        await stage(problems, `${entry}: tree tooltip`, async () => {
          await wb.hoverText(wb.row(tail));
          await seen("tree tooltip", hover());
          await checkInert(`${entry}: tree tooltip`, problems);
          await wb.screenshot("long-name-tooltip.png");
        });
        await stage(problems, `${entry}: status bar tooltip`, async () => {
          await wb.hoverText(wb.page.locator(STATUS, { hasText: "Lazaret" }).first());
          await seen("status bar tooltip", hover());
          await checkInert(`${entry}: status bar tooltip`, problems);
          await wb.screenshot("long-name-status-tooltip.png");
        });
        await wb.page.mouse.move(700, 5);
        await stage(problems, `${entry}: request pick`, async () => {
          await wb.palette("Lazaret: Allow Network Request");
          const row = wb.page.locator(".quick-input-widget .monaco-list-row", { hasText: tail });
          await row.waitFor({ timeout: 5_000 });
          await seen("request pick", row);
          await checkInert(`${entry}: request pick`, problems);
          await wb.screenshot("long-name-request-pick.png");
          await escapeQuickInput();
        });
        await armed();
        await stage(problems, `${entry}: scope pick`, async () => {
          await rowAction(tail, "Allow Network Request");
          const input = wb.page.locator(".quick-input-widget input");
          await input.waitFor({ state: "visible" });
          const first = wb.page.locator(".quick-input-widget .monaco-list-row", { hasText: "This session" });
          await first.waitFor({ timeout: 5_000 });
          await seen("scope pick title", wb.page.locator(".quick-input-widget .quick-input-title"));
          await seen("scope pick item", first);
          await checkInert(`${entry}: scope pick`, problems);
          await sleep(500);
          await wb.screenshot("long-name-scope-pick.png");
          await input.fill("For 15 minutes");
          await sleep(300);
          await input.press("Enter");
          await wb.waitText(STATUS, "Lazaret: 0 pending", 10_000);
        });
        const gone = await wb.waitGone(".notification-toast", notified, 10_000).then(() => true, () => false);
        if (!gone) problems.push(`${entry}: the notification is still up after the answer`);
        await stage(problems, `${entry}: grant row, tooltip and revoke confirmation`, async () => {
          await unfoldUntil(wb.row("Rules and grants"), `allow api.`);
          const grant = wb.pane().locator(".monaco-list-row", { hasText: "allow api." }).filter({ hasText: tail }).first();
          await grant.waitFor({ timeout: 10_000 });
          await seen("grant row", grant);
          await wb.screenshot("long-name-grant.png");
          await wb.hoverText(grant);
          await seen("grant tooltip", hover());
          await checkInert(`${entry}: grant and its tooltip`, problems);
          await wb.page.mouse.move(700, 5);
          await rowAction(tail, "Revoke Rule or Grant");
          await wb.dialog().waitFor({ timeout: 5_000 });
          await seen("revoke confirmation", wb.dialog().locator(".dialog-message-text"));
          await checkInert(`${entry}: revoke confirmation`, problems);
          await wb.screenshot("long-name-revoke-confirm.png");
          await wb.dialog().locator(".monaco-button", { hasText: "Revoke" }).click();
          await waitUntil(10_000, async () => !(await wb.treeText()).includes(tail));
        });
        if (listedGrants().some((g) => g.destination === name)) problems.push(`${entry}: lazaret rules still lists the grant`);
      });
    }
    assert.deepEqual(problems, []);
  });

  test("issue 30: a profile's API key endpoint is a \"key for ORIGIN\" row under Network with its counts; the key itself is on no surface", async () => {
    const problems = [];
    const origin = "api.keys.test";
    const key = `lzv-editor-key-${process.pid}-${Date.now().toString(16)}`;
    const tls = path.join(env.root, "tls");
    const made = spawnSync(TESTHOST, ["test-certs", tls, origin], { encoding: "utf8" });
    assert.equal(made.status, 0, `test-certs: ${made.stderr}`);
    const domain = {
      profile: "keys",
      // The origin and the domain's only DNS server, both the test's own.
      hosts: (prefix) => [
        { host: 53, args: ["dns", "53", `${origin}=${prefix}.21`] },
        { host: 21, args: ["https-api", "443", `/tls/${origin}.pem`, `/tls/${origin}.key`, "x-api-key", key], volumes: [`${tls}:/tls:ro`] },
      ],
      config: (network, prefix) =>
        `[network]\npodman_network = "${network}"\ndns_upstream = ["${prefix}.53"]\nprivate_answers = "allow"\nca_bundle = "${tls}/ca.pem"\nallow_egress = ["${origin}"]\n\n` +
        `[profiles.keys]\nimage = "localhost/lazaret-default:1"\nenv = { LZT_API_KEY = "lazaret-injected" }\n` +
        `credentials = [{ origin = "https://${origin}", header = "x-api-key", value = "env:LZT_API_KEY", base_url_env = "API_BASE" }]\n`,
      shell: { LZT_API_KEY: key },
    };
    // One request through the endpoint, with a key of the sandbox's own (the sidecar replaces it).
    const script = `answer=$(busybox wget -q -O - --header 'x-api-key: agent-own' "$API_BASE/v1/messages"); echo "fetched=$? key=$LZT_API_KEY $answer"; exec sleep 900`;
    await withNetworkDomain(domain, script, async ({ session, network }) => {
      await waitUntil(60_000, () => /fetched=/.test(session.stdout()), 100);
      const fetched = session.stdout().split("\n").find((l) => l.startsWith("fetched="));
      if (!fetched?.startsWith("fetched=0 key=lazaret-injected ") || !fetched.includes("LAZARET-OK")) problems.push(`the request through the endpoint: ${session.stdout()} ${session.stderr()}`);
      const log = spawnSync("podman", ["logs", `${network}-host21`], { encoding: "utf8" }).stdout.split("\n").filter((l) => l.startsWith("request "));
      if (log.join("\n") !== `request conn=1 GET /v1/messages host=${origin} key=ok copies=1 body=0`) problems.push(`the origin saw: ${log.join("\n")}`);
      await collapseDefaultDomain();
      await stage(problems, "the key row under Network", async () => {
        const row = wb.row("project (keys)");
        await row.waitFor({ timeout: 20_000 });
        if ((await row.getAttribute("aria-expanded")) === "false") await row.locator(".monaco-tl-twistie").click();
        // The counts are read when the tree is refreshed: the view's Refresh.
        await wb.palette("Lazaret: Refresh");
        const net = wb.pane().locator(".monaco-list-row", { hasText: /^Network/ }).first();
        await net.waitFor({ timeout: 10_000 });
        if (!/keys 1/.test(await net.textContent())) problems.push(`the Network row: ${await net.textContent()}`);
        const shown = await unfoldUntil(net, "1 request · 0 refused");
        const tree = await wb.treeText();
        if (!shown) problems.push(`no counts on the key row:\n${tree}`);
        const line = tree.split("\n").find((l) => l.includes(`key for https://${origin}`)) ?? "";
        if (!line.endsWith(`key for https://${origin}127.0.0.1:17400 · 1 request · 0 refused`)) problems.push(`the key row: ${JSON.stringify(line)}\n${tree}`);
        const hover = await wb.hoverText(wb.row(`key for https://${origin}`));
        const expected = [
          `to http://127.0.0.1:17400; the Network Sidecar adds the x-api-key header and forwards them to https://${origin} only. The key stays in the sidecar.`,
          "Answered: 1 (1xx 0 · 2xx 1 · 3xx 0 · 4xx 0 · 5xx 0)",
          "Refused keys (401/403): 0",
          "Failed in the sidecar: 0",
        ];
        for (const part of expected) if (!hover.includes(part)) problems.push(`the key row's tooltip lacks ${JSON.stringify(part)}: ${hover}`);
        await wb.screenshot("tree-credential-tooltip.png");
        await checkInert("tree with a key row", problems);
        await wb.screenshot("tree-credential.png");
      });
      // Nowhere on the page: tree, tooltips, status bar, notifications.
      const page = await wb.page.evaluate(() => document.body.innerText + document.body.outerHTML);
      if (page.includes(key)) problems.push("the key reached the page");
    });
    assert.deepEqual(problems, []);
  });

  if (BENCH) {
    test("bench: a DNS question on no allow entry to the status bar, median of 10", async () => {
      // Ten questions, each held 1 s then refused (nothing is forwarded);
      // each timed from the sandbox's clock just before it is asked.
      const names = Array.from({ length: 10 }, (_, i) => `bench-${i}-${process.pid}.test`);
      const script = names.map((name) => `echo t=$(( $(date +%s%N) / 1000000 )); busybox nslookup -type=A ${name} >/dev/null 2>&1`).join("; ") + "; exec sleep 900";
      const samples = [];
      await withAskDomain(script, async ({ session }) => {
        for (let i = 0; i < names.length; i++) {
          const stamped = await waitUntil(30_000, () => (session.stdout().match(/t=(\d+)/g) ?? []).length > i, 5);
          assert.ok(stamped, `question ${i} was asked: ${session.stdout()}`);
          const t0 = Number(session.stdout().match(/t=(\d+)/g)[i].slice(2));
          const seen = await wb.waitText(STATUS, `Lazaret: ${i + 1} pending`, 30_000);
          samples.push(seen - t0);
        }
        for (const p of env.pending()) env.lazaret(["deny", p.requestId.slice(0, 8)], { check: false });
      });
      const sorted = [...samples].sort((a, b) => a - b);
      measurements.benchNetworkSamplesMs = samples;
      measurements.benchNetworkMedianMs = (sorted[4] + sorted[5]) / 2;
      console.log(`# bench: network question -> status bar: median ${measurements.benchNetworkMedianMs} ms of ${samples.join(", ")}`);
      assert.equal(samples.length, 10);
    });

    test("bench: sandbox request to status bar, median of 10", async () => {
      const samples = [];
      for (let i = 0; i < 10; i++) {
        const { session, latency } = await requestAndSee(["touch", `bench-${i}`]);
        samples.push(latency);
        const id = env.pending()[0];
        env.lazaret(["deny", (id.requestId ?? id.request_id).slice(0, 8)]);
        await session.done;
        await wb.waitText(STATUS, "Lazaret: 0 pending", 5_000);
      }
      samples.sort((a, b) => a - b);
      measurements.benchSamplesMs = samples;
      measurements.benchMedianMs = (samples[4] + samples[5]) / 2;
      console.log(`# bench: request -> status bar: median ${measurements.benchMedianMs} ms of ${samples.join(", ")}`);
      assert.equal(samples.length, 10);
    });
  }
});
