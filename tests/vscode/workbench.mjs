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
    this.settings = {
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
        // Tooltips are surfaces under test: show them without the default delay.
        "workbench.hover.delay": 200,
    };
    this.writeSettings();
  }

  writeSettings() {
    fs.writeFileSync(path.join(this.userData, "User/settings.json"), JSON.stringify(this.settings, null, 1));
  }

  /**
   * Replaces a JSON file of the user's (settings, keybindings) as a user
   * does, in its editor (code-server does not notice the file changing on
   * disk): palette command, select all, the new text, save, close.
   */
  async editUserJson(paletteTitle, content) {
    await this.palette(paletteTitle);
    const editor = this.page.locator(".editor-instance .monaco-editor").filter({ visible: true }).first();
    await editor.waitFor({ timeout: 10_000 });
    await sleep(300);
    await editor.click({ position: { x: 200, y: 10 } });
    await this.page.keyboard.press("Control+A");
    await this.page.keyboard.insertText(content);
    await this.page.keyboard.press("Control+S");
    await sleep(500);
    await this.page.keyboard.press("Control+W");
  }

  /**
   * Changes a machine setting (as `lazaret.path`) in the running workbench:
   * code-server is a remote window, where machine settings apply from the
   * Remote settings only (from the User settings only at startup).
   */
  async setMachineSetting(key, value) {
    this.machineSettings = { ...(this.machineSettings ?? {}), [key]: value };
    await this.editUserJson("Preferences: Open Remote Settings (JSON)", JSON.stringify(this.machineSettings));
  }

  /**
   * Replaces the user's keybindings in the running workbench. A keybinding
   * can pass any JSON `args` to a command, as a `command:` link can: the
   * tests use it to forge arguments.
   */
  async setKeybindings(bindings) {
    const probe = { key: "ctrl+alt+shift+y", command: "workbench.action.showCommands" };
    await this.editUserJson("Preferences: Open Keyboard Shortcuts (JSON)", JSON.stringify([probe, ...bindings]));
    // Loaded once the probe opens the command palette.
    const input = this.page.locator(".quick-input-widget input");
    const ok = await waitUntil(15_000, async () => {
      await this.page.keyboard.press("Control+Alt+Shift+KeyY");
      const shown = await input.isVisible().catch(() => false);
      if (shown) await this.page.keyboard.press("Escape");
      return shown;
    }, 500);
    if (!ok) throw new Error("the workbench did not load keybindings.json");
  }

  /** Runs `fn` with a viewport tall enough to render every row of a long list (lists render only what is visible). */
  async tall(fn, height = 3200) {
    const size = this.page.viewportSize();
    await this.page.setViewportSize({ width: size.width, height });
    await sleep(700);
    try {
      return await fn();
    } finally {
      await this.page.setViewportSize(size);
      await sleep(300);
    }
  }

  /** Hovers `locator` and returns the text of the hover (tooltip) it shows. */
  async hoverText(locator, timeout = 5_000) {
    const hover = this.page.locator(".monaco-hover, .workbench-hover").filter({ visible: true }).first();
    // Up to three hovers: a tree that re-renders the row under the pointer
    // (a refresh after an event) cancels the hover it was about to show.
    for (let attempt = 1; ; attempt++) {
      await this.page.mouse.move(700, 5);
      await hover.waitFor({ state: "detached", timeout: 2_000 }).catch(() => undefined);
      await locator.hover();
      const shown = await hover.waitFor({ timeout }).then(() => true, (e) => (attempt < 3 ? false : Promise.reject(e)));
      if (shown) return hover.textContent();
    }
  }

  /**
   * Every surface that can show agent text, as rendered now: the texts, and
   * what was rendered from them as anything but text (links, HTML elements,
   * codicons inside labels and messages).
   */
  surfaces() {
    return this.page.evaluate(() => {
      // The text an element shows (not the CSS of the <style> elements VS Code puts in lists).
      const textOf = (e) => {
        let t = "";
        const walker = document.createTreeWalker(e, NodeFilter.SHOW_TEXT, { acceptNode: (n) => (n.parentElement?.closest("style, script") ? NodeFilter.FILTER_REJECT : NodeFilter.FILTER_ACCEPT) });
        for (let n = walker.nextNode(); n; n = walker.nextNode()) t += n.nodeValue;
        return t;
      };
      const pane = [...document.querySelectorAll(".pane")].find((p) => p.querySelector('.pane-header[aria-label^="Sandboxes"]'));
      const visible = (e) => e.offsetParent !== null;
      // Where text is read from: the parts that can show agent text (not VS Code's own counters and padding).
      const textParts = {
        notifications: [...document.querySelectorAll(".notification-toast .notification-list-item-message, .notifications-center .notification-list-item-message")],
        tree: pane ? [...pane.querySelectorAll(".monaco-list-row")] : [],
        quickInput: [...document.querySelectorAll(".quick-input-widget")].filter(visible).flatMap((w) => [...w.querySelectorAll(".quick-input-title, .quick-input-message, .quick-input-list .monaco-list-row")]),
        dialog: [...document.querySelectorAll(".monaco-dialog-box .dialog-message-text, .monaco-dialog-box .dialog-message-detail")],
        hover: [...document.querySelectorAll(".monaco-hover .hover-contents, .workbench-hover .hover-contents")].filter(visible),
        status: [...document.querySelectorAll(".statusbar-item")].filter((e) => (e.textContent ?? "").includes("Lazaret")),
        tabs: [...document.querySelectorAll(".tabs-container .tab .tab-label")],
        reviewHeaders: [...document.querySelectorAll(".multiDiffEditor .header, .monaco-multi-diff-editor .header")],
      };
      // Where rendered elements are looked for: the whole widgets.
      const areas = {
        notifications: [...document.querySelectorAll(".notification-toast, .notifications-center .notification-list-item")],
        tree: pane ? [...pane.querySelectorAll(".monaco-list-row")] : [],
        quickInput: [...document.querySelectorAll(".quick-input-widget")].filter((e) => e.offsetParent !== null),
        dialog: [...document.querySelectorAll(".monaco-dialog-box")],
        hover: [...document.querySelectorAll(".monaco-hover, .workbench-hover")].filter((e) => e.offsetParent !== null),
        status: [...document.querySelectorAll(".statusbar-item")].filter((e) => (e.textContent ?? "").includes("Lazaret")),
        tabs: [...document.querySelectorAll(".tabs-container .tab")],
        reviewHeaders: [...document.querySelectorAll(".multiDiffEditor .header, .monaco-multi-diff-editor .header, .multiDiffEditor .file-path, .monaco-multi-diff-editor .file-path")],
      };
      const out = { texts: {}, rendered: [] };
      // Elements agent text must never become: links, HTML, codicons inside text.
      const RENDERED = 'a[href^="command:"], a.monaco-link, a[href]:not(.monaco-button):not(.action-label), img, script, iframe, strong, em, b, i:not(.codicon), code, h1, h2, blockquote, del, s';
      const TEXT_PARTS = ".label-name, .label-description, .monaco-icon-label-container, .notification-list-item-message, .quick-input-title, .quick-input-message, .quick-input-list-label, .quick-input-list-detail, .quick-input-list-description, .dialog-message-text, .dialog-message-detail, .hover-contents, .tab-label, .monaco-icon-name-container, .monaco-icon-description-container";
      const seen = new Set();
      for (const [name, list] of Object.entries(areas)) {
        out.texts[name] = (textParts[name] ?? list).map(textOf);
        for (const e of list) {
          for (const r of e.querySelectorAll(RENDERED)) {
            if (seen.has(r)) continue;
            seen.add(r);
            out.rendered.push(`${name}: <${r.tagName.toLowerCase()} class="${r.className}" href="${r.getAttribute("href") ?? ""}">${textOf(r).slice(0, 80)}`);
          }
          const parts = e.matches(TEXT_PARTS) ? [e, ...e.querySelectorAll(TEXT_PARTS)] : [...e.querySelectorAll(TEXT_PARTS)];
          for (const part of parts)
            for (const icon of part.querySelectorAll(".codicon, [class*='codicon-']")) {
              if (seen.has(icon)) continue;
              seen.add(icon);
              out.rendered.push(`${name}: codicon ${icon.className} in "${textOf(part).slice(0, 80)}"`);
            }
        }
      }
      // The Lazaret status bar item: its own one codicon, no more.
      for (const e of areas.status) {
        const n = e.querySelectorAll(".codicon").length;
        if (n > 1) out.rendered.push(`status: ${n} codicons in "${textOf(e)}"`);
      }
      // Inputs show their value, not text nodes.
      out.texts.inputs = [...document.querySelectorAll(".quick-input-widget input")].filter((e) => e.offsetParent !== null).map((e) => e.value);
      return out;
    });
  }

  /**
   * Whether NEEDLE is on screen inside the first element LOCATOR matches
   * that holds it: found in its text, and every box of it inside the
   * element's visible area (within each ancestor that clips: a row, a label
   * that ends in an ellipsis, a hover, the window). A text in the DOM that a
   * narrow row hides is not visible. Returns {visible, why}.
   */
  async textVisible(locator, needle) {
    const handles = await locator.elementHandles();
    let last = { visible: false, why: `no element of ${locator} holds ${JSON.stringify(needle)}` };
    for (const handle of handles) {
      const seen = await handle.evaluate((root, needle) => {
        const texts = [];
        const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT, { acceptNode: (n) => (n.parentElement?.closest("style, script") ? NodeFilter.FILTER_REJECT : NodeFilter.FILTER_ACCEPT) });
        let all = "";
        for (let n = walker.nextNode(); n; n = walker.nextNode()) {
          texts.push({ node: n, at: all.length });
          all += n.nodeValue;
        }
        const start = all.indexOf(needle);
        if (start < 0) return undefined;
        const end = start + needle.length;
        // The text node and offset of a character boundary (a start inside the node after it, an end inside the node before it).
        const locate = (offset, isEnd) => {
          const t = texts.find((x) => (isEnd ? offset > x.at && offset <= x.at + x.node.nodeValue.length : offset >= x.at && offset < x.at + x.node.nodeValue.length));
          return [t.node, offset - t.at];
        };
        const range = document.createRange();
        range.setStart(...locate(start, false));
        range.setEnd(...locate(end, true));
        const boxes = [...range.getClientRects()].filter((r) => r.width > 0 && r.height > 0);
        if (!boxes.length) return { visible: false, why: "it has no box on screen" };
        // The visible area: the window, cut by every ancestor that clips.
        let area = { left: 0, top: 0, right: window.innerWidth, bottom: window.innerHeight };
        const clips = [];
        for (let e = range.commonAncestorContainer.nodeType === 1 ? range.commonAncestorContainer : range.commonAncestorContainer.parentElement; e && e !== document.documentElement; e = e.parentElement) {
          const style = getComputedStyle(e);
          if (style.display === "none" || style.visibility === "hidden") return { visible: false, why: `hidden by ${e.className}` };
          if (style.overflowX !== "visible" || style.overflowY !== "visible" || style.textOverflow === "ellipsis") {
            const r = e.getBoundingClientRect();
            area = { left: Math.max(area.left, r.left), top: Math.max(area.top, r.top), right: Math.min(area.right, r.right), bottom: Math.min(area.bottom, r.bottom) };
            clips.push(String(e.className).slice(0, 60));
          }
        }
        const out = boxes.find((b) => b.left < area.left - 1 || b.right > area.right + 1 || b.top < area.top - 1 || b.bottom > area.bottom + 1);
        if (out) return { visible: false, why: `a box of it (${Math.round(out.left)}..${Math.round(out.right)} x ${Math.round(out.top)}..${Math.round(out.bottom)}) is outside the visible area (${Math.round(area.left)}..${Math.round(area.right)} x ${Math.round(area.top)}..${Math.round(area.bottom)}) of ${clips.join(" > ")}` };
        return { visible: true, why: `${boxes.length} box(es) inside ${Math.round(area.left)}..${Math.round(area.right)}` };
      }, needle);
      if (seen?.visible) return seen;
      if (seen) last = seen;
    }
    return last;
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

  /**
   * Waits (at most `timeout`) until the keyboard focus has stayed on one
   * element for `quiet` ms: an editor that opens takes the focus when its
   * documents have loaded, which closes a palette opened just before.
   */
  async focusSettled(quiet = 500, timeout = 5_000) {
    await this.page.evaluate(({ quiet, timeout }) => new Promise((resolve) => {
      const end = Date.now() + timeout;
      let last = document.activeElement;
      let since = Date.now();
      const look = () => {
        if (document.activeElement !== last) {
          last = document.activeElement;
          since = Date.now();
        }
        if (Date.now() - since >= quiet || Date.now() > end) resolve();
        else setTimeout(look, 50);
      };
      look();
    }), { quiet, timeout });
  }

  /** Runs a command through the palette with the keyboard alone. */
  async palette(title) {
    const input = this.page.locator(".quick-input-widget input");
    const exactLabel = new RegExp(`^${title.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}( \\(|$)`);
    // The palette's state as the page has it: is its input focused, what it holds, its rows.
    const look = () => this.page.evaluate(() => {
      const widget = [...document.querySelectorAll(".quick-input-widget")].find((w) => w.offsetParent !== null && getComputedStyle(w).display !== "none");
      const field = widget?.querySelector("input");
      return {
        focused: !!field && document.activeElement === field,
        value: field?.value ?? "",
        rows: widget ? [...widget.querySelectorAll(".monaco-list-row")].map((e) => ({ index: Number(e.getAttribute("data-index")), label: e.querySelector(".label-name")?.textContent ?? "", text: e.textContent ?? "", focused: e.classList.contains("focused") })) : [],
      };
    });
    let problem = "";
    for (let attempt = 1; attempt <= 3; attempt++) {
      if (attempt > 1) {
        await this.page.keyboard.press("Escape");
        await sleep(300);
      }
      await this.focusSettled();
      await this.page.keyboard.press("F1");
      await input.waitFor({ state: "visible", timeout: 10_000 });
      await this.page.keyboard.type(`${title}`);
      // Enter only once the palette still has the keyboard, holds what was
      // typed, and its focused row is the command: the row whose label is the
      // title (not merely a longer one that contains it), else the first row
      // that contains it; seen so on two looks in a row, since the list
      // filters what was typed after it first shows (an Enter on the
      // unfiltered list ran whatever row was focused then).
      const deadline = Date.now() + 10_000;
      let settled = 0;
      for (;;) {
        const now = await look();
        const target = now.rows.find((r) => exactLabel.test(r.label)) ?? now.rows.filter((r) => r.text.includes(title)).sort((a, b) => a.index - b.index)[0];
        const at = now.rows.find((r) => r.focused);
        if (!now.focused || !now.value.includes(title)) {
          problem = `the palette lost the keyboard (holds ${JSON.stringify(now.value)}, focused: ${now.focused})`;
          break;
        }
        if (target && at && at.index === target.index) {
          if (++settled >= 2) {
            await this.page.keyboard.press("Enter");
            return;
          }
        } else {
          settled = 0;
          if (target && at) await this.page.keyboard.press(at.index < target.index ? "ArrowDown" : "ArrowUp");
        }
        if (Date.now() > deadline) {
          problem = `no focused row for it: ${JSON.stringify(now.rows.map((r) => [r.label, r.focused]))}`;
          break;
        }
        await sleep(100);
      }
    }
    throw new Error(`palette: ${JSON.stringify(title)}: ${problem}`);
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
