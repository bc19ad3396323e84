--- `:Lazaret`: domains, sessions, agent branch and network policy in a
--- float, kept current by the coordinators' events; and the statusline
--- component. Everything a coordinator reports is shown inert (lazaret.text):
--- learned DNS names come from the sandbox's queries, a container error may
--- quote the agent; names are cut in the middle, their end always shown.
local config = require('lazaret.config')
local domains = require('lazaret.domains')
local shell = require('lazaret.shell')
local text = require('lazaret.text')
local window = require('lazaret.window')

local M = {}

M.win, M.buf = nil, nil

local function is_open()
  return M.win ~= nil and vim.api.nvim_win_is_valid(M.win)
end

local function list(value)
  return type(value) == 'table' and value or {}
end

--- A policy in one line.
--- @param d table
--- @return string
function M.policy_text(d)
  if d.policy_error then
    return d.no_sidecar and 'no network (no Network Sidecar)' or ('unknown: ' .. text.inert(d.policy_error))
  end
  local p = d.policy
  if type(p) ~= 'table' then
    return '…'
  end
  -- Names (granted ones come from the sandbox's questions) are cut in the
  -- middle and listed whole: their end always shows (D19).
  local parts = {}
  parts[#parts + 1] = 'allow ' .. (#list(p.allow) > 0 and text.names(p.allow, 160) or '(nothing)')
  if #list(p.deny) > 0 then
    parts[#parts + 1] = 'deny ' .. text.names(p.deny, 160)
  end
  if #list(p.learned) > 0 then
    parts[#parts + 1] = #p.learned .. ' learned address' .. (#p.learned == 1 and '' or 'es')
  end
  if #list(p.credentials) > 0 then
    -- The keys stay in the sidecar: only that there are endpoints.
    parts[#parts + 1] = #p.credentials .. ' API key endpoint' .. (#p.credentials == 1 and '' or 's') .. ' (:LazaretNet show)'
  end
  return table.concat(parts, '; ')
end

--- The lines of the status window (pure over the domains' state).
--- @return string[]
function M.lines()
  local out = {}
  local connected = domains.connected()
  local pending = domains.queue:count()
  out[#out + 1] = string.format(
    'Lazaret: %d running domain%s, %d pending request%s   (r refresh, q close)',
    #connected,
    #connected == 1 and '' or 's',
    pending,
    pending == 1 and '' or 's'
  )
  local info = domains.info
  if info then
    out[#out + 1] = 'lazaret ' .. text.inert(info.version or '(version unknown)') .. ', API ' .. text.inert(info.apiVersion)
      .. ', sockets in ' .. text.inert(info.socketRoot)
  end
  local problems = domains.problems()
  local width = math.max(40, vim.o.columns - 8)
  for _, problem in ipairs(problems) do
    for i, line in ipairs(text.wrap(problem.where .. ': ' .. problem.what, width - 2)) do
      out[#out + 1] = (i == 1 and '! ' or '  ') .. line
    end
    for i, line in ipairs(text.wrap(problem.fix, width - 7)) do
      out[#out + 1] = (i == 1 and '  fix: ' or '       ') .. line
    end
  end
  local current = domains.current
  local current_running = false
  for _, d in ipairs(connected) do
    local s = d.status or {}
    local is_current = current and current.controlSocket == d.path
    current_running = current_running or is_current
    out[#out + 1] = ''
    out[#out + 1] = string.format('● %s%s', domains.name(d), is_current and '  [working directory]' or '')
    local container = text.inert(s.containerName or '?') .. ' ' .. text.inert(s.containerState or '?')
    if s.containerError then
      container = container .. ': ' .. text.cut(text.inert(s.containerError), 200)
    end
    if d.shutting_down then
      container = container .. ' (shutting down)'
    end
    out[#out + 1] = '    container  ' .. container
    local sessions = list(s.sessions)
    out[#out + 1] = string.format('    sessions   %d', #sessions)
    for _, session in ipairs(sessions) do
      out[#out + 1] = '               ' .. text.inert(session.client or '?') .. ' pid ' .. text.inert(session.pid) .. ': '
        .. text.cut(shell.quote(list(session.command)), 200)
    end
    out[#out + 1] = '    branch     ' .. text.inert(s.agentBranch or '(workspace mounted directly: no agent branch)')
      .. (type(s.agentBranchHead) == 'string' and (' at ' .. text.inert(s.agentBranchHead:sub(1, 12)))
        or (s.agentBranch and ' (no agent commit yet)' or ''))
    if type(s.networkError) == 'string' then
      -- The Network Sidecar stopped: the sandbox has no working network.
      out[#out + 1] = '    network    NONE: ' .. text.cut(text.inert(s.networkError), 200)
    else
      out[#out + 1] = '    network    ' .. M.policy_text(d)
    end
    local mine = 0
    for _, item in ipairs(domains.queue:list()) do
      if item.domain == d.path then
        mine = mine + 1
      end
    end
    out[#out + 1] = string.format('    pending    %d', mine)
  end
  if current and not current_running then
    out[#out + 1] = ''
    out[#out + 1] = '○ ' .. text.inert(current.profile or '?') .. ' @ ' .. text.inert(current.workspace or '?') .. ' ('
      .. text.inert(current.domainHash or '?') .. ')  [working directory]: not running'
  end
  if #connected == 0 and not current and #problems == 0 then
    out[#out + 1] = ''
    out[#out + 1] = 'No domain is running. Start one with `lazaret run` in a git repository.'
  end
  return out
end

function M.render()
  if not is_open() or not vim.api.nvim_buf_is_valid(M.buf) then
    return
  end
  window.show(M.win, M.buf, M.lines())
end

function M.close()
  window.close(M.win)
  M.win = nil
end

--- Opens the status window (`:Lazaret`).
function M.open()
  domains.start()
  if is_open() then
    vim.api.nvim_set_current_win(M.win)
    return M.render()
  end
  M.win, M.buf = window.open('lazaret://status', ' Lazaret ', {
    on_wipe = function()
      M.win, M.buf = nil, nil
    end,
  })
  window.map(M.buf, 'q', M.close, 'Lazaret: close')
  window.map(M.buf, 'r', function()
    domains.discover()
    for _, d in ipairs(domains.connected()) do
      domains.resync(d)
    end
  end, 'Lazaret: refresh')
  M.render()
end

--- The statusline component: `⛨ 2 pending`, '' when nothing is pending,
--- and what could not be asked when that is so (`⛨ cannot ask: no lazaret
--- binary`, `⛨ 2 pending, cannot ask 1`): never an empty component for a
--- client that could not ask. Only the plugin's own words and numbers (no
--- agent text), with `%` doubled, so it is safe in any statusline syntax.
--- @return string
function M.statusline()
  local n = domains.queue:count()
  local problems = domains.settling() and {} or domains.problems()
  local icon = config.options.statusline_icon
  local out
  if #problems > 0 and n == 0 then
    out = string.format('%s cannot ask: %s', icon, problems[1].short or 'see :LazaretPending')
  elseif #problems > 0 then
    out = string.format('%s %d pending, cannot ask %d', icon, n, #problems)
  elseif n > 0 then
    out = string.format('%s %d pending', icon, n)
  else
    return ''
  end
  return text.statusline(out)
end

domains.on_change(function()
  if is_open() then
    M.render()
  end
end)

return M
