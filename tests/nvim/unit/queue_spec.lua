-- Unit tests of lazaret.queue: the pending queue across domains, keyed by
-- (domain, request id).
local T = dofile(vim.fn.fnamemodify(arg[0], ':p:h') .. '/helper.lua')
local Queue = require('lazaret.queue')

local function esc(id, at)
  return { requestId = id, argv = { 'touch', id }, receivedAtMs = at }
end

local function ids(q)
  return vim.tbl_map(function(item)
    return item.escalation.requestId
  end, q:list())
end

local key = Queue.key

T.test('requests are listed oldest first across domains', function()
  local q = Queue.new()
  T.ok(q:add('/a.sock', esc('r2', 200)))
  T.ok(q:add('/b.sock', esc('r1', 100)))
  T.ok(q:add('/a.sock', esc('r3', 300)))
  T.eq(ids(q), { 'r1', 'r2', 'r3' })
  T.eq(q:count(), 3)
end)

T.test('adding the same request twice keeps one entry', function()
  local q = Queue.new()
  T.eq(q:add('/a.sock', esc('r1', 1)), key('/a.sock', 'r1'))
  T.eq(q:add('/a.sock', esc('r1', 1)), nil)
  T.eq(q:count(), 1)
end)

T.test('the same id in two domains is two requests, each under its own domain', function()
  local q = Queue.new()
  T.eq(q:add('/a.sock', esc('same', 1)), key('/a.sock', 'same'))
  T.eq(q:add('/b.sock', esc('same', 2)), key('/b.sock', 'same'))
  T.eq(q:count(), 2)
  T.eq(vim.tbl_map(function(item)
    return item.domain
  end, q:list()), { '/a.sock', '/b.sock' })
  T.eq(q:find('/b.sock', 'same').escalation.receivedAtMs, 2)
  -- Resolving (or listing) one domain leaves the other's request alone.
  T.eq(q:resolve('/a.sock', 'same'), true)
  T.eq(q:find('/b.sock', 'same').domain, '/b.sock')
  T.eq(q:replace('/b.sock', { esc('same', 2) }), {})
  T.eq(q:add('/a.sock', esc('same', 1)), nil, 'a resolved request stays resolved in its domain')
  q:add('/c.sock', esc('same', 3))
  q:replace('/c.sock', {})
  T.eq(ids(q), { 'same' })
  T.eq(q:list()[1].domain, '/b.sock')
end)

T.test('a resolved request never comes back (first answer wins elsewhere)', function()
  local q = Queue.new()
  q:add('/a.sock', esc('r1', 1))
  T.eq(q:resolve('/a.sock', 'r1'), true)
  T.eq(q:add('/a.sock', esc('r1', 1)), nil, 'a late escalationPending')
  T.eq(q:replace('/a.sock', { esc('r1', 1), esc('r2', 2) }), { key('/a.sock', 'r2') }, 'a list that raced with the answer')
  T.eq(ids(q), { 'r2' })
  T.eq(q:resolve('/a.sock', 'unknown'), false)
end)

T.test('replace makes the list the truth for that domain only', function()
  local q = Queue.new()
  q:add('/a.sock', esc('a1', 1))
  q:add('/a.sock', esc('a2', 2))
  q:add('/b.sock', esc('b1', 3))
  T.eq(q:replace('/a.sock', { esc('a2', 2), esc('a3', 4) }), { key('/a.sock', 'a3') })
  T.eq(ids(q), { 'a2', 'b1', 'a3' })
  q:replace('/a.sock', {})
  T.eq(ids(q), { 'b1' })
end)

T.test('a domain that goes away takes its requests with it', function()
  local q = Queue.new()
  q:add('/a.sock', esc('a1', 1))
  q:add('/b.sock', esc('b1', 2))
  q:drop_domain('/a.sock')
  T.eq(ids(q), { 'b1' })
  T.eq(q:find('/a.sock', 'a1'), nil)
  T.eq(q:get(key('/b.sock', 'b1')).domain, '/b.sock')
  T.ok(q:add('/a.sock', esc('a1', 1)), 'a dropped (not resolved) request can return after a reconnect')
end)

T.test('malformed entries are ignored', function()
  local q = Queue.new()
  T.eq(q:add('/a.sock', { argv = { 'x' } }), nil)
  T.eq(q:replace('/a.sock', { 'junk', vim.NIL, {} }), {})
  T.eq(q:count(), 0)
end)

T.test('the remembered resolved ids are bounded', function()
  local q = Queue.new()
  for i = 1, 1100 do
    q:resolve('/a.sock', 'r' .. i)
  end
  T.ok(#q.resolved_order <= 1024)
  T.ok(q:add('/a.sock', esc('r1', 1)), 'the oldest is forgotten')
  T.eq(q:add('/a.sock', esc('r1100', 1)), nil, 'the newest is remembered')
end)

T.finish()
