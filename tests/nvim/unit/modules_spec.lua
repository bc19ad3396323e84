-- Unit tests of the plugin's module graph (issue 46): no module requires one
-- that requires it back. The graph is read from the files (every *.lua under
-- editors/nvim/lua and editors/nvim/plugin), so modules that are added, split
-- or renamed are followed without a list to keep. Rules:
--   * a module's name is its path under lua/ (`lazaret/init.lua` is
--     `lazaret`, `lazaret/x.lua` is `lazaret.x`); a plugin/ file is a node
--     named by its path, which nothing can require;
--   * an edge is any `require('lazaret...')` (also `require "..."`), at the
--     top of a file or inside a function (a lazy require closes a circle
--     just the same), outside comments and outside other strings;
--   * a circle is a path of edges back to where it started.
-- The Rust crates hold the same rule in crates/lazaret-core/tests/module_circles.rs
-- and the VS Code extension in vscode-extension/test/unit/imports.test.ts.
local T = dofile(vim.fn.fnamemodify(arg[0], ':p:h') .. '/helper.lua')
local root = vim.fn.fnamemodify(arg[0], ':p:h:h:h:h') .. '/editors/nvim'

--- The modules `source` requires, in order, ignoring comments and the
--- contents of strings that are not a require's argument.
local function requires(source)
  local found = {}
  local at, n = 1, #source
  local last_word, last_word_end = nil, 0
  -- The closing bracket of a long bracket opening at `i` (`[[`, `[==[`), or nil.
  local function long_close(i)
    local eqs = source:match('^%[(=*)%[', i)
    return eqs and (']' .. eqs .. ']') or nil, eqs and (#eqs + 2) or 0
  end
  while at <= n do
    local c = source:sub(at, at)
    if source:sub(at, at + 1) == '--' then
      local close, open_len = long_close(at + 2)
      if close then
        local stop = source:find(close, at + 2 + open_len, true)
        at = stop and stop + #close or n + 1
      else
        local stop = source:find('\n', at, true)
        at = stop and stop + 1 or n + 1
      end
    elseif c == '"' or c == "'" then
      local i, value = at + 1, {}
      while i <= n do
        local d = source:sub(i, i)
        if d == '\\' then
          value[#value + 1] = source:sub(i, i + 1)
          i = i + 2
        elseif d == c or d == '\n' then
          break
        else
          value[#value + 1] = d
          i = i + 1
        end
      end
      local between = source:sub(last_word_end + 1, at - 1)
      if last_word == 'require' and between:match('^%s*%(?%s*$') then
        found[#found + 1] = table.concat(value)
      end
      last_word = nil
      at = i + 1
    elseif c == '[' and long_close(at) then
      local close, open_len = long_close(at)
      local stop = source:find(close, at + open_len, true)
      at = stop and stop + #close or n + 1
      last_word = nil
    elseif c:match('[%a_]') then
      local word = source:match('^[%w_]+', at)
      -- `x.require(...)` or `x:require` is some other function.
      local before = source:sub(at - 1, at - 1)
      last_word = (before ~= '.' and before ~= ':') and word or nil
      at = at + #word
      last_word_end = at - 1
    else
      if not c:match('[%s(]') then
        last_word = nil
      end
      at = at + 1
    end
  end
  return found
end

--- Every plugin file: { name = module or path, requires = { modules } }.
local function graph(dir)
  local nodes = {}
  for _, file in ipairs(vim.fn.globpath(dir, '**/*.lua', false, true)) do
    local relative = file:sub(#dir + 2)
    local name = relative
    if relative:match('^lua/') then
      name = relative:gsub('^lua/', ''):gsub('%.lua$', ''):gsub('/init$', ''):gsub('/', '.')
    end
    local edges = {}
    for _, required in ipairs(requires(table.concat(vim.fn.readfile(file), '\n'))) do
      if required == 'lazaret' or required:match('^lazaret%.') then
        edges[#edges + 1] = required
      end
    end
    nodes[name] = edges
  end
  return nodes
end

--- The first circle found, as module names from its start back to it, or nil.
local function circle(nodes)
  local state = {}
  local function visit(node, trail)
    if state[node] == 'done' then
      return nil
    end
    if state[node] == 'open' then
      local from = vim.fn.index(trail, node) + 1
      local path = vim.list_slice(trail, from)
      path[#path + 1] = node
      return path
    end
    state[node] = 'open'
    trail[#trail + 1] = node
    for _, next in ipairs(nodes[node] or {}) do
      local found = visit(next, trail)
      if found then
        return found
      end
    end
    trail[#trail] = nil
    state[node] = 'done'
    return nil
  end
  local names = vim.tbl_keys(nodes)
  table.sort(names)
  for _, name in ipairs(names) do
    local found = visit(name, {})
    if found then
      return found
    end
  end
  return nil
end

T.test('no module requires one that requires it back', function()
  local nodes = graph(root)
  T.ok(vim.tbl_count(nodes) > 15, 'read the plugin: ' .. vim.tbl_count(nodes) .. ' files under ' .. root)
  T.ok(vim.tbl_contains(nodes['lazaret.approvals'] or {}, 'lazaret.domains'), 'requires are read')
  T.ok(vim.tbl_contains(nodes['lazaret'] or {}, 'lazaret.approvals'), 'lazy requires are read')
  local found = circle(nodes)
  T.eq(found and table.concat(found, ' -> '), nil)
end)

T.test('a circle through a lazy require is found', function()
  local dir = vim.fn.tempname()
  vim.fn.mkdir(dir .. '/lua/lazaret', 'p')
  vim.fn.writefile({ "local b = require('lazaret.b')" }, dir .. '/lua/lazaret/a.lua')
  vim.fn.writefile({ 'local M = {}', 'function M.f()', '  return require "lazaret.a".g()', 'end', 'return M' }, dir .. '/lua/lazaret/b.lua')
  vim.fn.writefile({ "require('lazaret.a')" }, dir .. '/lua/lazaret/init.lua')
  T.eq(circle(graph(dir)), { 'lazaret.a', 'lazaret.b', 'lazaret.a' })
end)

T.test('requires in comments and strings are not edges; other modules are not followed', function()
  local source = table.concat({
    "-- require('lazaret.commented')",
    "--[[ require('lazaret.block') ]]",
    "local s = \"require('lazaret.in_string')\"",
    "local l = [==[ require('lazaret.long') ]==]",
    "local n = vim.require('lazaret.method')",
    "local x = '--'; local y = require('lazaret.after_dashes')",
    "local z = require 'lazaret.bare'",
    "local t = require(\"lazaret.double\")",
  }, '\n')
  T.eq(requires(source), { 'lazaret.after_dashes', 'lazaret.bare', 'lazaret.double' })
end)

T.finish()
