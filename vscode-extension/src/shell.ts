// Shell-style quoting and splitting of an argv, for showing a command and
// editing it as one line. Pure: no editor state. The same rules as the
// Neovim plugin's lua/lazaret/shell.lua (POSIX sh quoting, no expansion),
// plus bash's ANSI-C quoting `$'...'`, in which the coordinator's `display`
// and `text.displayArgv` spell words holding unsafe characters (newlines,
// bidi controls, ...), so that an edit box never holds them raw.

const SAFE = /^[A-Za-z0-9@%+=:,./_-]+$/;

/** One argument as a POSIX shell word: unchanged when safe, else in single quotes. */
export function quoteWord(word: string): string {
  if (word !== "" && SAFE.test(word)) return word;
  return "'" + word.replace(/'/g, "'\\''") + "'";
}

/** An argv as one line that `splitArgv` (or sh) turns back into the same argv. */
export function quoteArgv(argv: readonly string[]): string {
  return argv.map((w) => quoteWord(String(w))).join(" ");
}

export type SplitResult = { argv: string[] } | { error: string };

/**
 * Splits a line into words as sh does for quoting only: single quotes, double
 * quotes (where \ escapes $ ` " \ and newline), backslash outside quotes.
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
          word += line[i + 1];
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
    } else if (/\s/.test(c)) {
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

const SIMPLE_ESCAPES: Record<string, string> = { n: "\n", t: "\t", r: "\r", e: "\x1b", E: "\x1b", a: "\x07", b: "\b", f: "\f", v: "\v", "\\": "\\", "'": "'", '"': '"', "?": "?" };

/** The body of `$'...'` from `start` (after the quote): its text and the index after the closing quote. */
function readAnsiC(line: string, start: number): { text: string; end: number } | { error: string } {
  let text = "";
  let i = start;
  const hex = (from: number, max: number) => {
    let j = from;
    while (j < line.length && j - from < max && /[0-9A-Fa-f]/.test(line[j])) j++;
    return { digits: line.slice(from, j), end: j };
  };
  while (i < line.length) {
    const c = line[i];
    if (c === "'") return { text, end: i + 1 };
    if (c !== "\\") {
      text += c;
      i++;
      continue;
    }
    const next = line[i + 1];
    if (next === undefined) break;
    if (next in SIMPLE_ESCAPES) {
      text += SIMPLE_ESCAPES[next];
      i += 2;
    } else if (next === "x" || next === "u" || next === "U") {
      let digits: string;
      let end: number;
      if (next === "u" && line[i + 2] === "{") {
        const close = line.indexOf("}", i + 3);
        digits = close < 0 ? "" : line.slice(i + 3, close);
        end = close + 1;
        if (!/^[0-9A-Fa-f]{1,6}$/.test(digits)) return { error: "bad \\u{...} escape" };
      } else {
        ({ digits, end } = hex(i + 2, next === "x" ? 2 : next === "u" ? 4 : 8));
      }
      const code = parseInt(digits, 16);
      if (!digits || code > 0x10ffff) {
        text += "\\" + next;
        i += 2;
        continue;
      }
      text += String.fromCodePoint(code);
      i = end;
    } else {
      // bash keeps an unknown escape as it is.
      text += c + next;
      i += 2;
    }
  }
  return { error: "unterminated $'...' quote" };
}
