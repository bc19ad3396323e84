-- The shared test vectors (tests/vectors/*.json) that the VS Code extension's
-- unit tests run too (vscode-extension/test/unit/vectors.test.ts): the
-- pending queue, the event sequencer and shell quoting. A missing file, or
-- one without cases, fails.
local T = dofile(vim.fn.fnamemodify(arg[0], ':p:h') .. '/helper.lua')
local Queue = require('lazaret.queue')
local Sequencer = require('lazaret.events')
local shell = require('lazaret.shell')
local text = require('lazaret.text')

local root = vim.fn.fnamemodify(arg[0], ':p:h:h:h:h')
local dir = root .. '/tests/vectors'
local files = { 'queue', 'quoting', 'sequencer' }

local function read(path)
  local f = assert(io.open(path, 'rb'), path .. ': missing')
  local s = f:read('*a')
  f:close()
  return vim.json.decode(s)
end

local function load(name)
  local cases = read(dir .. '/' .. name .. '.json').cases
  assert(type(cases) == 'table' and #cases > 0, name .. '.json: no cases')
  return cases
end

local function where(c, n, what)
  return string.format('%s: %s %d', c.name, what, n)
end

T.test('every vector file is there, has cases, and is run here', function()
  for _, name in ipairs(files) do
    T.ok(#load(name) > 0, name)
  end
  local present = vim.fn.sort(vim.tbl_map(function(p)
    return vim.fn.fnamemodify(p, ':t')
  end, vim.fn.glob(dir .. '/*.json', false, true)))
  T.eq(present, vim.tbl_map(function(f)
    return f .. '.json'
  end, files), 'a vector file this spec does not run')
end)

local function ids(items)
  return vim.tbl_map(function(item)
    return item.escalation.requestId
  end, items)
end

T.test('queue vectors', function()
  for _, c in ipairs(load('queue')) do
    local q = Queue.new()
    for n, op in ipairs(c.ops) do
      local at = where(c, n, op.op)
      if op.op == 'add' then
        local key = q:add(op.domain, op.escalation)
        T.eq(key ~= nil, op.new, at)
        if key then
          T.eq(q:get(key).domain, op.domain, at)
        end
      elseif op.op == 'resolve' then
        T.eq(q:resolve(op.domain, op.id), op.was, at)
      elseif op.op == 'resolveMany' then
        for i = op.from, op.to do
          q:resolve(op.domain, op.prefix .. i)
        end
      elseif op.op == 'replace' then
        T.eq(ids(vim.tbl_map(function(key)
          return q:get(key)
        end, q:replace(op.domain, op.list))), op.added, at)
      elseif op.op == 'dropDomain' then
        q:drop_domain(op.domain)
      elseif op.op == 'list' then
        local items = vim.tbl_filter(function(item)
          return op.domain == nil or item.domain == op.domain
        end, q:list())
        T.eq(ids(items), op.ids, at)
      elseif op.op == 'size' then
        T.eq(q:count(), op.n, at)
      elseif op.op == 'get' then
        local item = q:find(op.domain, op.id)
        T.eq(item and item.escalation or vim.NIL, op.escalation, at)
        if item then
          T.eq(item.domain, op.domain, at)
        end
      else
        error(at .. ': unknown op')
      end
    end
  end
end)

T.test('sequencer vectors', function()
  for _, c in ipairs(load('sequencer')) do
    local s = Sequencer.new()
    for n, step in ipairs(c.steps) do
      if step.reset then
        s:reset()
      else
        T.eq({ s:accept(step.event) }, { step.apply, step.resync }, where(c, n, 'step'))
      end
    end
    if c.gaps ~= nil then
      T.eq(s.gaps, c.gaps, c.name .. ': gaps')
    end
    if c.lagged ~= nil then
      T.eq(s.lagged, c.lagged, c.name .. ': lagged')
    end
  end
end)

T.test('quoting vectors', function()
  for _, c in ipairs(load('quoting')) do
    if c.quoted ~= nil then
      T.eq(shell.quote(c.argv), c.quoted, c.name .. ': quote')
      T.ok(text.is_inert(c.quoted), c.name .. ': the vector shows an unsafe character')
      T.eq(shell.split(c.quoted), c.argv, c.name .. ': split')
    elseif c.error ~= nil then
      T.eq({ shell.split(c.line) }, { nil, c.error }, c.name)
    else
      T.eq({ shell.split(c.line) }, { c.argv }, c.name)
    end
  end
end)

--- The argv a shell makes of `line` (printf prints its format once even with no argument).
local function shell_argv(sh, line)
  local cmd = vim.list_extend(vim.deepcopy(sh), { "printf '%s\\0' " .. line })
  local out = vim.system(cmd):wait()
  assert(out.code == 0, table.concat(sh, ' ') .. ': ' .. tostring(out.stderr))
  local words = vim.split(out.stdout, '\0', { plain = true })
  words[#words] = nil
  return words
end

local shells = vim.tbl_filter(function(sh)
  return vim.fn.executable(sh[1]) == 1 and vim.system(vim.list_extend(vim.deepcopy(sh), { "printf %s $'\\x41'" })):wait().stdout == 'A'
end, { { 'bash', '-c' }, { 'busybox', 'sh', '-c' }, { '/bin/sh', '-c' } })

T.test('quoted lines give a real shell exactly the argv', function()
  T.ok(#shells > 0, 'a shell that reads $\'...\'')
  for _, c in ipairs(load('quoting')) do
    if c.quoted ~= nil then
      local want = #c.argv > 0 and c.argv or { '' }
      for _, sh in ipairs(shells) do
        T.eq(shell_argv(sh, c.quoted), want, c.name .. ': ' .. sh[1])
      end
      if not c.quoted:find("$'", 1, true) then
        T.eq(shell_argv({ '/bin/sh', '-c' }, c.quoted), want, c.name .. ': /bin/sh')
      end
    end
  end
end)

T.test('every hostile corpus entry as an argv word round-trips, showing nothing unsafe', function()
  local corpus = read(root .. '/tests/hostile/strings.json')
  for _, e in ipairs(corpus.entries) do
    local word = e.text:rep(type(e['repeat']) == 'number' and e['repeat'] or 1):gsub(vim.pesc(corpus.marker), '/tmp/lazaret-unit-marker')
    local argv = { 'echo', word, 'tail' }
    local line = shell.quote(argv)
    T.ok(text.is_inert(line), e.name .. ': an unsafe character shown')
    T.eq(shell.split(line), argv, e.name .. ': split')
  end
end)

T.finish()
