-- Unit tests of the API version check (issue 28, items 5 and 6): a lazaret
-- binary or a coordinator of another API version is a problem naming both
-- versions and what to update, shown where "nothing pending" would be (the
-- pending window, the statusline, :checkhealth); such a coordinator is never
-- asked for its requests. And a `lazaret editor-info` that hangs is killed
-- after `discovery_timeout_ms` and reported, naming the command.
local dir = vim.fn.fnamemodify(arg[0], ':p:h')
local T = dofile(dir .. '/helper.lua')
local Fake = dofile(dir .. '/fake_coordinator.lua')
local config = require('lazaret.config')
local domains = require('lazaret.domains')
local approvals = require('lazaret.approvals')
local status = require('lazaret.status')
local API = require('lazaret.protocol').API_VERSION

vim.notify = function() end

local root = vim.fn.tempname()
vim.fn.mkdir(root .. '/bin', 'p')

--- A stand-in `lazaret`: `--version` prints a version, anything else the
--- JSON in `<script>.json` (rewritten by each test), or it hangs.
local function script(name, body)
  local path = root .. '/bin/' .. name
  vim.fn.writefile(vim.split(body, '\n'), path)
  vim.fn.setfperm(path, 'rwx------')
  return path
end
local fake_bin = script('lazaret', '#!/bin/sh\ncase "$1" in --version) echo "lazaret 9.9.9";; *) cat "$0.json";; esac')
local hung_bin = script('lazaret-hung', '#!/bin/sh\nexec sleep 30')
local function editor_info(fields)
  local info = vim.tbl_extend('force', {
    apiVersion = API,
    version = '9.9.9',
    framing = 'Content-Length',
    socketRoot = root .. '/run',
    controlSocketPattern = root .. '/run/<domainHash>/control.sock',
    defaultProfile = 'default',
    profiles = { 'default' },
    domains = {},
    folders = {},
  }, fields or {})
  vim.fn.writefile({ vim.json.encode(info) }, fake_bin .. '.json')
end

local function window_text()
  return table.concat(approvals.render_lines(domains.queue:list(), { problems = domains.problems() }), '\n')
end

local function discover()
  local result
  domains.discover(function(info, err)
    result = { info = info, err = err }
  end)
  T.wait(function()
    return result ~= nil
  end, 5000, 'discovery finished')
  return result
end

--- :checkhealth lazaret's report, as {level, message, advice} rows.
local function health_report()
  local rows = {}
  local saved = vim.health
  local function record(level)
    return function(msg, advice)
      rows[#rows + 1] = { level, msg, advice }
    end
  end
  vim.health = { start = function() end, ok = record('ok'), info = record('info'), warn = record('warn'), error = record('error') }
  local ok, err = pcall(require('lazaret.health').check)
  vim.health = saved
  assert(ok, err)
  return rows
end
local function health_errors(rows)
  return vim.tbl_filter(function(r)
    return r[1] == 'error'
  end, rows)
end

T.test('a lazaret binary of another API version: the problem names both versions and what to update, everywhere', function()
  config.set({ binary = fake_bin, auto_start = false })
  editor_info({ apiVersion = API + 1 })
  local result = discover()
  T.eq(result.info, nil)
  T.eq(domains.info, nil, 'nothing of that answer is used')
  local problems = domains.problems()
  T.eq(#problems, 1)
  T.eq(problems[1].what, string.format('the lazaret binary `%s` speaks API %d, this plugin speaks API %d', fake_bin, API + 1, API))
  T.ok(problems[1].fix:find('update this plugin', 1, true), problems[1].fix)
  T.eq(domains.settling(), false)
  local text = window_text()
  T.ok(text:find('cannot tell what is pending', 1, true), text)
  T.ok(text:find(string.format('speaks API %d, this plugin speaks API %d', API + 1, API), 1, true), text)
  T.eq(status.statusline(), '⛨ cannot ask: lazaret speaks another API')
  local errors = health_errors(health_report())
  T.eq(#errors, 1)
  T.eq(errors[1][2], problems[1].what)
  T.ok(errors[1][3][1]:find('update this plugin', 1, true), vim.inspect(errors))
  -- An older one, or one that says no version: update lazaret.
  for _, theirs in ipairs({ API - 1, vim.NIL, 'one' }) do
    editor_info({ apiVersion = theirs })
    discover()
    local p = domains.problems()[1]
    local said = type(theirs) == 'number' and ('API ' .. theirs) or 'no API version this plugin can read'
    T.eq(p.what, string.format('the lazaret binary `%s` speaks %s, this plugin speaks API %d', fake_bin, said, API))
    T.ok(p.fix:find('update lazaret (that binary)', 1, true), p.fix)
  end
  -- The same version, but not the EditorInfo contract (no folders): a failure too.
  editor_info({ folders = vim.NIL })
  discover()
  T.ok(domains.problems()[1].what:find('not the JSON this plugin expects', 1, true), domains.problems()[1].what)
end)

T.test('a lazaret editor-info that hangs is killed after discovery_timeout_ms and reported, naming the command; discovery runs again', function()
  config.set({ binary = hung_bin, auto_start = false, discovery_timeout_ms = 300 })
  domains.info, domains.info_error = nil, nil
  local started = vim.uv.now()
  local result = discover()
  T.ok(vim.uv.now() - started < 3000, 'ended by the time-out')
  T.eq(result.info, nil)
  local what = domains.problems()[1].what
  T.ok(what:find('`' .. hung_bin .. ' editor-info --json', 1, true), what)
  T.ok(what:find('did not answer within 0.3 s', 1, true), what)
  T.eq(domains.settling(), false, 'not stuck discovering')
  T.eq(status.statusline(), '⛨ cannot ask: lazaret editor-info timed out')
  -- The flag was cleared: the next discovery runs (and works).
  config.set({ binary = fake_bin, auto_start = false })
  editor_info()
  local again = discover()
  T.ok(again.info ~= nil, vim.inspect(again.err))
  T.eq(domains.problems(), {})
end)

local sock = root .. '/run/c0ffee000001/control.sock'
vim.fn.mkdir(vim.fn.fnamemodify(sock, ':h'), 'p')
local coordinator_api = API + 1
local function escalation(id)
  return { requestId = id, argv = { 'touch', id }, display = 'touch ' .. id, profile = 'default', receivedAtMs = 1, reasons = {}, riskNotes = {}, cwd = '/w' }
end
local methods = {
  ['domain/status'] = function()
    return { apiVersion = coordinator_api, domainHash = 'c0ffee000001', profile = 'default', workspace = '/w', containerState = 'running', sessions = {} }
  end,
  ['pending/list'] = function()
    return { escalation('unsafe') }
  end,
  ['network/show'] = function()
    return nil, { code = require('lazaret.protocol').error_code.NETWORK_FAILED, message = 'no Network Sidecar' }
  end,
}

T.test('a coordinator of another API version is listed with the problem and never asked for its requests', function()
  config.set({ binary = fake_bin, auto_start = false, answer_timeout_ms = 1000 })
  local fake = Fake.new(sock, methods)
  domains.tick()
  T.wait(function()
    return #domains.problems() == 1
  end, 3000, 'the problem')
  local p = domains.problems()[1]
  T.eq(p.what, string.format("this domain's coordinator speaks API %d, this plugin speaks API %d", API + 1, API))
  T.ok(p.where:find(sock, 1, true), p.where)
  T.ok(p.fix:find('update this plugin', 1, true), p.fix)
  -- Events it sends anyway are not applied either.
  fake:event({ seq = 1, kind = 'escalationPending', escalation = escalation('pushed') })
  vim.wait(300)
  T.eq(#fake:calls('pending/list'), 0, 'not listed')
  T.eq(#fake:calls('events/subscribe'), 0, 'not subscribed')
  T.eq(domains.queue:count(), 0)
  T.eq(domains.connected(), {}, 'no command acts on it')
  T.eq(domains.settling(), false)
  local text = window_text()
  T.ok(text:find('cannot tell what is pending', 1, true), text)
  T.ok(text:find("this domain's coordinator speaks API", 1, true), text)
  T.eq(status.statusline(), '⛨ cannot ask: a coordinator speaks another API')
  local lines = table.concat(status.lines(), ' '):gsub('%s+', ' ')
  T.ok(lines:find("this domain's coordinator speaks API", 1, true), 'in :Lazaret too: ' .. lines)
  -- :checkhealth names it too.
  editor_info({ domains = { { controlSocket = sock, domainHash = 'c0ffee000001', profile = 'default', workspace = '/w' } } })
  local errors = health_errors(health_report())
  T.eq(#errors, 1, vim.inspect(errors))
  T.ok(errors[1][2]:find(string.format('its coordinator speaks API %d, this plugin speaks API %d', API + 1, API), 1, true), errors[1][2])
  T.eq(#fake:calls('pending/list'), 0, 'health asked no requests either')
  -- An older coordinator restarts on the same path: the fix names the lazaret that started it.
  fake:close()
  T.wait(function()
    return domains.domains[sock].state == 'down'
  end, 2000, 'gone')
  coordinator_api = API - 1
  fake = Fake.new(sock, methods)
  domains.tick()
  T.wait(function()
    return #domains.problems() == 1
  end, 3000, 'the older one')
  T.ok(domains.problems()[1].what:find('speaks API ' .. (API - 1) .. ', this plugin speaks API ' .. API .. ': its requests are not asked for', 1, true), domains.problems()[1].what)
  T.ok(domains.problems()[1].fix:find('an older lazaret started this coordinator', 1, true), domains.problems()[1].fix)
  T.eq(#fake:calls('pending/list'), 0)
  -- One of this version: asked as usual.
  fake:close()
  T.wait(function()
    return domains.domains[sock].state == 'down'
  end, 2000, 'gone again')
  coordinator_api = API
  fake = Fake.new(sock, methods)
  domains.tick()
  T.wait(function()
    return domains.queue:count() == 1
  end, 3000, 'listed')
  T.eq(domains.problems(), {})
  fake:close()
end)

T.test('a coordinator whose domain/status fails is a problem, and is not listed even on a refresh', function()
  local path = root .. '/run/c0ffee000002/control.sock'
  vim.fn.mkdir(vim.fn.fnamemodify(path, ':h'), 'p')
  local fake = Fake.new(path, vim.tbl_extend('force', methods, {
    ['domain/status'] = function()
      return nil, { code = -32603, message = 'the store is locked' }
    end,
  }))
  domains.tick()
  T.wait(function()
    return #domains.problems() == 1
  end, 3000, 'the problem')
  T.ok(domains.problems()[1].what:find('domain/status failed: the store is locked', 1, true), domains.problems()[1].what)
  domains.resync(domains.domains[path]) -- what `r` in :Lazaret does for a connected domain
  vim.wait(200)
  T.eq(#fake:calls('pending/list'), 0, 'not listed')
  T.eq(#fake:calls('events/subscribe'), 0, 'not subscribed')
  T.eq(domains.connected(), {})
  T.eq(domains.queue:count(), 0)
  fake:close()
end)

domains.stop()
vim.fn.delete(root, 'rf')
T.finish()
