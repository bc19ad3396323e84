// Finding the coordinators: `lazaret editor-info --json --workspace DIR...`
// (socket root, running domains, the domain of each workspace folder, the
// profiles), and scanning `<socketRoot>/*/control.sock` for coordinators that
// start later. Node only (no vscode): the runner is injected for tests.
//
// There is no fallback for a lazaret of another API version: a binary or a
// coordinator that does not speak this extension's `API_VERSION` is reported
// as such, with what to update (`apiMismatch`), and nothing is asked of it.
import * as fs from "node:fs";
import * as path from "node:path";
import { API_VERSION, EditorInfo, FolderDomain, RunningDomain } from "./protocol";

export interface RunResult {
  code: number;
  stdout: string;
  stderr: string;
}
export type Runner = (argv: string[]) => Promise<RunResult>;

/** EditorInfo as the extension uses it. */
export interface Discovery {
  socketRoot: string;
  version?: string;
  defaultProfile: string;
  profiles: string[];
  domains: RunningDomain[];
  folders: FolderDomain[];
}

/** A failure that carries its own fix (shown with it, in the view and the status bar). */
export class ProblemError extends Error {
  constructor(
    message: string,
    readonly fix: string,
  ) {
    super(message);
  }
}

/** The version text of an `apiVersion` value as received (anything, from another build). */
function versionOf(value: unknown): string {
  return typeof value === "number" && Number.isInteger(value) ? `API ${value}` : "no API version this extension can read";
}

/**
 * What a peer of another API version means, and what to update. `who` is
 * our own text naming the peer ("the lazaret binary `…`", "this domain's
 * coordinator"); `theirs` is its `apiVersion` as received (possibly absent).
 * Undefined when it speaks ours.
 */
export function apiMismatch(kind: "binary" | "coordinator", who: string, theirs: unknown): { message: string; fix: string } | undefined {
  if (theirs === API_VERSION) return undefined;
  const message = `${who} speaks ${versionOf(theirs)}, this extension speaks API ${API_VERSION}`;
  const newer = typeof theirs === "number" && theirs > API_VERSION;
  if (newer) return { message, fix: `Update the Lazaret extension to the release of that lazaret (API ${theirs}), then run Lazaret: Refresh.` };
  if (kind === "binary")
    return {
      message,
      fix: `Update lazaret (the binary the \`lazaret.path\` setting names) to the release of this extension (API ${API_VERSION}), or point \`lazaret.path\` at one, then run Lazaret: Refresh.`,
    };
  return {
    message: `${message}: its requests are not asked for`,
    fix: `An older lazaret started this coordinator: answer its requests with that lazaret (\`lazaret pending\` in a terminal), and end its sessions so that the next \`lazaret run\` starts a current one.`,
  };
}

function parse(text: string): Record<string, unknown> | undefined {
  try {
    const value = JSON.parse(text);
    return value && typeof value === "object" && !Array.isArray(value) ? value : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Checks `editor-info --json` output against the `EditorInfo` contract of
 * this extension's API version. `binary` names the lazaret in messages.
 */
export function normaliseInfo(raw: Record<string, unknown>, binary = "lazaret"): Discovery {
  const info = raw as Partial<EditorInfo>;
  const mismatch = apiMismatch("binary", `the lazaret binary \`${binary}\``, info.apiVersion);
  if (mismatch) throw new ProblemError(mismatch.message, mismatch.fix);
  if (typeof info.socketRoot !== "string" || !Array.isArray(info.domains) || !Array.isArray(info.folders) || !Array.isArray(info.profiles))
    throw new Error(`lazaret editor-info failed: its answer is not the EditorInfo of API ${API_VERSION}`);
  return {
    socketRoot: info.socketRoot,
    version: typeof info.version === "string" ? info.version : undefined,
    defaultProfile: typeof info.defaultProfile === "string" ? info.defaultProfile : "default",
    profiles: info.profiles.length ? info.profiles.map(String) : ["default"],
    domains: info.domains,
    folders: info.folders,
  };
}

export function isSocket(p: string): boolean {
  try {
    return fs.statSync(p).isSocket();
  } catch {
    return false;
  }
}

/** Runs `lazaret editor-info --json [--workspace DIR]...`. */
export async function discover(run: Runner, workspaces: readonly string[], binary = "lazaret"): Promise<Discovery> {
  const argv = ["editor-info", "--json"];
  for (const dir of workspaces) argv.push("--workspace", dir);
  const res = await run(argv);
  if (res.code !== 0) throw new Error(`lazaret editor-info failed: ${res.stderr.trim() || `exit status ${res.code}`}`);
  const parsed = parse(res.stdout);
  if (!parsed) throw new Error("lazaret editor-info failed: its answer is not JSON");
  return normaliseInfo(parsed, binary);
}

/** Control sockets under the socket root (`<root>/<domainHash>/control.sock`), sorted. */
export function scanSockets(root: string): string[] {
  let names: string[];
  try {
    names = fs.readdirSync(root);
  } catch {
    return [];
  }
  return names
    .map((name) => path.join(root, name, "control.sock"))
    .filter(isSocket)
    .sort();
}
