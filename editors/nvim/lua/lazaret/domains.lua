--- The connections to every running coordinator and what they report: the
--- pending queue (host command escalations and network requests), each
--- domain's status and network policy. Connects to new
--- coordinators (and reconnects to restarted ones) by scanning the socket
--- directory, follows `events/subscribe`, and resyncs after lost events.
--- What could not be asked (no binary, a coordinator that does not answer,
--- a `pending/list` error, a lazaret or a coordinator of another API
--- version) is kept as a problem and shown as such (`problems()`): a client
--- that could not ask never says nothing is pending.
local protocol = require('lazaret.protocol')
local config = require('lazaret.config')
local discovery = require('lazaret.discovery')
local rpc = require('lazaret.rpc')
local Queue = require('lazaret.queue')
local Sequencer = require('lazaret.events')
local shell = require('lazaret.shell')
local text = require('lazaret.text')

local M = {}

--- @type lazaret.Queue
M.queue = Queue.new()
--- Domains by control socket path.
--- @type table<string, table>
M.domains = {}
--- The last `editor-info` answer.
M.info = nil
--- The folder of the working directory (editor-info `folders[1]`).
M.current = nil
--- When each request was first seen here (realtime ms), for latency figures.
M.seen_at = {}
--- Counters (resyncs, events) for tests and :Lazaret.
M.stats = { resyncs = 0, events = 0, lagged = 0 }
--- Opens the pending window when a request arrives (`auto_open`): set by
--- lazaret.approvals when it loads, and by lazaret's start() before that.
--- A hook, not a require: lazaret.approvals requires this module.
--- @type fun()?
M.open_pending = nil

local timer = nil
local discovering = false
local last_discovery = 0
local listeners = {}
local rules_listeners = {}
local deferred_open = false

local function now_ms()
  local sec, usec = vim.uv.gettimeofday()
  return sec * 1000 + math.floor(usec / 1000)
end
M.now_ms = now_ms

--- Tells the UI parts that something changed (pending window, status,
--- statusline) and fires `User LazaretChanged`.
function M.changed()
  for _, fn in ipairs(listeners) do
    pcall(fn)
  end
  pcall(vim.api.nvim_exec_autocmds, 'User', { pattern = 'LazaretChanged', modeline = false })
  pcall(vim.cmd.redrawstatus, { bang = true })
end

--- @param fn fun()
function M.on_change(fn)
  table.insert(listeners, fn)
end

--- `fn(d)` runs when domain `d` says its rules changed (`rulesChanged`),
--- and after a resync (events may have been lost): `rules/list` again.
--- @param fn fun(d: table)
function M.on_rules_changed(fn)
  table.insert(rules_listeners, fn)
end

local function rules_changed(d)
  for _, fn in ipairs(rules_listeners) do
    pcall(fn, d)
  end
end

--- How long a notification's command may be (display cells).
local NOTIFY_COMMAND_CELLS = 160

--- The profile and the command of a queued request, inert (the command cut).
local function label(item)
  local e = item.escalation
  local d = M.domains[item.domain]
  local where = e.profile or (d and d.status and d.status.profile) or '?'
  local argv = type(e.argv) == 'table' and e.argv or {}
  return text.inert(where), (text.cut(shell.quote(argv), NOTIFY_COMMAND_CELLS))
end

local function open_pending_when_idle()
  if not M.open_pending then
    return
  end
  local mode = vim.api.nvim_get_mode().mode
  if mode:sub(1, 1) == 'n' and not mode:find('o') then
    M.open_pending()
    return
  end
  if deferred_open then
    return
  end
  deferred_open = true
  vim.api.nvim_create_autocmd('ModeChanged', {
    pattern = '*:n',
    once = true,
    callback = function()
      deferred_open = false
      if M.queue:count() > 0 then
        vim.schedule(M.open_pending)
      end
    end,
  })
end

--- A new request in the queue: a notification pointing to :LazaretPending.
--- A network request's notification names no destination (the name is the
--- sandbox's choice: it is shown in the pending window only).
--- @param key string the request's queue key
local function announce(key)
  local item = M.queue:get(key)
  if not item then
    return
  end
  M.seen_at[key] = M.seen_at[key] or now_ms()
  local o = config.options
  if o.notify and item.kind == 'network' then
    local d = M.domains[item.domain]
    local profile = text.inert(item.request.profile or (d and d.status and d.status.profile) or '?')
    vim.notify(
      'Lazaret [' .. profile .. '] the sandbox asks for a network destination no rule allows  (:LazaretPending to answer)',
      o.notify_level,
      { title = 'Lazaret' }
    )
  elseif o.notify then
    local profile, display = label(item)
    vim.notify(
      'Lazaret [' .. profile .. '] asks to run on the host: ' .. display .. '  (:LazaretPending to answer)',
      o.notify_level,
      { title = 'Lazaret' }
    )
  end
  if o.auto_open then
    open_pending_when_idle()
  end
end

local function refresh_status(d)
  if not d.conn then
    return
  end
  d.conn:request(protocol.methods.domain_status, nil, function(err, status)
    if not err and type(status) == 'table' then
      d.status = status
      d.hash = status.domainHash
      M.changed()
    end
  end)
end

local function refresh_policy(d)
  if not d.conn then
    return
  end
  d.conn:request(protocol.methods.network_show, nil, function(err, policy)
    if err then
      d.policy, d.policy_error = nil, rpc.message(err)
      d.no_sidecar = type(err) == 'table' and err.code == rpc.codes.no_sidecar
    else
      d.policy, d.policy_error, d.no_sidecar = policy, nil, false
    end
    M.changed()
  end)
end

--- After `answer_timeout_ms`, a question to `conn` still unanswered
--- (`waiting()`) becomes the domain's `list_error`: a coordinator that does
--- not answer is shown as such, never as an empty queue.
local function watchdog(d, conn, method, waiting)
  local timeout = config.options.answer_timeout_ms
  vim.defer_fn(function()
    if d.conn == conn and waiting() then
      d.list_error = {
        what = string.format('the coordinator did not answer %s within %g s', method, timeout / 1000),
        fix = 'is it stopped or overloaded? `lazaret status` tells; the plugin keeps waiting for its answer',
        short = 'coordinator not answering',
      }
      M.changed()
    end
  end, timeout)
end

--- Lists the queue and the status again (after connecting or lost events):
--- `pending/list` (escalations and network requests); a coordinator that
--- does not know that method (an earlier build of API 1) is asked
--- `escalation/list` from then on. An error, or no answer within
--- `answer_timeout_ms`, becomes the domain's `list_error` (shown instead of
--- an empty queue) until a list succeeds.
function M.resync(d)
  -- Only a coordinator whose API version was checked (on connect) and is ours is listed.
  if not d.conn or d.state ~= 'connected' or not d.version_ok then
    return
  end
  M.stats.resyncs = M.stats.resyncs + 1
  local conn = d.conn
  local function list_with(method)
    d.list_generation = (d.list_generation or 0) + 1
    local generation = d.list_generation
    watchdog(d, conn, method, function()
      return d.list_generation == generation and d.listing
    end)
    d.listing = true
    conn:request(method, nil, function(err, list)
      if d.conn ~= conn then
        return
      end
      if d.list_generation == generation then
        d.listing = false
      end
      if err or type(list) ~= 'table' then
        d.list_error = {
          what = method .. ' failed: ' .. text.cut(text.inert(err and rpc.message(err) or 'the answer is not a list'), 300),
          fix = '`lazaret pending` lists the requests; :checkhealth lazaret',
          short = method .. ' failed',
        }
        M.changed()
        return
      end
      d.list_error = nil
      d.listed = true
      local added = M.queue:replace(d.path, list)
      M.changed()
      for _, key in ipairs(added) do
        announce(key)
      end
    end)
  end
  list_with(protocol.methods.pending_list)
  refresh_status(d)
  refresh_policy(d)
  rules_changed(d)
end

local function on_event(d, event)
  if d.state ~= 'connected' then
    return
  end
  M.stats.events = M.stats.events + 1
  local apply, resync = d.seq:accept(event)
  if event.kind == 'eventsLagged' then
    M.stats.lagged = M.stats.lagged + 1
  end
  if resync then
    M.resync(d)
  end
  if not apply then
    return
  end
  local kind = event.kind
  if kind == 'escalationPending' and type(event.escalation) == 'table' then
    local key = M.queue:add(d.path, event.escalation)
    if key then
      M.changed()
      announce(key)
    end
  elseif kind == 'escalationResolved' then
    if M.queue:resolve(d.path, event.requestId) then
      M.changed()
    end
  elseif kind == 'networkRequestPending' and type(event.request) == 'table' then
    -- Sent again with the same id when its `repeats` grows: an upsert.
    local key = M.queue:add(d.path, event.request, 'network')
    M.changed()
    if key then
      announce(key)
    end
  elseif kind == 'networkRequestResolved' then
    if M.queue:resolve(d.path, event.requestId, 'network') then
      M.changed()
    end
  elseif kind == 'rulesChanged' then
    rules_changed(d)
  elseif kind == 'shuttingDown' then
    d.shutting_down = true
    M.changed()
  elseif kind == 'networkChanged' then
    refresh_policy(d)
  elseif kind == 'networkFailed' or kind == 'networkRestored' then
    -- `domain/status` carries `networkError` while the sidecar is down.
    refresh_status(d)
    refresh_policy(d)
  elseif
    kind == 'sessionRegistered'
    or kind == 'sessionEnded'
    or kind == 'containerState'
    or kind == 'branchUpdated'
    or kind == 'branchRejected'
  then
    refresh_status(d)
  end
end

local function on_exit(d)
  d.conn, d.state, d.sub = nil, 'down', nil
  d.list_error, d.listing, d.listed = nil, false, false
  d.version_error, d.checking, d.version_ok = nil, false, false
  M.queue:drop_domain(d.path)
  M.changed()
end

--- Connects to one control socket (no-op while connected or connecting).
--- @param path string
function M.connect(path)
  local d = M.domains[path]
  if not d then
    d = { path = path, state = 'down', seq = Sequencer.new() }
    M.domains[path] = d
  end
  if d.state ~= 'down' then
    return
  end
  d.state = 'connecting'
  rpc.probe(path, function(ok, err)
    if not ok then
      d.state = 'down'
      -- Refused or gone: a socket left by a coordinator that exited (no
      -- domain there). Anything else (EACCES, ...) is a coordinator this
      -- client cannot ask.
      local quiet = err == nil or tostring(err):find('ECONNREFUSED', 1, true) or tostring(err):find('ENOENT', 1, true)
      local problem = nil
      if not quiet then
        problem = {
          what = 'cannot connect to ' .. text.inert(path) .. ': ' .. text.inert(err),
          fix = 'check the socket directory (:checkhealth lazaret)',
          short = 'cannot connect',
        }
      end
      if not vim.deep_equal(problem, d.connect_error) then
        d.connect_error = problem
        M.changed()
      end
      return
    end
    d.connect_error = nil
    d.seq:reset()
    d.shutting_down = false
    d.conn = rpc.connect(path, {
      notification = function(method, params)
        if method == protocol.subscription.notification and type(params) == 'table' and type(params.result) == 'table' then
          on_event(d, params.result)
        end
      end,
      exit = function()
        on_exit(d)
      end,
    })
    d.state = 'connected'
    d.connected_at = now_ms()
    M.check_version(d)
  end)
end

--- Asks a new connection's `domain/status` first. A coordinator of another
--- API version is not subscribed to nor asked for its requests (answering a
--- protocol this plugin does not speak is unsafe): the connection stays
--- open, unused, in state 'mismatch', so the problem lasts until that
--- coordinator ends (a new one on the same path is asked again). One of this
--- version is subscribed to, then listed.
function M.check_version(d)
  local conn = d.conn
  d.checking = true
  watchdog(d, conn, protocol.methods.domain_status, function()
    return d.checking
  end)
  conn:request(protocol.methods.domain_status, nil, function(err, status)
    if d.conn ~= conn then
      return
    end
    d.checking = false
    if err or type(status) ~= 'table' then
      d.list_error = {
        what = 'domain/status failed: ' .. text.cut(text.inert(err and rpc.message(err) or 'the answer is not a status'), 300),
        fix = '`lazaret status` tells; :checkhealth lazaret',
        short = 'domain/status failed',
      }
      return M.changed()
    end
    d.list_error = nil
    local mismatch = discovery.mismatch('coordinator', "this domain's coordinator", status.apiVersion)
    if mismatch then
      d.state, d.version_error = 'mismatch', mismatch
      return M.changed()
    end
    d.version_ok = true
    d.status, d.hash = status, status.domainHash
    -- Subscribe first, then list: nothing falls between the two.
    conn:request(protocol.subscription.subscribe, nil, function(e, id)
      if not e then
        d.sub = id
      end
    end)
    M.resync(d)
  end)
end

--- Finds the socket root and the working directory's domain.
--- `discovering` is cleared on every path: an answer, a failure, a time-out
--- (discovery.info kills a `lazaret` that hangs), or an error here.
function M.discover(callback)
  if discovering then
    return
  end
  discovering, last_discovery = true, vim.uv.now()
  local workspace = discovery.workspace()
  local ok, err = pcall(discovery.info, workspace and { workspace } or {}, function(info, err)
    discovering = false
    if info then
      M.info, M.info_error = info, nil
      M.current = info.folders and info.folders[1] or nil
      M.tick()
    else
      M.info_error = err or { what = '`lazaret editor-info` failed', fix = ':checkhealth lazaret', short = 'discovery failed' }
    end
    M.changed()
    if callback then
      callback(info, err)
    end
  end)
  if not ok then
    discovering = false
    M.info_error = { what = '`lazaret editor-info` could not be run: ' .. text.cut(text.inert(err), 300), fix = ':checkhealth lazaret', short = 'discovery failed' }
    M.changed()
    if callback then
      callback(nil, M.info_error)
    end
  end
end

--- One poll: connect to every coordinator that listens and is not connected.
function M.tick()
  if not M.info then
    if vim.uv.now() - last_discovery > 5000 then
      M.discover()
    end
    return
  end
  local paths = discovery.scan(M.info.socketRoot)
  if M.current and M.current.controlSocket and not vim.tbl_contains(paths, M.current.controlSocket) then
    if vim.uv.fs_stat(M.current.controlSocket) then
      table.insert(paths, M.current.controlSocket)
    end
  end
  for _, path in ipairs(paths) do
    M.connect(path)
  end
end

--- Starts watching (idempotent).
function M.start()
  if timer then
    return
  end
  timer = assert(vim.uv.new_timer())
  timer:start(0, config.options.poll_ms, vim.schedule_wrap(M.tick))
  M.discover()
  vim.api.nvim_create_autocmd('DirChanged', {
    group = vim.api.nvim_create_augroup('lazaret.domains', { clear = true }),
    callback = function()
      M.discover()
    end,
  })
end

function M.started()
  return timer ~= nil
end

--- Stops watching and closes every connection.
function M.stop()
  if timer then
    timer:stop()
    timer:close()
    timer = nil
  end
  pcall(vim.api.nvim_del_augroup_by_name, 'lazaret.domains')
  for path, d in pairs(M.domains) do
    if d.conn then
      d.conn:close()
    end
    M.queue:drop_domain(path)
  end
  M.domains = {}
  M.changed()
end

--- Connected domains of this API version, the working directory's first.
--- @return table[]
function M.connected()
  local out = {}
  for _, d in pairs(M.domains) do
    if d.state == 'connected' and d.conn and d.version_ok then
      out[#out + 1] = d
    end
  end
  local current = M.current and M.current.controlSocket
  table.sort(out, function(a, b)
    if (a.path == current) ~= (b.path == current) then
      return a.path == current
    end
    return a.path < b.path
  end)
  return out
end

--- A short name of a domain: `profile @ workspace (hash)`, inert.
function M.name(d)
  if type(d.status) ~= 'table' then
    return 'the coordinator at ' .. text.inert(d.path)
  end
  local s = d.status
  return text.inert(s.profile or '?') .. ' @ ' .. text.inert(s.workspace or '?') .. ' (' .. text.inert(s.domainHash or d.path) .. ')'
end

--- What this client could not ask, each {where, what, fix, short} (inert):
--- a failed discovery (no binary, another API version, ...), a coordinator
--- it cannot connect to, one that does not answer or fails `pending/list`,
--- one of another API version. While any is
--- there, no view may say that nothing is pending.
--- @return table[]
function M.problems()
  local out = {}
  if M.info_error and not M.info then
    out[#out + 1] = vim.tbl_extend('force', { where = 'Lazaret' }, M.info_error)
  elseif M.info_error then
    -- An earlier discovery worked: the connections still stand; say it.
    out[#out + 1] = vim.tbl_extend('force', { where = 'Lazaret (discovery again)' }, M.info_error)
  end
  local paths = vim.tbl_keys(M.domains)
  table.sort(paths)
  for _, path in ipairs(paths) do
    local d = M.domains[path]
    local problem = (d.state == 'connected' and d.list_error)
      or (d.state == 'mismatch' and d.version_error)
      or (d.state == 'down' and d.connect_error)
      or nil
    if problem then
      out[#out + 1] = vim.tbl_extend('force', { where = M.name(d) }, problem)
    end
  end
  return out
end
--- Whether discovery and the first connections are still under way.
function M.settling()
  if discovering or (M.info == nil and M.info_error == nil) then
    return true
  end
  for _, d in pairs(M.domains) do
    if d.state == 'connecting' or (d.state == 'connected' and not d.listed and not d.list_error) then
      return true
    end
  end
  return false
end

--- Runs `fn` once the first discovery and connections have settled (at most ~3 s).
function M.when_ready(fn)
  M.start()
  local tries = 0
  local function check()
    tries = tries + 1
    if not M.settling() or tries > 60 then
      return fn()
    end
    if M.info and tries == 1 then
      M.tick()
    end
    vim.defer_fn(check, 50)
  end
  check()
end

--- Picks the domain a command acts on: the one matching `arg` (hash prefix,
--- profile or workspace), else the working directory's, else the only one,
--- else asks.
--- @param arg string?
--- @param callback fun(d: table)
function M.pick(arg, callback)
  if M.settling() then
    return M.when_ready(function()
      if M.settling() then
        return vim.notify('Lazaret: the coordinators did not answer in time', vim.log.levels.WARN)
      end
      M.pick(arg, callback)
    end)
  end
  local list = M.connected()
  if arg and arg ~= '' then
    for _, d in ipairs(list) do
      local s = d.status or {}
      if (s.domainHash and vim.startswith(s.domainHash, arg)) or s.profile == arg or s.workspace == arg then
        return callback(d)
      end
    end
    return vim.notify('Lazaret: no running domain matches ' .. text.inert(arg), vim.log.levels.ERROR)
  end
  if #list == 0 then
    local problems = M.problems()
    if #problems > 0 then
      return vim.notify('Lazaret: ' .. problems[1].what .. ' (' .. problems[1].fix .. ')', vim.log.levels.ERROR)
    end
    return vim.notify('Lazaret: no running domain (start one with `lazaret run`)', vim.log.levels.WARN)
  end
  local current = M.current and M.current.controlSocket
  if list[1].path == current or #list == 1 then
    return callback(list[1])
  end
  vim.ui.select(list, { prompt = 'Lazaret domain', format_item = M.name }, function(d)
    if d then
      callback(d)
    end
  end)
end

--- Answers a pending request, in its own domain. `extra` may carry
--- `reason` (deny) or `argv` (edit). The request leaves the queue only when
--- the coordinator took the answer (or says it is no longer pending): a
--- failed answer leaves it listed.
--- @param key string the request's queue key (an item's `key`)
--- @param decision 'approve'|'deny'|'edit'|'abort'
--- @param extra table?
--- @param callback fun(err: table?)?
function M.respond(key, decision, extra, callback)
  callback = callback or function() end
  local item = M.queue:get(key)
  if not item then
    return callback({ code = rpc.codes.not_pending, message = 'the request is no longer pending' })
  end
  local d = M.domains[item.domain]
  if not d or not d.conn then
    return callback({ code = rpc.codes.not_connected, message = 'not connected to its coordinator' })
  end
  if item.kind == 'network' then
    return callback({ code = rpc.codes.not_pending, message = 'a network request is answered with network/respond' })
  end
  local id = item.escalation.requestId
  local params = vim.tbl_extend('force', { requestId = id, decision = decision, client = config.options.client }, extra or {})
  d.conn:request(protocol.methods.escalation_respond, params, function(err)
    if not err or err.code == rpc.codes.not_pending then
      M.queue:resolve(item.domain, id)
      M.changed()
    end
    callback(err)
  end)
end

--- Answers a pending network request, in its own domain, with
--- `network/respond`. As with respond(): the request leaves the queue only
--- when the coordinator took the answer (or says it is no longer pending).
--- @param key string the request's queue key
--- @param decision 'allow'|'allowEveryPort'|'deny' (`allowEveryPort`: every protocol and port of an address)
--- @param scope table a GrantScope: {type='session'}, {type='minutes', minutes=N}, {type='profile'}
--- @param callback fun(err: table?)?
function M.respond_network(key, decision, scope, callback)
  callback = callback or function() end
  local item = M.queue:get(key)
  if not item or item.kind ~= 'network' then
    return callback({ code = rpc.codes.network_not_pending, message = 'the network request is no longer pending' })
  end
  local d = M.domains[item.domain]
  if not d or not d.conn then
    return callback({ code = rpc.codes.not_connected, message = 'not connected to its coordinator' })
  end
  local id = item.request.requestId
  local params = { requestId = id, decision = decision, scope = scope, client = config.options.client }
  d.conn:request(protocol.methods.network_respond, params, function(err)
    if not err or err.code == rpc.codes.network_not_pending then
      M.queue:resolve(item.domain, id, 'network')
      M.changed()
    end
    callback(err)
  end)
end

return M
