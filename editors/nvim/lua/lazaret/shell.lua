--- Shell quoting and splitting of argv, for showing a command and editing it
--- as one line (pure Lua: no editor state). The same rules as the VS Code
--- extension's src/shell.ts; tests/vectors/quoting.json holds the cases both
--- editors' tests run.
---
--- `quote` writes a line that a POSIX shell reads back as exactly the argv,
--- and that shows no unsafe character (text.unsafe): a word of safe
--- characters stays bare, a word without unsafe characters goes in single
--- quotes, any other in `$'...'` (POSIX.1-2024, bash, busybox ash, ...) with
--- `\\` `\'` `\n` `\t` `\r` and every other unsafe character (or byte that is
--- not UTF-8) as `\xHH` bytes: a shell reads bytes back the same in every
--- locale (bash's `\x85` is the byte 85, not U+0085, and its `\u202E`
--- depends on the locale). `split` reads sh quoting without expansion of any
--- kind, plus `$'...'` with bash's escapes.
local text = require('lazaret.text')

local M = {}

--- Characters that never need quoting in a POSIX shell word.
local SAFE = '^[%w@%%+=:,./_-]+$'

local named = { [0x5c] = '\\\\', [0x27] = "\\'", [0x0a] = '\\n', [0x09] = '\\t', [0x0d] = '\\r' }

--- Bytes as `\xHH` escapes.
local function hex_bytes(s)
  return (s:gsub('.', function(b)
    return string.format('\\x%02X', b:byte())
  end))
end

--- One argument as a shell word that shows no unsafe character.
--- @param word string
--- @return string
function M.quote_word(word)
  if word ~= '' and word:match(SAFE) then
    return word
  end
  if text.is_inert(word) then
    return "'" .. word:gsub("'", [['\'']]) .. "'"
  end
  local out, i, n = { "$'" }, 1, #word
  while i <= n do
    local c, nxt = text.decode(word, i)
    local raw = word:sub(i, nxt - 1)
    if c and named[c] then
      out[#out + 1] = named[c]
    elseif c == nil or text.unsafe(c) then
      out[#out + 1] = hex_bytes(raw)
    else
      out[#out + 1] = raw
    end
    i = nxt
  end
  out[#out + 1] = "'"
  return table.concat(out)
end

--- An argv as one inert line, the program first, that `split` (or a shell)
--- turns back into the same argv.
--- @param argv string[]
--- @return string
function M.quote(argv)
  local words = {}
  for i, word in ipairs(argv) do
    words[i] = M.quote_word(tostring(word))
  end
  return table.concat(words, ' ')
end

--- The UTF-8 encoding of a code point.
local function utf8_char(c)
  if c < 0x80 then
    return string.char(c)
  elseif c < 0x800 then
    return string.char(0xc0 + math.floor(c / 0x40), 0x80 + c % 0x40)
  elseif c < 0x10000 then
    return string.char(0xe0 + math.floor(c / 0x1000), 0x80 + math.floor(c / 0x40) % 0x40, 0x80 + c % 0x40)
  end
  return string.char(
    0xf0 + math.floor(c / 0x40000),
    0x80 + math.floor(c / 0x1000) % 0x40,
    0x80 + math.floor(c / 0x40) % 0x40,
    0x80 + c % 0x40
  )
end

local simple_escapes = {
  a = '\a',
  b = '\b',
  e = '\27',
  E = '\27',
  f = '\f',
  n = '\n',
  r = '\r',
  t = '\t',
  v = '\v',
  ['\\'] = '\\',
  ["'"] = "'",
  ['"'] = '"',
  ['?'] = '?',
}

--- Reads a `$'...'` body starting after the opening quote at `i`, as bash
--- does: `\xHH` and `\NNN` are bytes, `\uHHHH` and `\UHHHHHHHH` characters,
--- `\cX` a control character, an unknown escape stays as written. The whole
--- must be UTF-8 text without NUL (an argument can hold neither).
--- @return string? text
--- @return integer|string next index, or the error
local function ansi_c(line, i)
  local out, n = {}, #line
  while i <= n do
    local c = line:sub(i, i)
    if c == "'" then
      local s = table.concat(out)
      if s:find('%z') then
        return nil, 'an argument cannot hold a NUL character'
      elseif not text.is_utf8(s) then
        return nil, "$'...' escapes that are not UTF-8 text"
      end
      return s, i + 1
    elseif c ~= '\\' then
      out[#out + 1] = c
      i = i + 1
    else
      local e = line:sub(i + 1, i + 1)
      if e == '' then
        break
      end
      if simple_escapes[e] then
        out[#out + 1] = simple_escapes[e]
        i = i + 2
      elseif e:match('[0-7]') then
        local digits = line:sub(i + 1, i + 3):match('^[0-7]+')
        out[#out + 1] = string.char(tonumber(digits, 8) % 256)
        i = i + 1 + #digits
      elseif e == 'x' or e == 'u' or e == 'U' then
        local max = e == 'x' and 2 or e == 'u' and 4 or 8
        local digits = line:sub(i + 2, i + 1 + max):match('^%x+')
        if not digits then
          out[#out + 1] = '\\' .. e
          i = i + 2
        else
          local value = tonumber(digits, 16)
          if e == 'x' then
            out[#out + 1] = string.char(value)
          elseif value > 0x10ffff or (value >= 0xd800 and value <= 0xdfff) then
            return nil, string.format('\\%s%s is not a character', e, digits)
          else
            out[#out + 1] = utf8_char(value)
          end
          i = i + 2 + #digits
        end
      elseif e == 'c' then
        local x = line:byte(i + 2)
        if not x then
          break
        elseif x > 0x7f then
          return nil, '\\c before a non-ASCII character'
        end
        out[#out + 1] = string.char(x == 0x3f and 0x7f or x % 0x20)
        -- bash reads `\c\\` as one control character.
        i = i + ((x == 0x5c and line:sub(i + 3, i + 3) == '\\') and 4 or 3)
      else
        out[#out + 1] = c
        i = i + 1
      end
    end
  end
  return nil, "unterminated $'...' quote"
end

--- Only these separate words (as in sh: not CR, VT, FF or Unicode spaces).
local blank = { [' '] = true, ['\t'] = true, ['\n'] = true }

--- Splits a line into words as sh does for quoting (no expansion of any
--- kind): single quotes, double quotes (where \ escapes $ ` " \ and removes
--- a newline), bash's `$'...'` (see `ansi_c`), backslash outside quotes.
--- Returns nil and a message on an unfinished quote or a `$'...'` that is
--- not an argument.
--- @param line string
--- @return string[]? argv
--- @return string? err
function M.split(line)
  local argv = {}
  local word, in_word = {}, false
  local i, n = 1, #line
  while i <= n do
    local c = line:sub(i, i)
    if c == '$' and line:sub(i + 1, i + 1) == "'" then
      local part, nxt = ansi_c(line, i + 2)
      if not part then
        return nil, nxt
      end
      word[#word + 1] = part
      in_word, i = true, nxt
    elseif c == "'" then
      local close = line:find("'", i + 1, true)
      if not close then
        return nil, 'unterminated single quote'
      end
      word[#word + 1] = line:sub(i + 1, close - 1)
      in_word, i = true, close + 1
    elseif c == '"' then
      in_word, i = true, i + 1
      while true do
        if i > n then
          return nil, 'unterminated double quote'
        end
        local d = line:sub(i, i)
        if d == '"' then
          i = i + 1
          break
        elseif d == '\\' and i < n and line:sub(i + 1, i + 1):match('[$`"\\\n]') then
          if line:sub(i + 1, i + 1) ~= '\n' then
            word[#word + 1] = line:sub(i + 1, i + 1)
          end
          i = i + 2
        else
          word[#word + 1] = d
          i = i + 1
        end
      end
    elseif c == '\\' then
      if i == n then
        return nil, 'trailing backslash'
      end
      local nxt = line:sub(i + 1, i + 1)
      if nxt ~= '\n' then
        word[#word + 1] = nxt
        in_word = true
      end
      i = i + 2
    elseif blank[c] then
      if in_word then
        argv[#argv + 1] = table.concat(word)
        word, in_word = {}, false
      end
      i = i + 1
    else
      word[#word + 1] = c
      in_word, i = true, i + 1
    end
  end
  if in_word then
    argv[#argv + 1] = table.concat(word)
  end
  return argv
end

return M
