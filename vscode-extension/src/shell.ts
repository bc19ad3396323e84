// Shell-style quoting and splitting of an argv, for showing a command and
// editing it as one line. Pure: no editor state. The same rules as the
// Neovim plugin's lua/lazaret/shell.lua (POSIX sh quoting, no expansion).

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
    if (c === "'") {
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
