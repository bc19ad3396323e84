import { splitArgv } from "./shell";

/** Validation of an edited command line: the parse error, or undefined. */
export function validateCommandLine(line: string): string | undefined {
  const parsed = splitArgv(line);
  if ("error" in parsed) return `Cannot parse: ${parsed.error}`;
  if (!parsed.argv.length) return "Empty command";
  return undefined;
}
