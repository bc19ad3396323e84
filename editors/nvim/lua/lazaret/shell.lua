--- Shell-style quoting and splitting of argv, for showing a command and
--- editing it as one line (pure Lua: no editor state). A word holding a
--- control, bidi, invisible or unusual whitespace character is written in
--- bash's `$'...'` form with those characters escaped (`$'a\eb'`,
--- `$'\u202E'`), as the coordinator's `display` and the CLI write it: the
--- line is inert text, and `split` reads the form back, so an argv shown
--- for editing comes back unchanged when the user keeps it.
local text = require('lazaret.text')

local M = {}

--- Characters that never need quoting in a POSIX shell word.
local SAFE = '^[%w@%%+=:,./_-]+$'

--- One unsafe character (or the quote or backslash) inside `$'...'`.
local function ansi_c_escape(c)
  if c == 0x5c then
    return '\\\\'
  elseif c == 0x27 then
    return "\\'"
  elseif c == 0x0a then
    return '\\n'
  elseif c == 0x0d then
    return '\\r'
  elseif c == 0x09 then
    return '\\t'
  elseif c == 0x1b then
    return '\\e'
  elseif c <= 0xff then
    return string.format('\\x%02X', c)
  elseif c <= 0xffff then
    return string.format('\\u%04X', c)
  end
  return string.format('\\U%08X', c)
end

--- One argument as a shell word: unchanged when it is safe, in single
--- quotes (a quote inside becomes '\'') when it holds only printable
--- characters, else in `$'...'` with every unsafe character escaped.
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
    if c == nil then
      out[#out + 1] = string.format('\\x%02X', word:byte(i))
    elseif c == 0x5c or c == 0x27 or text.unsafe(c) then
      out[#out + 1] = ansi_c_escape(c)
    else
      out[#out + 1] = word:sub(i, nxt - 1)
    end
    i = nxt
  end
  out[#out + 1] = "'"
  return table.concat(out)
end

--- An argv as one inert line that `split` turns back into the same argv
--- (and bash too, but for `\xNN` above 7F: see `split`).
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

local simple_escapes = { a = '\a', b = '\b', e = '\27', E = '\27', f = '\f', n = '\n', r = '\r', t = '\t', v = '\v' }

--- Reads a `$'...'` word body starting after the opening quote at `i`:
--- bash's escapes (`\n \t \r \e \a \b \f \v \\ \' \" \? \NNN`
--- octal, `\xHH`, `\uHHHH`, `\UHHHHHHHH`). `\xHH` gives the character
--- U+00HH (bash gives the raw byte; an argv is UTF-8 text, and this is how
--- the coordinator's display writes C1 controls such as `\x85`).
--- @return string? text
--- @return integer|string next index, or the error
local function ansi_c(line, i)
  local out, n = {}, #line
  while i <= n do
    local c = line:sub(i, i)
    if c == "'" then
      return table.concat(out), i + 1
    elseif c == '\\' then
      local e = line:sub(i + 1, i + 1)
      if e == '' then
        break
      end
      if simple_escapes[e] then
        out[#out + 1] = simple_escapes[e]
        i = i + 2
      elseif e == 'x' or e == 'u' or e == 'U' then
        local max = e == 'x' and 2 or e == 'u' and 4 or 8
        local digits = line:sub(i + 2, i + 1 + max):match('^%x+')
        if not digits then
          out[#out + 1] = '\\' .. e
          i = i + 2
        else
          local value = tonumber(digits, 16)
          if value > 0x10ffff or (value >= 0xd800 and value <= 0xdfff) then
            return nil, string.format('\\%s%s is not a character', e, digits)
          end
          out[#out + 1] = utf8_char(value)
          i = i + 2 + #digits
        end
      elseif e:match('[0-7]') then
        local digits = line:sub(i + 1, i + 3):match('^[0-7]+')
        out[#out + 1] = utf8_char(tonumber(digits, 8) % 256)
        i = i + 1 + #digits
      elseif e == '\\' or e == "'" or e == '"' or e == '?' then
        out[#out + 1] = e
        i = i + 2
      else
        out[#out + 1] = '\\' .. e
        i = i + 2
      end
    else
      out[#out + 1] = c
      i = i + 1
    end
  end
  return nil, "unterminated $' quote"
end

--- Splits a line into words as sh does for quoting (no expansion of any
--- kind): single quotes, double quotes (where \ escapes $ ` " \ and newline),
--- bash's `$'...'` (see `ansi_c`), backslash outside quotes. Returns nil and
--- a message on an unfinished quote.
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
          word[#word + 1] = line:sub(i + 1, i + 1)
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
    elseif c:match('%s') then
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
