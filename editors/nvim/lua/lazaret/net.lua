--- `:LazaretNet show|allow RULE|deny RULE|reload`: the running sandbox's
--- egress policy, shown and changed live through the coordinator. Learned
--- names come from the sandbox's DNS questions: everything is shown inert.
local protocol = require('lazaret.protocol')
local domains = require('lazaret.domains')
local rpc = require('lazaret.rpc')
local text = require('lazaret.text')

local M = {}

local function list(value)
  return type(value) == 'table' and value or {}
end

--- Learned addresses listed by `:LazaretNet show` (a notification: more
--- would scroll into a hit-enter prompt); `:Lazaret` counts them all.
local LEARNED_LINES = 5
--- Cells of one line of the policy (the learned names come from the
--- sandbox's DNS questions: as long as the agent likes).
local LINE_CELLS = 100

--- A NetworkPolicy as lines (pure: for tests too), inert, each line cut;
--- names are cut in the middle and listed whole (their end always shows:
--- D19), `… and N more` when they do not fit.
--- @param policy table
--- @return string[]
function M.policy_lines(policy)
  local function words(values)
    return table.concat(vim.tbl_map(text.inert, list(values)), ' ')
  end
  local out = {}
  local function add(line)
    out[#out + 1] = (text.cut(line, LINE_CELLS))
  end
  local room = LINE_CELLS - 9
  add('allow    ' .. (#list(policy.allow) > 0 and text.names(policy.allow, room) or '(nothing)'))
  add('deny     ' .. (#list(policy.deny) > 0 and text.names(policy.deny, room) or '(nothing)'))
  local learned = list(policy.learned)
  for i, entry in ipairs(learned) do
    if i > LEARNED_LINES then
      add(string.format('         … and %d more learned addresses (:Lazaret counts them)', #learned - LEARNED_LINES))
      break
    end
    local address = (text.name(entry.address, 45))
    local left = '), ' .. text.inert(entry.expiresInSeconds) .. ' s left'
    local names = text.names(entry.names, math.max(text.NAME_MIN, room - vim.fn.strdisplaywidth(address .. ' (' .. left)))
    add((i == 1 and 'learned  ' or '         ') .. address .. ' (' .. names .. left)
  end
  if #list(policy.upstreams) > 0 then
    add('dns      ' .. words(policy.upstreams))
  end
  -- Credential endpoints: the sidecar adds the key (never shown: it never
  -- leaves the sidecar) to requests for the origin.
  for i, endpoint in ipairs(list(policy.credentials)) do
    local answered = (endpoint.status1xx or 0) + (endpoint.status2xx or 0) + (endpoint.status3xx or 0)
      + (endpoint.status4xx or 0) + (endpoint.status5xx or 0)
    add(string.format('%s%s via 127.0.0.1:%s, %s added; %d request%s, %s refused',
      i == 1 and 'keys     ' or '         ', text.inert(endpoint.origin), text.inert(endpoint.port),
      text.inert(endpoint.header), answered, answered == 1 and '' or 's', text.inert(endpoint.rejected or 0)))
  end
  if policy.rules then
    add('rules    ' .. text.inert(policy.rules) .. ' kernel rules in the sidecar')
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
      local message = err.code == rpc.codes.no_sidecar
          and 'this domain has no Network Sidecar: its allowlist was empty when it started, so the sandbox has no network'
        or text.inert(rpc.message(err))
      vim.notify('Lazaret net ' .. action .. ' (' .. domains.name(d) .. '): ' .. message, vim.log.levels.ERROR)
      return callback(err, nil)
    end
    d.policy, d.policy_error, d.no_sidecar = policy, nil, false
    local head = action == 'show' and 'Egress policy of '
      or ('After `' .. action .. (rule and (' ' .. text.name(rule, 100)) or '') .. '`, egress policy of ')
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
