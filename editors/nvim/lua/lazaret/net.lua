--- `:LazaretNet show|allow RULE|deny RULE|reload`: the running sandbox's
--- egress policy, shown and changed live through the coordinator.
local protocol = require('lazaret.protocol')
local domains = require('lazaret.domains')
local rpc = require('lazaret.rpc')

local M = {}

local function list(value)
  return type(value) == 'table' and value or {}
end

--- A NetworkPolicy as lines (pure: for tests too).
--- @param policy table
--- @return string[]
function M.policy_lines(policy)
  local out = {}
  out[#out + 1] = 'allow    ' .. (#list(policy.allow) > 0 and table.concat(list(policy.allow), ' ') or '(nothing)')
  out[#out + 1] = 'deny     ' .. (#list(policy.deny) > 0 and table.concat(list(policy.deny), ' ') or '(nothing)')
  for i, learned in ipairs(list(policy.learned)) do
    out[#out + 1] = string.format(
      '%s%s (%s), %s s left',
      i == 1 and 'learned  ' or '         ',
      tostring(learned.address),
      table.concat(list(learned.names), ' '),
      tostring(learned.expiresInSeconds)
    )
  end
  if #list(policy.upstreams) > 0 then
    out[#out + 1] = 'dns      ' .. table.concat(policy.upstreams, ' ')
  end
  if policy.rules then
    out[#out + 1] = 'rules    ' .. tostring(policy.rules) .. ' kernel rules in the sidecar'
  end
  return out
end

M.actions = { 'show', 'allow', 'deny', 'reload' }

--- Runs one action on a domain and reports the policy now in force.
--- @param d table
--- @param action string
--- @param rule string?
--- @param callback fun(err: table?, policy: table?)?
function M.run_for(d, action, rule, callback)
  callback = callback or function() end
  local params = (action == 'allow' or action == 'deny') and { rule = rule } or nil
  d.conn:request(protocol.methods['network_' .. action], params, function(err, policy)
    if err then
      local text = err.code == rpc.codes.no_sidecar
          and 'this domain has no Network Sidecar: its allowlist was empty when it started, so the sandbox has no network'
        or rpc.message(err)
      vim.notify('Lazaret net ' .. action .. ' (' .. domains.name(d) .. '): ' .. text, vim.log.levels.ERROR)
      return callback(err, nil)
    end
    d.policy, d.policy_error = policy, nil
    local head = action == 'show' and 'Egress policy of ' or ('After `' .. action .. (rule and (' ' .. rule) or '') .. '`, egress policy of ')
    vim.notify(head .. domains.name(d) .. ':\n' .. table.concat(M.policy_lines(policy), '\n'), vim.log.levels.INFO)
    domains.changed()
    callback(nil, policy)
  end)
end

--- `:LazaretNet {args}`
--- @param args string[]
function M.command(args)
  local action, rule = args[1] or 'show', args[2]
  if not vim.tbl_contains(M.actions, action) then
    return vim.notify('Lazaret: :LazaretNet show|allow RULE|deny RULE|reload', vim.log.levels.ERROR)
  end
  if (action == 'allow' or action == 'deny') and (rule == nil or rule == '') then
    return vim.notify('Lazaret: :LazaretNet ' .. action .. ' needs a RULE (CIDR, address or DNS name)', vim.log.levels.ERROR)
  end
  local domain_arg = (action == 'allow' or action == 'deny') and args[3] or args[2]
  domains.pick(domain_arg, function(d)
    M.run_for(d, action, rule)
  end)
end

return M
