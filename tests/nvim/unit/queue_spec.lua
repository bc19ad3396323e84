-- Unit tests of lazaret.queue beyond the shared vectors (tests/vectors/queue.json,
-- run by vectors_spec.lua): the Lua API's keys.
local T = dofile(vim.fn.fnamemodify(arg[0], ':p:h') .. '/helper.lua')
local Queue = require('lazaret.queue')

local function esc(id, at)
  return { requestId = id, argv = { 'touch', id }, receivedAtMs = at }
end

local key = Queue.key

T.test('add returns the key of a new request; get and find reach it', function()
  local q = Queue.new()
  T.eq(q:add('/a.sock', esc('r1', 1)), key('/a.sock', 'r1'))
  T.eq(q:add('/a.sock', esc('r1', 1)), nil)
  T.eq(q:get(key('/a.sock', 'r1')), q:find('/a.sock', 'r1'))
  T.eq(q:get(key('/a.sock', 'r1')).key, key('/a.sock', 'r1'))
  T.eq(q:replace('/b.sock', { esc('r1', 2) }), { key('/b.sock', 'r1') })
  T.eq(q:list()[2].key, key('/b.sock', 'r1'))
end)

T.test('the remembered resolved ids are bounded', function()
  local q = Queue.new()
  for i = 1, 1100 do
    q:resolve('/a.sock', 'r' .. i)
  end
  T.eq(#q.resolved_order, 1024)
  T.eq(vim.tbl_count(q.resolved), 1024)
end)

T.finish()
