// Finding the coordinators: `lazaret editor-info --json --workspace DIR...`
// (socket root, running domains, the domain of each workspace folder, the
// profiles), and scanning `<socketRoot>/*/control.sock` for coordinators that
// start later. Node only (no vscode): the runner is injected for tests.
import * as fs from "node:fs";
import * as path from "node:path";
import type { EditorInfo, FolderDomain, RunningDomain } from "./protocol";

export interface RunResult {
  code: number;
  stdout: string;
  stderr: string;
}
export type Runner = (argv: string[]) => Promise<RunResult>;

/** EditorInfo as the extension uses it; `legacy` when this lazaret predates `--workspace`. */
export interface Discovery {
  socketRoot: string;
  version?: string;
  defaultProfile: string;
  profiles: string[];
  domains: RunningDomain[];
  folders: FolderDomain[];
  legacy: boolean;
}

function parse(text: string): Record<string, unknown> | undefined {
  try {
    const value = JSON.parse(text);
    return value && typeof value === "object" && !Array.isArray(value) ? value : undefined;
  } catch {
    return undefined;
  }
}

/** Whether a failed `editor-info` run was the CLI rejecting `--workspace` (older lazaret). */
export function rejectsWorkspaceFlag(result: RunResult): boolean {
  return result.code !== 0 && /unexpected argument '--workspace'|--workspace/.test(result.stderr);
}

/** Normalises `editor-info --json` output (current or older lazaret). */
export function normaliseInfo(raw: Record<string, unknown>): Discovery {
  const info = raw as Partial<EditorInfo>;
  if (typeof info.socketRoot !== "string") throw new Error("editor-info: no socketRoot");
  return {
    socketRoot: info.socketRoot,
    version: typeof info.version === "string" ? info.version : undefined,
    defaultProfile: typeof info.defaultProfile === "string" ? info.defaultProfile : "default",
    profiles: Array.isArray(info.profiles) && info.profiles.length ? info.profiles : ["default"],
    domains: Array.isArray(info.domains) ? info.domains : [],
    folders: Array.isArray(info.folders) ? info.folders : [],
    legacy: !Array.isArray(info.folders),
  };
}

/** `lazaret domain --json` of an older lazaret (snake_case) or a newer one (camelCase), as a FolderDomain. */
export function folderFromDomainJson(raw: Record<string, unknown>): FolderDomain | undefined {
  const pick = (camel: string, snake: string) => (raw[camel] ?? raw[snake]) as string | undefined;
  const controlSocket = pick("controlSocket", "control_socket");
  const domainHash = pick("domainHash", "domain_hash");
  if (!controlSocket || !domainHash) return undefined;
  return {
    controlSocket,
    domainHash,
    profile: String(raw.profile ?? "default"),
    workspace: String(raw.workspace ?? ""),
    running: isSocket(controlSocket),
  };
}

export function isSocket(p: string): boolean {
  try {
    return fs.statSync(p).isSocket();
  } catch {
    return false;
  }
}

/**
 * Runs `lazaret editor-info --json [--workspace DIR]...`. An older lazaret that
 * rejects `--workspace` is asked again without it, and each folder's domain is
 * found with `lazaret domain --json --workspace DIR` (legacy = true).
 */
export async function discover(run: Runner, workspaces: readonly string[]): Promise<Discovery> {
  const argv = ["editor-info", "--json"];
  for (const dir of workspaces) argv.push("--workspace", dir);
  const first = await run(argv);
  const parsed = first.code === 0 ? parse(first.stdout) : undefined;
  if (parsed) return normaliseInfo(parsed);
  if (workspaces.length === 0 || !rejectsWorkspaceFlag(first)) {
    throw new Error(`lazaret editor-info failed: ${first.stderr.trim() || `exit status ${first.code}`}`);
  }
  const bare = await run(["editor-info", "--json"]);
  const legacyRaw = bare.code === 0 ? parse(bare.stdout) : undefined;
  if (!legacyRaw) throw new Error(`lazaret editor-info failed: ${bare.stderr.trim() || `exit status ${bare.code}`}`);
  const info = normaliseInfo(legacyRaw);
  info.legacy = true;
  const folders = await Promise.all(
    workspaces.map(async (dir) => {
      const res = await run(["domain", "--json", "--workspace", dir]);
      const raw = res.code === 0 ? parse(res.stdout) : undefined;
      return raw ? folderFromDomainJson(raw) : undefined;
    }),
  );
  info.folders = folders.filter((f): f is FolderDomain => !!f);
  return info;
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

/** The profiles `lazaret config show --json` names (older lazaret: only the one it shows). */
export function profilesFromConfigShow(text: string): string[] {
  const raw = parse(text);
  if (!raw) return [];
  if (Array.isArray(raw.profiles)) return raw.profiles.map(String);
  if (raw.profiles && typeof raw.profiles === "object") return Object.keys(raw.profiles);
  return typeof raw.profile === "string" ? [raw.profile] : [];
}
