--- Agent text as inert data (DECISIONS D16). File names, argv, justifications,
--- reasons, DNS names and error messages that quote them come from the
--- sandbox; every surface of the plugin shows them through this module:
---   inert(s)       escapes every control, bidi, invisible and non-space
---                  whitespace character (the set the CLI escapes), so no
---                  newline survives (nvim_buf_set_lines throws on one) and
---                  nothing can reorder, hide or overwrite what the user reads;
---   statusline(s)  inert and `%` doubled: for 'winbar'/'statusline' and
---                  anything else with statusline syntax, where `%{expr}` is
---                  evaluated (the winbar of the review ran agent code);
---   cut(s, n)      the start of s and how much was cut;
---   name(s, n)     a name or address (DNS names, destinations, grants):
---                  inert and cut in the middle, its end always shown
---                  (DECISIONS D19: the end decides who controls a name);
---   names(l, n)    a list of names, each through name(), whole names only.
--- Pure Lua (vim.fn only for display widths): no editor state.
local M = {}

--- Whether a code point must never reach a surface as it is.
--- @param c integer
--- @return boolean
function M.unsafe(c)
  if c < 0x20 or (c >= 0x7f and c <= 0x9f) then
    return true -- C0, DEL, C1 (NEL U+0085 included)
  end
  if c < 0xa0 then
    return false
  end
  if c == 0xa0 or c == 0xad or c == 0x34f or c == 0x61c or c == 0x115f or c == 0x1160 or c == 0x1680 then
    return true
  end
  if c == 0x17b4 or c == 0x17b5 or (c >= 0x180b and c <= 0x180f) then
    return true
  end
  if c >= 0x2000 and c <= 0x200f then
    return true -- spaces U+2000-200A, zero-width U+200B-200D, marks U+200E/F
  end
  if (c >= 0x2028 and c <= 0x202f) or c == 0x205f then
    return true -- line/paragraph separators, embeddings/overrides, narrow nbsp
  end
  if c >= 0x2060 and c <= 0x206f then
    return true -- word joiner, invisible operators, isolates, deprecated formats
  end
  if c == 0x3000 or c == 0x3164 or (c >= 0xfe00 and c <= 0xfe0f) or c == 0xfeff or c == 0xffa0 then
    return true
  end
  if (c >= 0xfff9 and c <= 0xfffb) or (c >= 0x1d173 and c <= 0x1d17a) then
    return true
  end
  if (c >= 0xe0000 and c <= 0xe007f) or (c >= 0xe0100 and c <= 0xe01ef) then
    return true
  end
  return false
end

local named = { [0x0a] = '\\n', [0x09] = '\\t', [0x0d] = '\\r', [0x1b] = '\\e', [0x5c] = '\\\\' }

--- The escaped spelling of one code point (as the CLI writes it).
local function escape(c)
  if named[c] then
    return named[c]
  end
  if c < 0x100 then
    return string.format('\\x%02x', c)
  end
  return string.format('\\u{%04x}', c)
end

--- Decodes the UTF-8 sequence at byte i: code point and next index, or nil
--- (an invalid byte) and i + 1.
local function decode(s, i)
  local b = s:byte(i)
  if b < 0x80 then
    return b, i + 1
  end
  local n, c
  if b >= 0xc2 and b <= 0xdf then
    n, c = 1, b - 0xc0
  elseif b >= 0xe0 and b <= 0xef then
    n, c = 2, b - 0xe0
  elseif b >= 0xf0 and b <= 0xf4 then
    n, c = 3, b - 0xf0
  else
    return nil, i + 1
  end
  for k = 1, n do
    local nb = s:byte(i + k)
    if not nb or nb < 0x80 or nb > 0xbf then
      return nil, i + 1
    end
    c = c * 64 + (nb - 0x80)
  end
  if (n == 2 and c < 0x800) or (n == 3 and (c < 0x10000 or c > 0x10ffff)) or (c >= 0xd800 and c <= 0xdfff) then
    return nil, i + 1
  end
  return c, i + n + 1
end
M.decode = decode

--- Agent text as one inert line: unsafe characters (and the backslash, so
--- the escapes cannot be forged) written as `\n`, `\t`, `\r`, `\e`, `\\`,
--- `\xNN` (below U+0100; an invalid UTF-8 byte too) or `\u{NNNN}`.
--- @param s any a string (other values: tostring; nil: '')
--- @return string
function M.inert(s)
  if s == nil or s == vim.NIL then
    return ''
  end
  s = type(s) == 'string' and s or tostring(s)
  -- The common case: printable ASCII without a backslash.
  if not s:find('[%z\1-\31\92\127-\255]') then
    return s
  end
  local out, i, n = {}, 1, #s
  local start = 1
  while i <= n do
    local c, nxt = decode(s, i)
    local bad = c == nil or c == 0x5c or M.unsafe(c)
    if bad then
      if start < i then
        out[#out + 1] = s:sub(start, i - 1)
      end
      out[#out + 1] = c and escape(c) or string.format('\\x%02x', s:byte(i))
      start = nxt
    end
    i = nxt
  end
  if start <= n then
    out[#out + 1] = s:sub(start)
  end
  return table.concat(out)
end

--- Whether `s` is UTF-8 text whose every character passes `ok`.
local function every_char(s, ok)
  local i, n = 1, #s
  while i <= n do
    local c, nxt = decode(s, i)
    if c == nil or not ok(c) then
      return false
    end
    i = nxt
  end
  return true
end

--- Whether `s` holds no unsafe character (what inert() leaves).
--- @param s string
--- @return boolean
function M.is_inert(s)
  return every_char(s, function(c)
    return not M.unsafe(c)
  end)
end

--- Whether `s` is UTF-8 text.
--- @param s string
--- @return boolean
function M.is_utf8(s)
  return every_char(s, function()
    return true
  end)
end

--- Agent text for statusline syntax ('winbar', 'statusline', 'tabline',
--- 'titlestring', a statusline component): inert, then every `%` doubled so
--- no `%{}`, `%!`, `%#group#` or `%=` item can form.
--- @param s any
--- @return string
function M.statusline(s)
  return (M.inert(s):gsub('%%', '%%%%'))
end

--- Multi-line agent text (git's output, a policy): each line inert, joined
--- with newlines (for vim.notify, which shows them as lines).
--- @param s any
--- @return string
function M.lines(s)
  if s == nil or s == vim.NIL then
    return ''
  end
  local parts = vim.split(type(s) == 'string' and s or tostring(s), '\n', { plain = true })
  for i, part in ipairs(parts) do
    parts[i] = M.inert(part)
  end
  return table.concat(parts, '\n')
end

--- `s` when it fits in `n` display cells; else its start and a note saying
--- how many characters were cut, the two together in `n` cells (at least
--- 10 cells of text are kept): `rm -rf / rm … (cut: 36 850 more characters)`.
--- `s` should be inert already (cut counts the characters that are shown).
--- @param s string
--- @param n integer display cells
--- @return string text
--- @return integer cut characters cut (0: s fits)
function M.cut(s, n)
  s = s or ''
  n = math.max(1, n)
  if #s <= n or vim.fn.strdisplaywidth(s) <= n then
    return s, 0
  end
  local total = vim.fn.strchars(s)
  local function note(cut)
    return string.format(' … (cut: %s more character%s)', M.thousands(cut), cut == 1 and '' or 's')
  end
  -- The note's width depends on the count, the count on the kept part.
  local cells = math.max(10, n - vim.fn.strdisplaywidth(note(total)))
  local kept = vim.fn.strcharpart(s, 0, cells)
  while kept ~= '' and vim.fn.strdisplaywidth(kept) > cells do
    kept = vim.fn.strcharpart(kept, 0, vim.fn.strchars(kept) - 1)
  end
  local cut = total - vim.fn.strchars(kept)
  return kept .. note(cut), cut
end

--- The first `cells` display cells of `s` (whole characters).
local function head(s, cells)
  local kept = vim.fn.strcharpart(s, 0, cells)
  while kept ~= '' and vim.fn.strdisplaywidth(kept) > cells do
    kept = vim.fn.strcharpart(kept, 0, vim.fn.strchars(kept) - 1)
  end
  return kept
end

--- The last `cells` display cells of `s` (whole characters).
local function tail(s, cells)
  local total = vim.fn.strchars(s)
  local kept = vim.fn.strcharpart(s, math.max(0, total - cells))
  while kept ~= '' and vim.fn.strdisplaywidth(kept) > cells do
    kept = vim.fn.strcharpart(kept, 1)
  end
  return kept
end

--- The fewest cells name() keeps of a name (a third its start, the rest its end).
M.NAME_MIN = 30

--- A name or an address (agent text: a DNS name the sandbox asked for, a
--- destination, a grant) as one inert line of at most `n` display cells
--- (at least NAME_MIN cells of it are kept): when it is longer, its start
--- (a third) and its end (the rest) with a note of how many characters were
--- left out between them, as the CLI writes it:
--- `api.anthropic.com.aaaaa…(190 characters cut)…aaaa.x.typeahead.test`.
--- The end of a name is what decides who controls it (DECISIONS D19): it is
--- never the part cut. Every surface that shows a name uses this.
--- @param s any
--- @param n integer display cells
--- @return string text
--- @return integer cut characters cut (0: it fits)
function M.name(s, n)
  s = M.inert(s)
  n = math.max(1, n)
  if #s <= n or vim.fn.strdisplaywidth(s) <= n then
    return s, 0
  end
  local total = vim.fn.strchars(s)
  local function note(cut)
    return string.format('…(%s characters cut)…', M.thousands(cut))
  end
  local room = math.max(M.NAME_MIN, n - vim.fn.strdisplaywidth(note(total)))
  local start = head(s, math.floor(room / 3))
  local finish = tail(s, room - vim.fn.strdisplaywidth(start))
  local cut = total - vim.fn.strchars(start) - vim.fn.strchars(finish)
  return start .. note(cut) .. finish, cut
end

--- Names (or addresses) as one inert line of at most `n` cells: each name
--- through name() (at most `each` cells, default 60), separated by spaces;
--- when they do not all fit, whole names only, then `… and N more` (a name
--- is never cut at its end).
--- @param list any[]
--- @param n integer display cells
--- @param each integer? cells of one name
--- @return string
function M.names(list, n, each)
  list = type(list) == 'table' and list or {}
  local out, used = {}, 0
  for i, value in ipairs(list) do
    local shown = M.name(value, math.min(each or 60, n))
    local more = string.format('… and %d more', #list - i + 1)
    local width = vim.fn.strdisplaywidth(shown) + (i > 1 and 1 or 0)
    local rest = i < #list and (vim.fn.strdisplaywidth(more) + 1) or 0
    if i > 1 and used + width + rest > n then
      out[#out + 1] = more
      break
    end
    out[#out + 1] = shown
    used = used + width
  end
  return table.concat(out, ' ')
end

--- Inert text in lines of at most `n` display cells, broken at spaces (a
--- longer word is broken anywhere): for the plugin's own messages, which
--- are read whole.
--- @param s string
--- @param n integer
--- @return string[]
function M.wrap(s, n)
  n = math.max(10, n)
  local lines, line = {}, ''
  local function push_word(word)
    while vim.fn.strdisplaywidth(word) > n do
      local part = vim.fn.strcharpart(word, 0, n)
      while vim.fn.strdisplaywidth(part) > n do
        part = vim.fn.strcharpart(part, 0, vim.fn.strchars(part) - 1)
      end
      lines[#lines + 1] = part
      word = vim.fn.strcharpart(word, vim.fn.strchars(part))
    end
    return word
  end
  for word in s:gmatch('%S+') do
    local candidate = line == '' and word or (line .. ' ' .. word)
    if vim.fn.strdisplaywidth(candidate) <= n then
      line = candidate
    else
      if line ~= '' then
        lines[#lines + 1] = line
      end
      line = push_word(word)
    end
  end
  if line ~= '' or #lines == 0 then
    lines[#lines + 1] = line
  end
  return lines
end

--- 65400 -> `65 400` (a plain space: the text stays inert).
--- @param n integer
--- @return string
function M.thousands(n)
  local s = tostring(n)
  local out = s:reverse():gsub('(%d%d%d)', '%1 '):reverse()
  return vim.trim(out)
end

return M
