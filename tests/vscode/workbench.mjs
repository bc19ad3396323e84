// Real VS Code for the tests: code-server (from the cache dir that
// scripts/install-vscode-test-deps fills) with the built .vsix installed,
// bound to 127.0.0.1, in Debian's headless Chromium driven by playwright-core.
import { spawn, spawnSync } from "node:child_process";
import * as fs from "node:fs";
import { createRequire } from "node:module";
import * as path from "node:path";
import { sleep, waitUntil } from "./lzenv.mjs";

export const CI_DIR = process.env.LAZARET_VSCODE_CI || "/opt/lazaret-ci/code-server";
const require = createRequire(path.join(CI_DIR, "package.json"));
const { chromium } = require("playwright-core");
const NODE = path.join(CI_DIR, "bin/node");
const ENTRY = path.join(CI_DIR, "node_modules/code-server/out/node/entry.js");

export class Workbench {
  constructor(env, folder, vsix, artifacts) {
    this.env = env;
    this.folder = folder;
    this.vsix = vsix;
    this.artifacts = artifacts;
    this.dir = fs.mkdtempSync("/tmp/lzvcs");
    this.extensions = path.join(this.dir, "extensions");
    this.userData = path.join(this.dir, "user-data");
    fs.mkdirSync(path.join(this.userData, "User"), { recursive: true });
    fs.writeFileSync(
      path.join(this.userData, "User/settings.json"),
      JSON.stringify({
        "lazaret.path": env.binary,
        "workbench.startupEditor": "none",
        "chat.disableAIFeatures": true,
        "workbench.secondarySideBar.defaultVisibility": "hidden",
        "security.workspace.trust.enabled": false,
        "telemetry.telemetryLevel": "off",
        "workbench.tips.enabled": false,
        "extensions.ignoreRecommendations": true,
        "extensions.autoCheckUpdates": false,
        "update.mode": "none",
        "git.enabled": false,
        "window.commandCenter": false,
      }),
    );
  }

  /** Installs the .vsix with code-server's own CLI; returns the time it took (ms). */
  install() {
    const t = Date.now();
    const r = spawnSync(NODE, [ENTRY, "--extensions-dir", this.extensions, "--user-data-dir", this.userData, "--install-extension", this.vsix], { env: this.serverEnv(), encoding: "utf8", timeout: 120_000 });
    if (r.status !== 0 || !/successfully installed/.test(r.stdout)) throw new Error(`--install-extension failed: ${r.stdout}\n${r.stderr}`);
    return Date.now() - t;
  }

  serverEnv() {
    return { ...this.env.environ(), LAZARET_BIN: this.env.binary };
  }

  async start() {
    this.server = spawn(NODE, [ENTRY, "--auth", "none", "--bind-addr", "127.0.0.1:0", "--disable-telemetry", "--disable-update-check", "--disable-workspace-trust", "--disable-getting-started-override", "--extensions-dir", this.extensions, "--user-data-dir", this.userData, this.folder], { env: this.serverEnv(), stdio: ["ignore", "pipe", "pipe"], detached: true });
    let log = "";
    this.server.stdout.on("data", (d) => (log += d));
    this.server.stderr.on("data", (d) => (log += d));
    const port = await waitUntil(30_000, () => log.match(/HTTP server listening on http:\/\/127\.0\.0\.1:(\d+)/)?.[1], 50);
    if (!port) throw new Error(`code-server did not start:\n${log}`);
    this.url = `http://127.0.0.1:${port}/?folder=${encodeURIComponent(this.folder)}`;
    this.browser = await chromium.launch({ executablePath: "/usr/bin/chromium", args: ["--no-sandbox", "--disable-gpu"] });
    this.page = await this.browser.newPage({ viewport: { width: 1400, height: 860 } });
    this.loadedAt = Date.now();
    await this.page.goto(this.url);
    await this.page.waitForSelector(".monaco-workbench", { timeout: 90_000 });
  }

  /** The extension's own log (its LogOutputChannel, written by VS Code). */
  extensionLog() {
    const found = spawnSync("sh", ["-c", `find '${this.userData}/logs' -path '*lazaret.lazaret*' -name 'Lazaret.log' 2>/dev/null | sort | tail -1`], { encoding: "utf8" }).stdout.trim();
    return found ? fs.readFileSync(found, "utf8") : "";
  }

  /** Resolves with the page's clock (ms) at the moment some element matching `selector` contains `text`. */
  async waitText(selector, text, timeout = 10_000) {
    const handle = await this.page.waitForFunction(
      ([sel, t]) => [...document.querySelectorAll(sel)].some((e) => e.textContent.includes(t)) && Date.now(),
      [selector, text],
      { timeout, polling: 10 },
    );
    return handle.jsonValue();
  }

  async waitGone(selector, text, timeout = 10_000) {
    const handle = await this.page.waitForFunction(
      ([sel, t]) => ![...document.querySelectorAll(sel)].some((e) => e.textContent.includes(t)) && Date.now(),
      [selector, text],
      { timeout, polling: 10 },
    );
    return handle.jsonValue();
  }

  statusText() {
    return this.page.evaluate(() => [...document.querySelectorAll(".statusbar-item")].map((e) => e.textContent).join(" | "));
  }

  /** Text of the Lazaret tree's rows, one per line. */
  treeText() {
    return this.page.evaluate(() => {
      const pane = [...document.querySelectorAll(".pane")].find((p) => p.querySelector('.pane-header[aria-label^="Sandboxes"]'));
      return pane ? [...pane.querySelectorAll(".monaco-list-row")].map((r) => r.textContent.trim()).join("\n") : "";
    });
  }

  /** The Lazaret view (notification toasts are monaco lists too: never match those). */
  pane() {
    return this.page.locator(".pane", { has: this.page.locator('.pane-header[aria-label^="Sandboxes"]') });
  }

  row(text) {
    return this.pane().locator(".monaco-list-row", { hasText: text }).first();
  }

  /** Resolves with the page's clock (ms) once no row of the Lazaret view contains `text`. */
  async waitGoneFromTree(text, timeout = 10_000) {
    const handle = await this.page.waitForFunction(
      (t) => {
        const pane = [...document.querySelectorAll(".pane")].find((p) => p.querySelector('.pane-header[aria-label^="Sandboxes"]'));
        return pane && ![...pane.querySelectorAll(".monaco-list-row")].some((r) => r.textContent.includes(t)) && Date.now();
      },
      text,
      { timeout, polling: 10 },
    );
    return handle.jsonValue();
  }

  /** Runs a command through the palette with the keyboard alone. */
  async palette(title) {
    await this.page.keyboard.press("F1");
    const input = this.page.locator(".quick-input-widget input");
    await input.waitFor({ state: "visible", timeout: 10_000 });
    await this.page.keyboard.type(`${title}`);
    await this.page.locator(".quick-input-widget .monaco-list-row", { hasText: title }).first().waitFor({ timeout: 10_000 });
    await this.page.keyboard.press("Enter");
  }

  async openView() {
    await this.palette("Lazaret: Show Pending Escalations");
    await this.page.locator(".pane-header", { hasText: "Sandboxes" }).waitFor({ state: "attached", timeout: 10_000 });
    // A wider side bar, so that the screenshots show whole rows.
    const box = await this.page.locator(".part.sidebar").boundingBox();
    if (box) {
      await this.page.mouse.move(box.x + box.width + 1, box.y + 300);
      await this.page.mouse.down();
      await this.page.mouse.move(box.x + 560, box.y + 300, { steps: 5 });
      await this.page.mouse.up();
    }
  }

  dialog() {
    return this.page.locator(".monaco-dialog-box");
  }

  async screenshot(name, clip) {
    fs.mkdirSync(this.artifacts, { recursive: true });
    const file = path.join(this.artifacts, name);
    await this.page.screenshot({ path: file, clip });
    return file;
  }

  async close() {
    try {
      await this.browser?.close();
    } catch {}
    if (this.server) {
      try {
        process.kill(-this.server.pid, "SIGKILL");
      } catch {}
    }
    await sleep(100);
    fs.rmSync(this.dir, { recursive: true, force: true });
  }
}
