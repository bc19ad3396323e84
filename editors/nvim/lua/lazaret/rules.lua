--- The rules window (`:LazaretRules`): per running domain, the auto-approve
--- rules in force (entry and where it comes from) and the network grants
--- and remembered refusals (verdict, destination, scope, time left, hits,
--- who decided), from `rules/list`, fetched again on `rulesChanged`. A key
--- revokes the rule under the cursor after a confirmation (`rules/revoke`).
--- Destinations come from the sandbox's DNS questions and entries from the
--- configuration: everything is shown inert (lazaret.text), cut to the window,
--- a destination in the middle so that its end always shows (D19). A grant
--- for an address names what it covers: its one protocol and port
--- (`10.9.0.7/32 tcp/8081`), or every protocol and port of it (`everyPort`).
local config = require('lazaret.config')
local domains = require('lazaret.domains')
local protocol = require('lazaret.protocol')
local rpc = require('lazaret.rpc')
local text = require('lazaret.text')
local window = require('lazaret.window')

local M = {}

local ns = vim.api.nvim_create_namespace('lazaret.rules')
M.win, M.buf = nil, nil
--- Rules by domain path: { rules = Rules?, error = string?, fetching = bool }.
M.state = {}
--- Line (1-based) -> { domain = path, id, kind = 'autoApprove'|'network', rule } of the last render.
local line_rules = {}
local timer = nil

local function is_open()
  return M.win ~= nil and vim.api.nvim_win_is_valid(M.win)
end
M.is_open = is_open

local function list(value)
  return type(value) == 'table' and value or {}
end

--- `42 s`, `14 min 5 s`, `3 h 2 min`.
--- @param ms number
--- @return string
function M.duration(ms)
  local s = math.max(0, math.floor(ms / 1000))
  if s < 60 then
    return string.format('%d s', s)
  elseif s < 3600 then
    return string.format('%d min %d s', math.floor(s / 60), s % 60)
  end
  return string.format('%d h %d min', math.floor(s / 3600), math.floor((s % 3600) / 60))
end

--- A GrantScope in words (and the time left of a timed one).
--- @param grant table a NetworkGrant
--- @param now integer ms
--- @return string
function M.scope_text(grant, now)
  local scope = type(grant.scope) == 'table' and grant.scope or {}
  local out
  if scope.type == 'session' then
    out = 'this session'
  elseif scope.type == 'profile' then
    out = 'the profile'
  elseif scope.type == 'minutes' then
    out = string.format('%s min', text.inert(scope.minutes))
  else
    out = text.inert(scope.type or '?')
  end
  if tonumber(grant.expiresAtMs) then
    out = out .. ', ' .. M.duration(grant.expiresAtMs - now) .. ' left'
  end
  return out
end

--- What a grant covers, inert, in at most `cells` cells: the name (cut in
--- the middle), or the address and its protocol and port, or the address
--- and `every protocol and port`.
--- @param grant table a NetworkGrant
--- @param cells integer
--- @return string
function M.covers(grant, cells)
  local service = ''
  if grant.everyPort == true then
    service = ' every protocol and port'
  elseif type(grant.service) == 'string' then
    service = ' ' .. text.inert(grant.service)
  end
  local destination = text.name(grant.destination, math.max(text.NAME_MIN, cells - vim.fn.strdisplaywidth(service)))
  return destination .. service
end

--- The window's lines (pure: for tests too).
--- @param sections table[] { name = string (inert), domain = path, rules = Rules?, error = string?, fetching = bool? }
--- @param opts {width: integer?, now: integer?}?
--- @return string[] lines
--- @return table[] marks {line (0-based), group}
--- @return table<integer, table> rows line (1-based) -> { domain, id, kind, rule }
function M.render_lines(sections, opts)
  opts = opts or {}
  local width = opts.width or 120
  local now = opts.now or domains.now_ms()
  local keys = config.options.keys
  local lines, marks, rows = {}, {}, {}
  local function add(line, group, row)
    lines[#lines + 1] = line
    if group then
      marks[#marks + 1] = { #lines - 1, group }
    end
    if row then
      rows[#lines] = row
    end
  end
  add('Lazaret: rules', 'LazaretTitle')
  add(
    text.inert(string.format('%s revoke the rule under the cursor  %s refresh  %s close', keys.revoke, keys.refresh, keys.close)),
    'LazaretHint'
  )
  if #sections == 0 then
    add('')
    add('No domain is running (rules are listed by a running coordinator).', 'LazaretHint')
  end
  local room = math.max(30, width - 4)
  for _, section in ipairs(sections) do
    add('')
    add('● ' .. (text.cut(section.name, width - 2)), 'LazaretTitle')
    local rules = section.rules
    if section.error then
      for i, line in ipairs(text.wrap('rules/list failed: ' .. section.error, width - 4)) do
        add((i == 1 and '  ! ' or '    ') .. line, 'LazaretProblem')
      end
    elseif type(rules) ~= 'table' then
      add('  asking the coordinator…', 'LazaretHint')
    else
      local auto = list(rules.autoApprove)
      add(string.format('  auto-approve (%d)', #auto), 'LazaretLabel')
      if #auto == 0 then
        add('    (none)')
      end
      for _, rule in ipairs(auto) do
        local row = { domain = section.domain, id = rule.id, kind = 'autoApprove', rule = rule }
        add('    ' .. (text.cut(text.inert(rule.entry) .. '   from ' .. text.inert(rule.source), room)), nil, row)
      end
      local grants = list(rules.network)
      add(string.format('  network (%d)', #grants), 'LazaretLabel')
      if #grants == 0 then
        add('    (none)')
      end
      for _, grant in ipairs(grants) do
        local row = { domain = section.domain, id = grant.id, kind = 'network', rule = grant }
        local verdict = grant.verdict == 'deny' and 'deny ' or (grant.verdict == 'allow' and 'allow' or text.inert(grant.verdict))
        add(
          '    ' .. verdict .. '  ' .. M.covers(grant, math.max(20, room - 8)),
          grant.verdict == 'deny' and 'LazaretRisk' or 'LazaretCommand',
          row
        )
        add(
          '           ' .. (text.cut(string.format('for %s; %s hit%s; by %s', M.scope_text(grant, now), text.inert(grant.hits or 0),
            grant.hits == 1 and '' or 's', text.inert(grant.decidedBy or '?')), math.max(20, room - 7))),
          'LazaretLabel',
          row
        )
      end
    end
  end
  return lines, marks, rows
end

--- The sections of the connected domains, the working directory's first.
function M.sections()
  local out = {}
  for _, d in ipairs(domains.connected()) do
    local st = M.state[d.path] or {}
    out[#out + 1] = { name = domains.name(d), domain = d.path, rules = st.rules, error = st.error }
  end
  return out
end

--- The rule under the cursor, or nil.
function M.current()
  if not is_open() or vim.api.nvim_win_get_buf(M.win) ~= M.buf then
    return nil
  end
  return line_rules[vim.api.nvim_win_get_cursor(M.win)[1]]
end

--- Redraws the window; the cursor stays on its rule (by id) when it is still listed.
function M.render()
  if not is_open() or not vim.api.nvim_buf_is_valid(M.buf) then
    return
  end
  local keep = M.current()
  local old_row = vim.api.nvim_win_get_cursor(M.win)[1]
  local lines, marks, rows = M.render_lines(M.sections(), { width = window.text_width() })
  window.show(M.win, M.buf, lines, ns, marks)
  line_rules = rows
  local target = math.min(old_row, #lines)
  if keep then
    for row = 1, #lines do
      local r = rows[row]
      if r and r.domain == keep.domain and r.id == keep.id then
        target = row
        break
      end
    end
  end
  vim.api.nvim_win_set_cursor(M.win, { math.max(1, target), 0 })
end

--- Asks one domain's `rules/list` (and renders when it answers).
function M.fetch(d)
  if not d or not d.conn then
    return
  end
  local st = M.state[d.path] or {}
  M.state[d.path] = st
  st.generation = (st.generation or 0) + 1
  local generation, conn = st.generation, d.conn
  conn:request(protocol.methods.rules_list, nil, function(err, rules)
    if st.generation ~= generation or d.conn ~= conn then
      return
    end
    if err or type(rules) ~= 'table' then
      st.rules, st.error = nil, text.cut(text.inert(err and rpc.message(err) or 'the answer is not a Rules object'), 300)
    else
      st.rules, st.error = rules, nil
    end
    M.render()
  end)
end

--- Fetches every connected domain's rules.
function M.refresh()
  for _, d in ipairs(domains.connected()) do
    M.fetch(d)
  end
end

--- Revokes a rule (a row of render_lines) after a confirmation.
--- @param row table? { domain, id, kind, rule }; the one under the cursor when nil
function M.revoke(row)
  row = row or M.current()
  if not row then
    return vim.notify('Lazaret: no rule under the cursor', vim.log.levels.INFO)
  end
  local what
  if row.kind == 'network' then
    what = string.format('Revoke the network %s of %s (%s)?', row.rule.verdict == 'deny' and 'refusal' or 'grant',
      M.covers(row.rule, 200), M.scope_text(row.rule, domains.now_ms()))
  else
    what = 'Revoke the auto-approve rule ' .. text.cut(text.inert(row.rule.entry), 200)
      .. ' for this run of the domain (the configuration file is unchanged)?'
  end
  vim.ui.select({ 'Revoke it', 'Cancel' }, { prompt = what }, function(choice)
    if choice ~= 'Revoke it' then
      return
    end
    local d = domains.domains[row.domain]
    if not d or not d.conn then
      return vim.notify('Lazaret: revoke failed: not connected to its coordinator', vim.log.levels.ERROR)
    end
    d.conn:request(protocol.methods.rules_revoke, { id = row.id, client = config.options.client }, function(err)
      if err and err.code == rpc.codes.rule_not_found then
        vim.notify('Lazaret: that rule was already revoked or expired', vim.log.levels.INFO)
      elseif err then
        vim.notify('Lazaret: revoke failed: ' .. text.inert(rpc.message(err)), vim.log.levels.ERROR)
      end
      M.fetch(d)
    end)
  end)
end

function M.close()
  window.close(M.win)
  M.win = nil
end

local function stop_timer()
  if timer then
    timer:stop()
    timer:close()
    timer = nil
  end
end

--- Opens (or focuses) the rules window.
function M.open()
  domains.start()
  window.highlights()
  if is_open() then
    vim.api.nvim_set_current_win(M.win)
    M.refresh()
    return M.render()
  end
  M.win, M.buf = window.open('lazaret://rules', ' Lazaret rules ', {
    cursorline = true,
    on_wipe = function()
      M.win, M.buf = nil, nil
      line_rules = {}
      stop_timer()
    end,
  })
  local keys = config.options.keys
  window.map(M.buf, keys.revoke, M.revoke, 'Lazaret: revoke the rule under the cursor (asks first)')
  window.map(M.buf, keys.refresh, M.refresh, 'Lazaret: list the rules again')
  window.map(M.buf, keys.close, M.close, 'Lazaret: close')
  -- Time left counts down while the window is open.
  stop_timer()
  timer = assert(vim.uv.new_timer())
  timer:start(1000, 1000, vim.schedule_wrap(M.render))
  M.render()
  M.refresh()
end

domains.on_rules_changed(function(d)
  if is_open() then
    M.fetch(d)
  else
    -- Fetched afresh when the window opens.
    M.state[d.path] = nil
  end
end)

domains.on_change(function()
  if is_open() then
    M.render()
  end
end)

return M
