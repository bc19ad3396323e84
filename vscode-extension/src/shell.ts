// Shell quoting and splitting of an argv, for showing a command and editing
// it as one line. Pure: no editor state. The same rules as the Neovim
// plugin's lua/lazaret/shell.lua; tests/vectors/quoting.json holds the cases
// both editors' tests run.
//
// quoteArgv writes a line a POSIX shell reads back as exactly the argv, and
// that shows no unsafe character (./text isUnsafe): a word of safe characters
// stays bare, a word without unsafe characters goes in single quotes, any
// other in `$'...'` (POSIX.1-2024, bash, busybox ash, ...) with `\\` `\'` `\n`
// `\t` `\r` and every other unsafe character as the `\xHH` bytes of its
// UTF-8: a shell reads bytes back the same in every locale (bash's `\x85` is
// the byte 85, not U+0085, and its `\u202E` depends on the locale).
// splitArgv reads sh quoting without expansion of any kind, plus `$'...'`
// with bash's escapes.
import { escapeUnsafe, isUnsafe } from "./text";

const SAFE = /^[A-Za-z0-9@%+=:,./_-]+$/;
const utf8 = new TextEncoder();

/** One character inside `$'...'`. */
function ansiC(ch: string): string {
  if (ch === "\\") return "\\\\";
  if (ch === "'") return "\\'";
  if (ch === "\n") return "\\n";
  if (ch === "\t") return "\\t";
  if (ch === "\r") return "\\r";
  const code = ch.codePointAt(0)!;
  if (!isUnsafe(code)) return ch;
  // A lone surrogate has no UTF-8: its WTF-8 bytes show it (and splitArgv refuses them).
  const bytes = code >= 0xd800 && code <= 0xdfff ? [0xe0 | (code >> 12), 0x80 | ((code >> 6) & 0x3f), 0x80 | (code & 0x3f)] : utf8.encode(ch);
  let out = "";
  for (const b of bytes) out += "\\x" + b.toString(16).toUpperCase().padStart(2, "0");
  return out;
}

/** One argument as a shell word that shows no unsafe character. */
export function quoteWord(word: string): string {
  if (word !== "" && SAFE.test(word)) return word;
  let unsafe = false;
  for (const ch of word) if (isUnsafe(ch.codePointAt(0)!)) unsafe = true;
  if (!unsafe) return "'" + word.replace(/'/g, "'\\''") + "'";
  let out = "$'";
  for (const ch of word) out += ansiC(ch);
  return out + "'";
}

/** An argv as one inert line, the program first, that `splitArgv` (or a shell) turns back into the same argv. */
export function quoteArgv(argv: readonly string[] | null | undefined): string {
  return (argv ?? []).map((w) => quoteWord(String(w))).join(" ");
}

/** The request's command line as the coordinator displays it (escaped), else built here. */
export function requestDisplay(e: { display?: string | null; argv?: readonly string[] | null }): string {
  return e.display ? escapeUnsafe(e.display) : quoteArgv(e.argv);
}

export type SplitResult = { argv: string[] } | { error: string };

/** Only these separate words (as in sh: not CR, VT, FF or Unicode spaces). */
const BLANK = " \t\n";

/**
 * Splits a line into words as sh does for quoting only: single quotes, double
 * quotes (where \ escapes $ ` " \ and removes a newline), backslash outside
 * quotes, and bash's `$'...'`.
 */
export function splitArgv(line: string): SplitResult {
  const argv: string[] = [];
  let word = "";
  let inWord = false;
  let i = 0;
  const n = line.length;
  while (i < n) {
    const c = line[i];
    if (c === "$" && line[i + 1] === "'") {
      const read = readAnsiC(line, i + 2);
      if ("error" in read) return read;
      word += read.text;
      inWord = true;
      i = read.end;
    } else if (c === "'") {
      const close = line.indexOf("'", i + 1);
      if (close < 0) return { error: "unterminated single quote" };
      word += line.slice(i + 1, close);
      inWord = true;
      i = close + 1;
    } else if (c === '"') {
      inWord = true;
      i++;
      for (;;) {
        if (i >= n) return { error: "unterminated double quote" };
        const d = line[i];
        if (d === '"') {
          i++;
          break;
        } else if (d === "\\" && i + 1 < n && '$`"\\\n'.includes(line[i + 1])) {
          if (line[i + 1] !== "\n") word += line[i + 1];
          i += 2;
        } else {
          word += d;
          i++;
        }
      }
    } else if (c === "\\") {
      if (i + 1 >= n) return { error: "trailing backslash" };
      const next = line[i + 1];
      if (next !== "\n") {
        word += next;
        inWord = true;
      }
      i += 2;
    } else if (BLANK.includes(c)) {
      if (inWord) {
        argv.push(word);
        word = "";
        inWord = false;
      }
      i++;
    } else {
      word += c;
      inWord = true;
      i++;
    }
  }
  if (inWord) argv.push(word);
  return { argv };
}

const SIMPLE_ESCAPES: Record<string, number> = { a: 7, b: 8, e: 0x1b, E: 0x1b, f: 0x0c, n: 0x0a, r: 0x0d, t: 0x09, v: 0x0b, "\\": 0x5c, "'": 0x27, '"': 0x22, "?": 0x3f };
const HEX = /^[0-9A-Fa-f]+/;
const fatalUtf8 = new TextDecoder("utf-8", { fatal: true });

/**
 * The body of `$'...'` from `start` (after the quote), as bash reads it:
 * its text and the index after the closing quote. `\xHH` and `\NNN` are
 * bytes, `\uHHHH` and `\UHHHHHHHH` characters; the whole must be UTF-8 text
 * without NUL (an argument can hold neither).
 */
function readAnsiC(line: string, start: number): { text: string; end: number } | { error: string } {
  const bytes: number[] = [];
  const push = (s: string) => bytes.push(...utf8.encode(s));
  let i = start;
  while (i < line.length) {
    const c = line[i];
    if (c === "'") {
      if (bytes.includes(0)) return { error: "an argument cannot hold a NUL character" };
      try {
        return { text: fatalUtf8.decode(new Uint8Array(bytes)), end: i + 1 };
      } catch {
        return { error: "$'...' escapes that are not UTF-8 text" };
      }
    }
    if (c !== "\\") {
      const code = line.codePointAt(i)!;
      push(String.fromCodePoint(code));
      i += code > 0xffff ? 2 : 1;
      continue;
    }
    const next = line[i + 1];
    if (next === undefined) break;
    if (next in SIMPLE_ESCAPES) {
      bytes.push(SIMPLE_ESCAPES[next]);
      i += 2;
    } else if (next >= "0" && next <= "7") {
      const digits = /^[0-7]{1,3}/.exec(line.slice(i + 1, i + 4))![0];
      bytes.push(parseInt(digits, 8) & 0xff);
      i += 1 + digits.length;
    } else if (next === "x" || next === "u" || next === "U") {
      const max = next === "x" ? 2 : next === "u" ? 4 : 8;
      const digits = HEX.exec(line.slice(i + 2, i + 2 + max))?.[0];
      if (!digits) {
        push("\\" + next);
        i += 2;
        continue;
      }
      const value = parseInt(digits, 16);
      if (next === "x") bytes.push(value);
      else if (value > 0x10ffff || (value >= 0xd800 && value <= 0xdfff)) return { error: `\\${next}${digits} is not a character` };
      else push(String.fromCodePoint(value));
      i += 2 + digits.length;
    } else if (next === "c") {
      const x = line[i + 2];
      if (x === undefined) break;
      if (x.charCodeAt(0) > 0x7f) return { error: "\\c before a non-ASCII character" };
      bytes.push(x === "?" ? 0x7f : x.charCodeAt(0) & 0x1f);
      // bash reads `\c\\` as one control character.
      i += x === "\\" && line[i + 3] === "\\" ? 4 : 3;
    } else {
      // bash keeps an unknown escape as it is.
      push(c);
      i++;
    }
  }
  return { error: "unterminated $'...' quote" };
}
