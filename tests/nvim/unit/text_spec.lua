-- Unit tests of lazaret.text (agent text as inert data, DECISIONS D16) over
-- every entry of the hostile corpus (tests/hostile/strings.json), and a random
-- round trip of the shell quoting built on it (its cases: vectors_spec.lua).
local T = dofile(vim.fn.fnamemodify(arg[0], ':p:h') .. '/helper.lua')
local text = require('lazaret.text')
local shell = require('lazaret.shell')

local root = vim.fn.fnamemodify(arg[0], ':p:h:h:h:h')
local corpus = vim.json.decode(table.concat(vim.fn.readfile(root .. '/tests/hostile/strings.json'), '\n'))
local marker = '/tmp/lazaret-unit-marker'
local entries = {}
for _, entry in ipairs(corpus.entries) do
  entries[#entries + 1] = { name = entry.name, text = entry.text:rep(entry['repeat'] or 1):gsub('@MARKER@', marker) }
end

--- Every code point of the brief's unsafe set (and U+2065, default-ignorable), for the checks below.
local unsafe_ranges = {
  { 0x00, 0x1f }, { 0x7f, 0x9f }, { 0x202a, 0x202e }, { 0x2066, 0x2069 }, { 0x200e, 0x200f }, { 0x061c, 0x061c },
  { 0x00ad, 0x00ad }, { 0x034f, 0x034f }, { 0x115f, 0x1160 }, { 0x17b4, 0x17b5 }, { 0x180b, 0x180f },
  { 0x200b, 0x200d }, { 0x2060, 0x2065 }, { 0x206a, 0x206f }, { 0x3164, 0x3164 }, { 0xfe00, 0xfe0f },
  { 0xfeff, 0xfeff }, { 0xffa0, 0xffa0 }, { 0xfff9, 0xfffb }, { 0x1d173, 0x1d17a }, { 0xe0000, 0xe007f },
  { 0xe0100, 0xe01ef }, { 0x0085, 0x0085 }, { 0x00a0, 0x00a0 }, { 0x1680, 0x1680 }, { 0x2000, 0x200a },
  { 0x2028, 0x2029 }, { 0x202f, 0x202f }, { 0x205f, 0x205f }, { 0x3000, 0x3000 },
}

--- The first raw unsafe character of s (or -1 for an invalid byte), else nil.
local function raw_unsafe(s)
  local i = 1
  while i <= #s do
    local c, nxt = text.decode(s, i)
    if c == nil or text.unsafe(c) then
      return c or -1
    end
    i = nxt
  end
  return nil
end

T.test('the unsafe set is the brief\'s, and nothing printable is in it', function()
  for _, range in ipairs(unsafe_ranges) do
    for c = range[1], range[2] do
      T.ok(text.unsafe(c), string.format('U+%04X is unsafe', c))
    end
  end
  for _, c in ipairs({ 0x20, 0x41, 0x25, 0x5c, 0xe9, 0x4e2d, 0x1f600, 0x2010, 0x2030, 0x2070, 0xfffd }) do
    T.ok(not text.unsafe(c), string.format('U+%04X is printable', c))
  end
end)

T.test('inert() escapes as the CLI does and leaves plain text alone', function()
  T.eq(text.inert('src/lib.rs'), 'src/lib.rs')
  T.eq(text.inert('a\nb\tc\rd\27[2Je\\f'), 'a\\nb\\tc\\rd\\e[2Je\\\\f')
  T.eq(text.inert('x\u{202e}y\u{200b}z\u{85}\u{a0}'), 'x\\u{202e}y\\u{200b}z\\x85\\xa0')
  T.eq(text.inert('\u{e0001}\u{1d173}'), '\\u{e0001}\\u{1d173}')
  T.eq(text.inert('ünïcode 😀 中文'), 'ünïcode 😀 中文')
  T.eq(text.inert('bad\255byte'), 'bad\\xffbyte', 'an invalid UTF-8 byte')
  T.eq(text.inert(nil), '')
  T.eq(text.inert(42), '42')
end)

T.test('every corpus entry comes out inert, on one line, and buffer-safe', function()
  local buf = vim.api.nvim_create_buf(false, true)
  for _, entry in ipairs(entries) do
    local shown = text.inert(entry.text)
    T.eq(raw_unsafe(shown), nil, entry.name .. ': no raw unsafe character')
    T.ok(not shown:find('\n', 1, true), entry.name)
    T.ok(pcall(vim.api.nvim_buf_set_lines, buf, 0, -1, false, { shown }), entry.name .. ': nvim_buf_set_lines takes it')
  end
end)

T.test('statusline() doubles every %: the evaluated winbar is the text itself', function()
  local win = vim.api.nvim_get_current_win()
  for _, entry in ipairs(entries) do
    local shown = text.statusline(entry.text)
    local evaluated = vim.api.nvim_eval_statusline(shown, { winid = win, use_winbar = true, maxwidth = 1000000 }).str
    local want = text.inert(entry.text)
    if #want < 1000 then
      T.eq(evaluated, want, entry.name .. ': nothing evaluated')
    else -- the evaluation keeps only the first few KiB
      T.ok(#evaluated > 500 and vim.startswith(want, evaluated), entry.name .. ': nothing evaluated')
    end
  end
  T.ok(not vim.uv.fs_stat(marker), 'no marker')
end)

T.test('cut() keeps the start and says how much was cut, all in n cells', function()
  T.eq({ text.cut('short', 10) }, { 'short', 0 })
  local long = ('rm -rf / '):rep(4096)
  local shown, cut = text.cut(long, 60)
  T.ok(vim.fn.strdisplaywidth(shown) <= 60, shown)
  T.ok(vim.startswith(shown, 'rm -rf / rm -rf / '), shown)
  T.eq(shown, long:sub(1, #long - cut) .. ' … (cut: ' .. text.thousands(cut) .. ' more characters)')
  T.ok(cut > 36800)
  local wide, n = text.cut(('中'):rep(40), 40)
  T.ok(vim.fn.strdisplaywidth(wide) <= 40 and n > 20, wide)
  T.eq({ text.cut(('x'):rep(50), 20) }, { ('x'):rep(10) .. ' … (cut: 40 more characters)', 40 }, 'at least 10 cells are kept')
  T.eq(text.thousands(65400), '65 400')
  T.eq(text.thousands(999), '999')
end)

T.test('name() cuts a long name in the middle: its start, a note of how much was cut, and always its end (D19)', function()
  T.eq({ text.name('grant.test', 60) }, { 'grant.test', 0 })
  local long
  for _, entry in ipairs(corpus.entries) do
    if entry.name == 'long-name-registrable-tail' then
      long = entry
    end
  end
  T.ok(long and long.tail == 'x.typeahead.test' and long.network == true, 'the corpus has the long name')
  for _, cells in ipairs({ 40, 60, 80, 120, 200 }) do
    local shown, cut = text.name(long.text, cells)
    T.ok(vim.fn.strdisplaywidth(shown) <= math.max(cells, text.NAME_MIN + 30), cells .. ': ' .. shown)
    T.ok(vim.startswith(shown, 'api.'), shown)
    T.ok(vim.endswith(shown, '.' .. long.tail), cells .. ': the end shows: ' .. shown)
    T.ok(shown:find('…(' .. text.thousands(cut) .. ' characters cut)…', 1, true), shown)
    T.eq(vim.fn.strchars(shown) - vim.fn.strchars('…(' .. text.thousands(cut) .. ' characters cut)…') + cut, #long.text, 'the count is exact')
  end
  local shown = text.name(long.text, 60)
  T.eq(shown, long.text:sub(1, 12) .. '…(215 characters cut)…' .. long.text:sub(-26), 'a third of the room its start, the rest its end')
  T.eq(vim.fn.strdisplaywidth(shown), 60)
  -- Wide characters and agent text: inert, within the cells.
  local wide = text.name(('中'):rep(100) .. '.example', 60)
  T.ok(vim.fn.strdisplaywidth(wide) <= 60 and vim.endswith(wide, '中.example'), wide)
  for _, entry in ipairs(entries) do
    local s = text.name(entry.text, 80)
    T.eq(raw_unsafe(s), nil, entry.name)
    T.ok(vim.fn.strdisplaywidth(s) <= 80, entry.name .. ': ' .. s:sub(1, 60))
  end
end)

T.test('names() lists whole names, each cut in the middle, then how many more', function()
  T.eq(text.names({ 'a.test', 'b.test' }, 40), 'a.test b.test')
  T.eq(text.names({}, 40), '')
  local long = 'api.anthropic.com.' .. ('a'):rep(200) .. '.x.typeahead.test'
  local shown = text.names({ 'first.test', long, 'last.test' }, 90, 60)
  T.ok(shown:find('x.typeahead.test last.test', 1, true) and vim.startswith(shown, 'first.test api.'), shown)
  T.ok(vim.fn.strdisplaywidth(shown) <= 90, shown)
  T.eq(text.names({ 'first.test', long, 'last.test' }, 70, 60), 'first.test … and 2 more', 'a name that does not fit is not cut at its end')
  T.eq(text.names({ 'one.test', 'two.test', 'three.test', 'four.test' }, 30), 'one.test two.test … and 2 more')
end)

T.test('shell round trip with random unsafe characters', function()
  local alphabet = { 'a', 'Z', '0', ' ', "'", '"', '\\', '$', '`', '*', ';', '&', '|', '-', '=', '~', '#', '\n', '\r', '\t', '\27', '\u{85}', '\u{a0}', '\u{202e}', '\u{200b}', '\u{feff}', '%', 'é', '\u{e0001}', '\1', '\127' }
  math.randomseed(7)
  for _ = 1, 400 do
    local argv = {}
    for i = 1, math.random(1, 4) do
      local word = {}
      for j = 1, math.random(0, 8) do
        word[j] = alphabet[math.random(#alphabet)]
      end
      argv[i] = table.concat(word)
    end
    local line = shell.quote(argv)
    T.eq(raw_unsafe(line), nil, vim.inspect(line))
    T.eq(shell.split(line), argv, 'round trip of ' .. vim.inspect(argv))
  end
end)

T.finish()
