--- Shell-style quoting and splitting of argv, for showing a command and
--- editing it as one line (pure Lua: no editor state).
local M = {}

--- Characters that never need quoting in a POSIX shell word.
local SAFE = '^[%w@%%+=:,./_-]+$'

--- One argument as a POSIX shell word: unchanged when it is safe, else in
--- single quotes (a quote inside becomes '\'').
--- @param word string
--- @return string
function M.quote_word(word)
  if word ~= '' and word:match(SAFE) then
    return word
  end
  return "'" .. word:gsub("'", [['\'']]) .. "'"
end

--- An argv as one line that `split` (or sh) turns back into the same argv.
--- @param argv string[]
--- @return string
function M.quote(argv)
  local words = {}
  for i, word in ipairs(argv) do
    words[i] = M.quote_word(tostring(word))
  end
  return table.concat(words, ' ')
end

--- Splits a line into words as sh does for quoting (no expansion of any
--- kind): single quotes, double quotes (where \ escapes $ ` " \ and newline),
--- backslash outside quotes. Returns nil and a message on an unfinished quote.
--- @param line string
--- @return string[]? argv
--- @return string? err
function M.split(line)
  local argv = {}
  local word, in_word = {}, false
  local i, n = 1, #line
  while i <= n do
    local c = line:sub(i, i)
    if c == "'" then
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
