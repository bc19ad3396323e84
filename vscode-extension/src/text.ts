// Agent text as inert data on every VS Code surface (DECISIONS D16). File
// names, argv, justifications, commit messages, DNS names and request ids
// come from the sandbox. Shown raw, a bidi override reorders what the human
// reads, a newline or CR hides a part, `$(icon)` renders as an icon where VS
// Code reads codicons (status bar, quick pick, notifications, input box
// prompts) and `[x](command:...)` renders as a live command link where it
// reads links (notifications, input box prompts). Pure: no editor state.
//
// The unsafe set is the Rust side's (lazaret-core `policy::is_display_unsafe`)
// plus U+2065 (unassigned, default-ignorable: invisible), as the Neovim plugin's,
// and the escape spelling the CLI's: `\n` `\t` `\r` `\e` `\\`, `\xNN` below
// U+0100, `\u{NNNN}` above.

/** Characters never shown raw: controls, bidi controls, invisible characters, whitespace but the space. */
export function isUnsafe(code: number): boolean {
  if (code <= 0x1f || (code >= 0x7f && code <= 0x9f)) return true; // C0, DEL, C1 (\t \n \v \f \r NEL among them)
  if ((code >= 0x202a && code <= 0x202e) || (code >= 0x2066 && code <= 0x2069) || code === 0x200e || code === 0x200f || code === 0x061c) return true; // bidi
  if (
    code === 0x00ad ||
    code === 0x034f ||
    code === 0x115f ||
    code === 0x1160 ||
    code === 0x17b4 ||
    code === 0x17b5 ||
    (code >= 0x180b && code <= 0x180f) ||
    (code >= 0x200b && code <= 0x200d) ||
    (code >= 0x2060 && code <= 0x2065) ||
    (code >= 0x206a && code <= 0x206f) ||
    code === 0x3164 ||
    (code >= 0xfe00 && code <= 0xfe0f) ||
    code === 0xfeff ||
    code === 0xffa0 ||
    (code >= 0xfff9 && code <= 0xfffb) ||
    (code >= 0x1d173 && code <= 0x1d17a) ||
    (code >= 0xe0000 && code <= 0xe007f) ||
    (code >= 0xe0100 && code <= 0xe01ef)
  )
    return true; // invisible, default-ignorable
  if (code === 0x00a0 || code === 0x1680 || (code >= 0x2000 && code <= 0x200a) || code === 0x2028 || code === 0x2029 || code === 0x202f || code === 0x205f || code === 0x3000) return true; // whitespace but the space
  // Lone surrogates are not text: shown escaped too.
  return code >= 0xd800 && code <= 0xdfff;
}

/** Whether `text` holds a character of the unsafe set. */
export function hasUnsafe(text: string): boolean {
  for (const ch of text) if (isUnsafe(ch.codePointAt(0)!)) return true;
  return false;
}

/** One character as the CLI spells it escaped. */
export function escapeChar(ch: string): string {
  const code = ch.codePointAt(0)!;
  switch (code) {
    case 0x0a:
      return "\\n";
    case 0x09:
      return "\\t";
    case 0x0d:
      return "\\r";
    case 0x1b:
      return "\\e";
    case 0x5c:
      return "\\\\";
  }
  return code < 0x100 ? `\\x${code.toString(16).padStart(2, "0")}` : `\\u{${code.toString(16).padStart(4, "0")}}`;
}

/**
 * One line of agent text, inert: every unsafe character escaped, and the
 * backslash too (so that `\n` on screen always means an escaped newline).
 */
export function inert(text: string | null | undefined): string {
  let out = "";
  for (const ch of String(text ?? "")) out += isUnsafe(ch.codePointAt(0)!) || ch === "\\" ? escapeChar(ch) : ch;
  return out;
}

/**
 * Text that is escaped already (the coordinator's `display`, shell syntax
 * whose backslashes mean something): only unsafe characters are escaped,
 * should any have slipped through. Also for log lines (JSON).
 */
export function escapeUnsafe(text: string | null | undefined): string {
  let out = "";
  for (const ch of String(text ?? "")) out += isUnsafe(ch.codePointAt(0)!) ? escapeChar(ch) : ch;
  return out;
}

/** `$(name)` would render as an icon where VS Code reads codicons: `\$(` renders as the text `$(`. */
export function noIcons(text: string): string {
  return text.replace(/\$\(/g, "\\$(");
}

/**
 * For surfaces that render `[label](command:...)` as a link (notifications,
 * input box prompts and validation messages, which also read codicons):
 * escaped, no `$(`, and no `](` left for a link to start from. Better still,
 * keep agent text out of them (point at the view).
 */
export function noLinks(text: string): string {
  return noIcons(text).replace(/\]\(/g, "]\\(");
}

/** A notification's text built from anything not written by us (a coordinator's error message, a path). */
export function notice(text: string | null | undefined, max = 300): string {
  return noLinks(clip(text, max));
}

/** How a cut text says what it left out. */
export function cutNote(more: number): string {
  return ` … (cut: ${more.toLocaleString("en-US")} more character${more === 1 ? "" : "s"})`;
}

export interface Clipped {
  /** The start of the text, escaped as `escape` does, at most `max` characters. */
  text: string;
  /** Characters of the original left out (0: nothing was cut). */
  more: number;
}

/**
 * The start of `text`, escaped, at most `max` characters, never cutting an
 * escape in half; `more` counts the characters (code points) of the
 * original that did not fit.
 */
export function clipParts(text: string | null | undefined, max: number, escape: (ch: string) => string = (ch) => inert(ch)): Clipped {
  const chars = [...String(text ?? "")];
  let out = "";
  for (let i = 0; i < chars.length; i++) {
    const piece = escape(chars[i]);
    if (out.length + piece.length > max) return { text: out, more: chars.length - i };
    out += piece;
  }
  return { text: out, more: 0 };
}

/** `text` inert and cut to about `max` characters, saying how much was cut. */
export function clip(text: string | null | undefined, max: number): string {
  const c = clipParts(text, max);
  return c.more ? c.text + cutNote(c.more) : c.text;
}

/** An escaped display (shell syntax) cut to about `max` characters, saying how much was cut. */
export function clipDisplay(display: string, max: number): string {
  const c = clipParts(display, max, escapeUnsafe);
  return c.more ? c.text + cutNote(c.more) : c.text;
}

export interface MiddleCut {
  /** The start and the end of the text, escaped, with `mark(more)` between them when something was cut. */
  text: string;
  /** Characters (code points) of the original left out (0: nothing was cut). */
  more: number;
}

/** How a middle cut says what it left out, as the CLI and the Neovim plugin write it. */
export function middleNote(more: number): string {
  return `…(${more.toLocaleString("en-US")} character${more === 1 ? "" : "s"} cut)…`;
}

/**
 * `text` escaped (each character as `escape` spells it), cut in the middle
 * when longer than `max` characters: its start (`headShare` of the room) and
 * its end (the rest), with `mark(more)` between them; at least `minRoom`
 * characters of the text are kept, so the result may pass `max` by the
 * mark when `max` is small. Never cuts an escape in half.
 */
export function clipMiddleParts(
  text: string | null | undefined,
  max: number,
  { escape = (ch: string) => inert(ch), headShare = 1 / 3, mark = middleNote, minRoom = 30 }: { escape?: (ch: string) => string; headShare?: number; mark?: (more: number) => string; minRoom?: number } = {},
): MiddleCut {
  const pieces = [...String(text ?? "")].map(escape);
  const total = pieces.reduce((n, p) => n + p.length, 0);
  if (total <= max) return { text: pieces.join(""), more: 0 };
  // The mark's longest form (everything cut) bounds the room it takes.
  const room = Math.max(minRoom, max - mark(pieces.length).length);
  const headRoom = Math.floor(room * headShare);
  const tailRoom = room - headRoom;
  let head = "";
  let h = 0;
  while (h < pieces.length && head.length + pieces[h].length <= headRoom) head += pieces[h++];
  let tail = "";
  let t = pieces.length;
  while (t > h && tail.length + pieces[t - 1].length <= tailRoom) tail = pieces[--t] + tail;
  const more = t - h;
  return { text: head + mark(more) + tail, more };
}

/** How long a DNS name or address is shown where one line must hold it (tree rows, quick picks, titles). */
export const NAME_MAX = 56;
/** How long where the text wraps (tooltips, modals). */
export const NAME_LONG = 120;

/**
 * A destination (a DNS name, an address) as every surface shows it
 * (DECISIONS D19): inert, and when longer than `max`, cut in the middle as
 * the CLI and the Neovim plugin cut it: a third of the room for its start,
 * the rest for its end, which decides who controls the name
 * (`api.anthropic.c…(197 characters cut)…aaaa.x.typeahead.test`).
 */
export function clipName(name: string | null | undefined, max: number = NAME_MAX): string {
  return clipMiddleParts(name, max).text;
}

/**
 * An escaped display (shell syntax) cut in the middle to about `max`
 * characters: the program and the start of its argv, and its end (the last
 * words), with how much was cut between them. For confirmations, where what
 * runs must be seen at both ends.
 */
export function clipDisplayMiddle(display: string, max: number): string {
  return clipMiddleParts(display, max, { escape: escapeUnsafe, headShare: 0.6, mark: (more) => ` ${middleNote(more)} ` }).text;
}
