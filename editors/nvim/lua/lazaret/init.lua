--- Lazaret for Neovim: pending host escalations, sandbox status and the
--- agent-branch review, from every running Lazaret Session Coordinator.
--- `require('lazaret').setup{}` is optional; the defaults work.
local M = {}

--- Sets options (see `:help lazaret-options`) and starts watching the
--- coordinators unless `auto_start = false`.
--- @param opts table?
function M.setup(opts)
  local options = require('lazaret.config').set(opts)
  if options.auto_start and vim.v.vim_did_enter == 1 then
    M.start()
  end
end

--- Starts watching the coordinators (idempotent; commands do it too),
--- the pending window ready to open by itself (`auto_open`):
--- lazaret.domains opens it through a hook, as lazaret.approvals requires
--- lazaret.domains.
function M.start()
  local domains = require('lazaret.domains')
  domains.open_pending = domains.open_pending or function()
    require('lazaret.approvals').open()
  end
  domains.start()
end

--- Stops watching and closes every connection.
function M.stop()
  if package.loaded['lazaret.domains'] then
    require('lazaret.domains').stop()
  end
end

--- A statusline component: `⛨ 2 pending` (escalations and network
--- requests), '' when nothing is pending, and
--- `⛨ cannot ask: ...` when the plugin could not ask (see
--- :help lazaret-cannot-ask). No agent text; `%` doubled. Cheap: loads
--- nothing before the plugin has started.
--- @return string
function M.statusline()
  if not package.loaded['lazaret.domains'] then
    return ''
  end
  return require('lazaret.status').statusline()
end

--- The pending requests, oldest first (PendingEscalation tables, as the
--- coordinators sent them: agent text, not escaped; ids are unique per
--- domain only).
--- @return table[]
function M.pending()
  if not package.loaded['lazaret.domains'] then
    return {}
  end
  local out = {}
  for _, item in ipairs(require('lazaret.domains').queue:list()) do
    if item.kind ~= 'network' then
      out[#out + 1] = item.escalation
    end
  end
  return out
end

function M.open_pending()
  require('lazaret.approvals').open()
end

function M.open_rules()
  M.start()
  require('lazaret.rules').open()
end

--- The pending network requests, oldest first (PendingNetworkRequest
--- tables as the coordinators sent them: `destination` is the sandbox's
--- text, not escaped).
--- @return table[]
function M.network_requests()
  if not package.loaded['lazaret.domains'] then
    return {}
  end
  local out = {}
  for _, item in ipairs(require('lazaret.domains').queue:list()) do
    if item.kind == 'network' then
      out[#out + 1] = item.request
    end
  end
  return out
end

function M.open_status()
  M.start()
  require('lazaret.status').open()
end

--- @param domain string? hash prefix, profile or workspace
function M.diff(domain)
  M.start()
  require('lazaret.diff').open(domain)
end

--- @param domain string?
function M.merge(domain)
  M.start()
  require('lazaret.diff').merge(domain)
end

--- @param args string[] show | allow RULE | deny RULE | reload
function M.net(args)
  require('lazaret.net').command(args)
end

return M
