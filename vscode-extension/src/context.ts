// The extension's state in one object: the settings, the output channel, the
// domain manager (typed client over the coordinators) and the UI parts that
// render it. Everything else takes a Ctx.
import * as cp from "node:child_process";
import * as vscode from "vscode";
import { Arming } from "./arming";
import type { Runner } from "./discovery";
import { DomainManager } from "./domains";
import { NodeRegistry, type Node } from "./nodes";
import { escapeUnsafe } from "./text";
import type { LazaretTree } from "./tree";

export class Ctx implements vscode.Disposable {
  readonly log: vscode.LogOutputChannel;
  readonly manager: DomainManager;
  readonly disposables: vscode.Disposable[] = [];
  /** The nodes the tree handed out: the only arguments commands act on. */
  readonly registry = new NodeRegistry();
  treeView?: vscode.TreeView<Node>;
  tree?: LazaretTree;
  /** When each pending request arrived or moved (DECISIONS D20): answers within the delay are refused. */
  readonly arming = new Arming();

  constructor(readonly extension: vscode.ExtensionContext) {
    this.log = vscode.window.createOutputChannel("Lazaret", { log: true });
    this.disposables.push(this.log);
    this.manager = new DomainManager({
      run: this.run,
      folders: () => (vscode.workspace.workspaceFolders ?? []).filter((f) => f.uri.scheme === "file").map((f) => f.uri.fsPath),
      // The traffic carries agent text: no raw control or bidi character in the Output view.
      log: (level, message) => this.log[level](escapeUnsafe(message)),
      git: (argv) => this.exec("git", argv),
      binary: () => this.binary,
    });
  }

  /** The `lazaret` binary (setting `lazaret.path`). */
  get binary(): string {
    return vscode.workspace.getConfiguration("lazaret").get<string>("path") || "lazaret";
  }

  /** Runs `lazaret ARGS...` and collects its output (never a shell). */
  readonly run: Runner = (argv) => this.exec(this.binary, argv);

  exec(file: string, argv: string[], cwd?: string): Promise<{ code: number; stdout: string; stderr: string }> {
    this.log.debug(escapeUnsafe(`exec ${file} ${argv.join(" ")}`));
    return new Promise((resolve) => {
      cp.execFile(file, argv, { cwd, timeout: 60_000, maxBuffer: 16 * 1024 * 1024 }, (err, stdout, stderr) => {
        const code = err ? (typeof (err as { code?: unknown }).code === "number" ? ((err as { code: number }).code) : 127) : 0;
        if (err && code === 127) stderr = stderr || err.message;
        resolve({ code, stdout: String(stdout), stderr: String(stderr) });
      });
    });
  }

  /**
   * Whether the request `key` may be answered now; when it arrived in this
   * window (or moved onto the row or selection a command acts on) less than
   * the arming delay ago, says so (no agent text) and answers nothing.
   */
  armed(key: string, what: string): boolean {
    const wait = this.arming.remaining(key, Date.now());
    if (!wait) return true;
    this.log.info(`${escapeUnsafe(what)}: refused, within the arming delay (${wait} ms left)`);
    void vscode.window.showWarningMessage(
      "Lazaret: nothing was answered: that request arrived (or moved into this place) less than a second ago. Look at it first, then answer again.",
    );
    return false;
  }

  dispose(): void {
    this.manager.dispose();
    for (const d of this.disposables.splice(0)) d.dispose();
  }
}
