-- Unit tests of "a client that could not ask never says nothing pending"
-- and of requests keyed by (domain, id), against fake coordinators: a
-- missing binary, a pending/list error, a coordinator that does not
-- answer, and the same request id from two coordinators.
local dir = vim.fn.fnamemodify(arg[0], ':p:h')
local T = dofile(dir .. '/helper.lua')
local Fake = dofile(dir .. '/fake_coordinator.lua')
local config = require('lazaret.config')
local domains = require('lazaret.domains')
local approvals = require('lazaret.approvals')
local status = require('lazaret.status')

local notes = {}
vim.notify = function(msg, level)
  table.insert(notes, { msg = msg, level = level })
end

local function window_text(opts)
  local lines = approvals.render_lines(domains.queue:list(), vim.tbl_extend('force', { problems = domains.problems() }, opts or {}))
  return table.concat(lines, '\n')
end

T.test('no lazaret binary: the failure and its fix, never "no pending escalations"', function()
  config.set({ binary = '/nonexistent/lazaret', auto_start = false })
  local done = false
  domains.discover(function()
    done = true
  end)
  T.wait(function()
    return done
  end, 3000, 'discovery finished')
  local problems = domains.problems()
  T.eq(#problems, 1)
  T.ok(problems[1].what:find('cannot find the lazaret binary `/nonexistent/lazaret`', 1, true), problems[1].what)
  local text = window_text()
  T.ok(not text:find('no pending escalations', 1, true), text)
  T.ok(text:find('cannot tell what is pending', 1, true), text)
  T.ok(text:find('set `binary` in setup{}', 1, true), text)
  T.eq(status.statusline(), '⛨ cannot ask: no lazaret binary')
  T.ok(table.concat(status.lines(), '\n'):find('cannot find the lazaret binary', 1, true))
  T.ok(not table.concat(status.lines(), '\n'):find('No domain is running', 1, true), 'the status window does not claim nothing runs')
  config.set({ auto_start = false, answer_timeout_ms = 400 })
  domains.info_error = nil
end)

local root = vim.fn.tempname()
local function socket(name)
  vim.fn.mkdir(root .. '/' .. name, 'p')
  return root .. '/' .. name .. '/control.sock'
end
local function escalation(id, argv, at)
  return { requestId = id, argv = argv, display = table.concat(argv, ' '), profile = 'default', receivedAtMs = at, reasons = {}, riskNotes = {}, cwd = '/w' }
end
local function status_of(hash, workspace)
  return function()
    return { apiVersion = require('lazaret.protocol').API_VERSION, domainHash = hash, profile = 'default', workspace = workspace, containerState = 'running', sessions = {} }
  end
end
local no_sidecar = function()
  return nil, { code = require('lazaret.protocol').error_code.NETWORK_FAILED, message = 'no Network Sidecar' }
end

local a_path, b_path = socket('aaaa01'), socket('bbbb02')
local answered = {}
local function responder(name)
  return function(params)
    table.insert(answered, { name, params.requestId })
    return true
  end
end
local a_pending = { escalation('same-id', { 'touch', 'from-a' }, 1) }
local b_pending = { escalation('same-id', { 'touch', 'from-b' }, 2) }
local a = Fake.new(a_path, {
  ['pending/list'] = function()
    return a_pending
  end,
  ['domain/status'] = status_of('aaaa01', '/wa'),
  ['network/show'] = no_sidecar,
  ['escalation/respond'] = responder('a'),
})
local b = Fake.new(b_path, {
  ['pending/list'] = function()
    return b_pending
  end,
  ['domain/status'] = status_of('bbbb02', '/wb'),
  ['network/show'] = no_sidecar,
  ['escalation/respond'] = responder('b'),
})
domains.info = { socketRoot = root, apiVersion = require('lazaret.protocol').API_VERSION }

T.test('the same request id from two domains: two requests, each under its own domain', function()
  domains.tick()
  T.wait(function()
    return domains.queue:count() == 2 and #domains.connected() == 2 and domains.domains[b_path].status ~= nil
  end, 3000, 'both listed')
  local items = domains.queue:list()
  T.eq(vim.tbl_map(function(item)
    return { item.domain, item.escalation.argv[2] }
  end, items), { { a_path, 'from-a' }, { b_path, 'from-b' } })
  local lines, _, keys = approvals.render_lines(items, {})
  local text = table.concat(lines, '\n')
  T.ok(text:find('[1] touch from-a\n    domain   default @ /wa (aaaa01)', 1, true), text)
  T.ok(text:find('[2] touch from-b\n    domain   default @ /wb (bbbb02)', 1, true), text)
  -- Answering the second (by its key) answers only coordinator b.
  local done
  domains.respond(items[2].key, 'approve', nil, function(err)
    done = { err = err }
  end)
  T.wait(function()
    return done ~= nil
  end, 2000, 'answered')
  T.eq(answered, { { 'b', 'same-id' } })
  T.eq(domains.queue:count(), 1)
  T.eq(domains.queue:list()[1].domain, a_path, 'a\'s request is still pending')
  -- Its resolution event from b does not touch a's request either.
  b:event({ kind = 'escalationResolved', requestId = 'same-id', outcome = 'approved', decidedBy = 'rpc:neovim' })
  vim.wait(200)
  T.eq(domains.queue:count(), 1)
  T.ok(keys[7], 'a request line has its key')
end)

T.test('a pending/list error is shown as that error, with the fix', function()
  b.methods['pending/list'] = function()
    return nil, { code = -32603, message = 'database is locked' }
  end
  domains.resync(domains.domains[b_path])
  T.wait(function()
    return #domains.problems() == 1
  end, 2000, 'the problem is known')
  local problem = domains.problems()[1]
  T.ok(problem.where:find('(bbbb02)', 1, true), problem.where)
  T.ok(problem.what:find('pending/list failed: database is locked (code -32603)', 1, true), problem.what)
  local text = window_text()
  T.ok(text:find('1 pending escalation listed, but a coordinator could not be asked', 1, true), text)
  T.ok(text:find('fix: ', 1, true), text)
  T.eq(status.statusline(), '⛨ 1 pending, cannot ask 1')
  b.methods['pending/list'] = function()
    return {}
  end
  domains.resync(domains.domains[b_path])
  T.wait(function()
    return #domains.problems() == 0
  end, 2000, 'a good list clears it')
end)

T.test('a coordinator that does not answer pending/list is reported after answer_timeout_ms', function()
  a.methods['pending/list'] = function()
    return Fake.SILENT
  end
  a_pending = {}
  domains.queue:replace(a_path, {})
  domains.resync(domains.domains[a_path])
  vim.wait(100)
  T.eq(#domains.problems(), 0, 'not before the timeout')
  T.wait(function()
    return #domains.problems() == 1
  end, 2000, 'reported')
  T.ok(domains.problems()[1].what:find('did not answer pending/list within 0.4 s', 1, true), domains.problems()[1].what)
  local text = window_text()
  T.ok(text:find('cannot tell what is pending', 1, true), text)
  T.ok(not text:find('no pending escalations', 1, true), text)
  T.eq(status.statusline(), '⛨ cannot ask: coordinator not answering')
end)

T.test('a leftover socket of an exited coordinator is no problem', function()
  a.methods['pending/list'] = function()
    return {}
  end
  domains.resync(domains.domains[a_path])
  T.wait(function()
    return #domains.problems() == 0
  end, 2000, 'answering again')
  b:close()
  T.wait(function()
    return domains.domains[b_path].state == 'down'
  end, 2000, 'b gone')
  domains.tick()
  vim.wait(300)
  T.eq(domains.problems(), {})
  T.eq(window_text():match('^[^\n]*'), 'Lazaret: no pending escalations or network requests')
end)

T.test('a sidecar that stopped (networkFailed) shows the sandbox without network, until networkRestored', function()
  local failed = nil
  a.methods['domain/status'] = function()
    local s = status_of('aaaa01', '/wa')()
    s.networkError = failed
    return s
  end
  failed = 'the Network Sidecar stopped (its event stream ended); it is being started again\27[2J'
  a:event({ seq = 90, kind = 'networkFailed', message = failed, restarting = true })
  T.wait(function()
    return table.concat(status.lines(), '\n'):find('network    NONE: the Network Sidecar stopped', 1, true) ~= nil
  end, 2000, 'the status window says so')
  T.ok(not table.concat(status.lines(), '\n'):find('\27', 1, true), 'inert')
  failed = nil
  a:event({ seq = 91, kind = 'networkRestored', message = 'the Network Sidecar was started again' })
  T.wait(function()
    return table.concat(status.lines(), '\n'):find('network    NONE', 1, true) == nil
  end, 2000, 'and that it is back')
end)

domains.stop()
a:close()
T.finish()
