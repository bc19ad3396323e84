-- Unit tests of lazaret.domains and lazaret.rpc against a fake coordinator
-- on a Unix socket: empty params, subscribe-then-list, live queue updates,
-- event sequencing and lag resync, first-answer-wins, and reconnection
-- when the coordinator restarts.
local dir = vim.fn.fnamemodify(arg[0], ':p:h')
local T = dofile(dir .. '/helper.lua')
local Fake = dofile(dir .. '/fake_coordinator.lua')
local domains = require('lazaret.domains')
local rpc = require('lazaret.rpc')
local Queue = require('lazaret.queue')

local root = vim.fn.tempname()
vim.fn.mkdir(root .. '/abc123', 'p')
local path = root .. '/abc123/control.sock'
local notes = {}
vim.notify = function(msg, level)
  table.insert(notes, { msg = msg, level = level })
end

local pending = {}
local function esc(id, at)
  return { requestId = id, argv = { 'touch', id }, display = 'touch ' .. id, profile = 'default', receivedAtMs = at, reasons = {}, riskNotes = {} }
end
local status = { apiVersion = require('lazaret.protocol').API_VERSION, domainHash = 'abc123', profile = 'default', workspace = '/w', containerState = 'running', sessions = {} }
local methods = {
  ['pending/list'] = function()
    return vim.tbl_map(function(e)
      return vim.tbl_extend('force', { kind = 'command' }, e)
    end, pending)
  end,
  ['domain/status'] = function()
    return status
  end,
  ['network/show'] = function()
    return nil, { code = require('lazaret.protocol').error_code.NETWORK_FAILED, message = 'no Network Sidecar' }
  end,
  ['escalation/respond'] = function(params)
    for i, e in ipairs(pending) do
      if e.requestId == params.requestId then
        table.remove(pending, i)
        return true
      end
    end
    return nil, { code = require('lazaret.protocol').error_code.ESCALATION_NOT_PENDING, message = 'request ' .. params.requestId .. ' is not pending' }
  end,
}
local fake = Fake.new(path, methods)
domains.info = { socketRoot = root, apiVersion = require('lazaret.protocol').API_VERSION }

local function ids()
  return vim.tbl_map(function(item)
    return item.escalation.requestId
  end, domains.queue:list())
end

T.test('empty params go out as an empty object, not []', function()
  T.eq(vim.json.encode(rpc.params(nil)), '{}')
  T.eq(vim.json.encode(rpc.params({})), '{}')
  T.eq(vim.json.encode(rpc.params({ patch = false })), '{"patch":false}')
end)

T.test('connecting checks the API version (domain/status), subscribes, then lists the queue and the status', function()
  pending = { esc('r1', 1) }
  domains.tick()
  T.wait(function()
    return domains.queue:count() == 1 and domains.domains[path].status ~= nil
  end, 3000, 'connected and listed')
  local order = vim.tbl_map(function(m)
    return m.method
  end, fake.requests)
  T.eq({ order[1], order[2], order[3] }, { 'domain/status', 'events/subscribe', 'pending/list' })
  for i, m in ipairs(fake.requests) do
    if m.method == 'pending/list' or m.method == 'domain/status' then
      T.ok(fake.raw[i]:find('"params":{}', 1, true), 'no-params call sends {}: ' .. fake.raw[i])
    end
  end
  T.ok(notes[#notes].msg:find('touch r1', 1, true), 'a notification names the command')
  T.ok(notes[#notes].msg:find(':LazaretPending', 1, true), 'and points to the queue')
  T.eq(require('lazaret').statusline(), '⛨ 1 pending')
end)

T.test('escalationPending and escalationResolved events keep the queue current', function()
  table.insert(pending, esc('r2', 2))
  fake:event({ seq = 1, kind = 'escalationPending', escalation = esc('r2', 2) })
  T.wait(function()
    return domains.queue:count() == 2
  end, 2000, 'r2 queued')
  table.remove(pending, 1)
  fake:event({ seq = 2, kind = 'escalationResolved', requestId = 'r1', outcome = 'approved', decidedBy = 'rpc:cli' })
  T.wait(function()
    return domains.queue:count() == 1
  end, 2000, 'r1 gone')
  T.eq(ids(), { 'r2' })
end)

T.test('eventsLagged makes the plugin list again (resync)', function()
  local lists = #fake:calls('pending/list')
  local statuses = #fake:calls('domain/status')
  pending = { esc('r2', 2), esc('r3', 3) } -- r3's event was among those dropped
  fake:event({ seq = 3, kind = 'eventsLagged', dropped = 42 })
  T.wait(function()
    return domains.queue:count() == 2
  end, 2000, 'resynced')
  T.eq(#fake:calls('pending/list'), lists + 1)
  T.ok(#fake:calls('domain/status') > statuses, 'status listed again too')
  T.eq(ids(), { 'r2', 'r3' })
end)

T.test('a gap in seq also resyncs; a repeated seq is ignored', function()
  local lists = #fake:calls('pending/list')
  pending = { esc('r3', 3) }
  fake:event({ seq = 7, kind = 'sessionRegistered', sessionId = 'x', pid = 1, sessionCount = 2 })
  T.wait(function()
    return #fake:calls('pending/list') == lists + 1 and domains.queue:count() == 1
  end, 2000, 'resync after the gap')
  fake:event({ seq = 7, kind = 'escalationPending', escalation = esc('dup', 9) })
  fake:event({ seq = 8, kind = 'containerState', state = 'running' })
  T.wait(function()
    return domains.domains[path].seq.last == 8
  end, 2000, 'seq 8 seen')
  T.eq(domains.queue:find(path, 'dup'), nil, 'the repeated seq 7 was dropped')
end)

T.test('answers carry client neovim; the first answer wins', function()
  local answered
  domains.respond(Queue.key(path, 'r3'), 'deny', { reason = 'not today' }, function(err)
    answered = { err = err }
  end)
  T.wait(function()
    return answered ~= nil
  end, 2000, 'answered')
  T.eq(answered.err, nil)
  local call = fake:calls('escalation/respond')[1]
  T.eq(call.params, { requestId = 'r3', decision = 'deny', reason = 'not today', client = 'neovim' })
  T.eq(domains.queue:count(), 0)
  pending = {}
  -- Answered elsewhere first: 1007, and the request leaves the queue.
  domains.queue:add(path, esc('r4', 4))
  answered = nil
  domains.respond(Queue.key(path, 'r4'), 'approve', nil, function(err)
    answered = { err = err }
  end)
  T.wait(function()
    return answered ~= nil
  end, 2000, 'answered')
  T.eq(answered.err.code, require('lazaret.protocol').error_code.ESCALATION_NOT_PENDING)
  T.eq(domains.queue:find(path, 'r4'), nil)
end)

T.test('a failed answer leaves the request listed', function()
  pending = { esc('r4b', 4) }
  domains.queue:add(path, esc('r4b', 4))
  local failing = methods['escalation/respond']
  methods['escalation/respond'] = function()
    return nil, { code = 1004, message = 'the edited command line is empty' }
  end
  local answered
  domains.respond(Queue.key(path, 'r4b'), 'edit', { argv = {} }, function(err)
    answered = { err = err }
  end)
  T.wait(function()
    return answered ~= nil
  end, 2000, 'answered')
  methods['escalation/respond'] = failing
  T.eq(answered.err.code, 1004)
  T.ok(domains.queue:find(path, 'r4b'), 'still pending')
  T.eq(require('lazaret').statusline(), '⛨ 1 pending')
  domains.queue:resolve(path, 'r4b')
  pending = {}
end)

T.test('a coordinator that goes away takes its requests; a new one on the same path is joined', function()
  pending = { esc('r5', 5) }
  fake:event({ seq = 9, kind = 'escalationPending', escalation = esc('r5', 5) })
  T.wait(function()
    return domains.queue:count() == 1
  end, 2000, 'r5 queued')
  fake:close()
  T.wait(function()
    return domains.domains[path].state == 'down'
  end, 2000, 'the plugin saw the connection close')
  T.eq(domains.queue:count(), 0)
  local warnings = #notes
  domains.tick() -- nothing listens: no connection, and no warning about it
  vim.wait(200)
  T.eq(domains.domains[path].state, 'down')
  T.eq(#notes, warnings, 'a missing coordinator is not reported')
  pending = { esc('r6', 6) }
  fake = Fake.new(path, methods)
  domains.tick()
  T.wait(function()
    return domains.queue:count() == 1 and domains.domains[path].state == 'connected'
  end, 3000, 'reconnected and resynced')
  T.eq(ids(), { 'r6' })
  T.eq({ fake.requests[1].method, fake.requests[2].method }, { 'domain/status', 'events/subscribe' }, 'its version checked, subscribed again')
  -- The new subscription numbers its events from 1 again.
  fake:event({ seq = 1, kind = 'escalationResolved', requestId = 'r6', outcome = 'denied' })
  T.wait(function()
    return domains.queue:count() == 0
  end, 2000, 'seq 1 of the new subscription applied')
end)

T.test('a stale socket file (no listener) is skipped quietly', function()
  fake:close()
  T.wait(function()
    return domains.domains[path].state == 'down'
  end, 2000, 'down')
  local stale = root .. '/dead99'
  vim.fn.mkdir(stale, 'p')
  local pipe = vim.uv.new_pipe(false)
  pipe:bind(stale .. '/control.sock') -- bound, never listening: connect is refused
  local warnings = #notes
  domains.tick()
  vim.wait(300)
  T.ok(domains.domains[stale .. '/control.sock'].state == 'down', 'not connected')
  T.eq(#notes, warnings)
  pipe:close()
end)

domains.stop()
T.finish()
