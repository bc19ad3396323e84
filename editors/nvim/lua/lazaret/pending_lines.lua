--- What the pending window shows, as lines (pure: no window, for tests
--- too): the title, whether keys answer yet (DECISIONS D20: armed or
--- disarmed, how many keys were discarded) and the answer selected (named
--- exactly: the command that will run, the name, the address and its
--- protocol and port, or every protocol and port of it), the keys, then
--- every request with its lines. lazaret.approvals draws them and reads the
--- keys.
---
--- Everything in a request is agent text and shown inert (lazaret.text):
--- long text is cut to the window with a note saying so (the program and the
--- start of the argv first); a name or an address is cut in the middle so
--- that its end, which decides who controls it, always shows (D19).
local arming = require('lazaret.arming')
local config = require('lazaret.config')
local domains = require('lazaret.domains')
local shell = require('lazaret.shell')
local text = require('lazaret.text')

local M = {}

--- A request's list field as a table: `{}` when the coordinator sent none
--- (or something else).
--- @param value any
--- @return table
local function list(value)
  if type(value) ~= 'table' then
    return {}
  end
  return value
end
M.list = list

--- The room of a value after its label (`    reasons  ` is 13 cells): a
--- longer value is cut with its note inside that room, so the note shows.
local LABEL = 13

--- The most minutes a timed network answer may last (the coordinator's bound).
M.MAX_MINUTES = 1440

--- How many lines the command of a selected answer may take in the window.
local SELECTION_LINES = 8

--- The typed number of minutes of a timed answer: a whole number from 1 to
--- 1440 (spaces around it allowed), else nil and why.
--- @param s string?
--- @return integer? minutes
--- @return string? err
function M.parse_minutes(s)
  s = vim.trim(type(s) == 'string' and s or '')
  local n = s:match('^%d+$') and tonumber(s) or nil
  if not n or n < 1 or n > M.MAX_MINUTES then
    return nil, string.format('not a whole number of minutes from 1 to %d', M.MAX_MINUTES)
  end
  return math.floor(n), nil
end

--- The answer of a network-request action (pure: for tests too).
--- @param action 'allow_session'|'allow_minutes'|'allow_profile'|'deny_session'|'deny_profile'
--- @param minutes integer? for 'allow_minutes'
--- @param every_port boolean? an allow opens every protocol and port of the address
--- @return string? decision 'allow', 'allowEveryPort' or 'deny'
--- @return table? scope the GrantScope
function M.network_answer(action, minutes, every_port)
  local allow = every_port and 'allowEveryPort' or 'allow'
  if action == 'allow_session' then
    return allow, { type = 'session' }
  elseif action == 'allow_minutes' then
    if type(minutes) ~= 'number' or minutes ~= math.floor(minutes) or minutes < 1 or minutes > M.MAX_MINUTES then
      return nil, nil
    end
    return allow, { type = 'minutes', minutes = minutes }
  elseif action == 'allow_profile' then
    return allow, { type = 'profile' }
  elseif action == 'deny_session' then
    return 'deny', { type = 'session' }
  elseif action == 'deny_profile' then
    return 'deny', { type = 'profile' }
  end
  return nil, nil
end

--- Whether a network request is to an address (one protocol and port of it).
function M.is_address(request)
  return type(request) == 'table' and type(request.service) == 'string'
end

--- What allowing `request` opens, in words (inert; the name cut in the
--- middle to `cells`): `grant.test`, `10.9.0.7/32 tcp/8081 only`, or
--- `EVERY protocol and port of 10.9.0.7/32` and, as a second line, that it
--- is wider than the request.
--- @param request table a PendingNetworkRequest
--- @param every_port boolean?
--- @param cells integer?
--- @return string[] lines
function M.opened(request, every_port, cells)
  local destination = (text.name(request.destination or '?', cells or 120))
  if not M.is_address(request) then
    return { destination }
  end
  local service = text.inert(request.service)
  if every_port then
    return { 'EVERY protocol and port of ' .. destination, '(wider than the request: ' .. service .. ')' }
  end
  return { destination .. ' ' .. service .. ' only' }
end

--- A GrantScope of an answer in words.
local function scope_words(action, minutes)
  if action == 'allow_minutes' then
    return string.format('for %d minute%s', minutes or 0, minutes == 1 and '' or 's')
  elseif action == 'allow_profile' then
    return 'for the profile (kept until revoked)'
  end
  return 'for this session (until the sandbox stops)'
end

--- `s` (inert) in lines of at most `cells` cells, every character kept (a
--- command must be named exactly: no space is dropped or added); a line
--- ends after a space between words when one is near its end.
local function chunks(s, cells)
  local out = {}
  while vim.fn.strdisplaywidth(s) > cells do
    local part = vim.fn.strcharpart(s, 0, cells)
    while vim.fn.strdisplaywidth(part) > cells do
      part = vim.fn.strcharpart(part, 0, vim.fn.strchars(part) - 1)
    end
    local at = part:match('^.*%S() %S') -- after the last single space between words
    if at and at > #part / 2 then
      part = part:sub(1, at)
    end
    out[#out + 1] = part
    s = s:sub(#part + 1)
  end
  out[#out + 1] = s
  return out
end

--- The lines naming a selected answer (what <CR> sends), inert.
--- @param item table the queue item it answers
--- @param selection table {kind = 'approve'|'edit'|'network', action?, minutes?, every_port?, argv?}
--- @param width integer
--- @return string[]
function M.selection_lines(item, selection, width)
  local out = { 'CONFIRM with <CR> (any other key cancels and disarms):' }
  if selection.kind == 'network' then
    for i, line in ipairs(M.opened(item.request, selection.every_port, math.max(text.NAME_MIN, width - 10))) do
      out[#out + 1] = (i == 1 and '  allow ' or '        ') .. line
    end
    out[#out + 1] = '  ' .. scope_words(selection.action, selection.minutes)
    return out
  end
  local e = item.escalation
  local argv = selection.kind == 'edit' and selection.argv or list(e.argv)
  out[#out + 1] = selection.kind == 'edit' and '  run on the host INSTEAD of the request, in ' .. (text.name(e.cwd or '?', width - 50)) .. ':'
    or '  approve: run on the host, in ' .. (text.name(e.cwd or '?', width - 32)) .. ':'
  local lines = chunks(shell.quote(argv), math.max(20, width - 4))
  for i, line in ipairs(lines) do
    if i == SELECTION_LINES and #lines > SELECTION_LINES then
      local rest = 0
      for j = i, #lines do
        rest = rest + vim.fn.strchars(lines[j])
      end
      out[#out + 1] = string.format('    … (cut: %s more characters; %s in the window opens the whole request once this is cancelled)',
        text.thousands(rest), text.inert(config.options.keys.full))
      break
    end
    out[#out + 1] = '    ' .. line
  end
  return out
end

--- The window's footer (always in view, also when the list scrolls): armed
--- or not and the count, or what <CR> will send, in at most `width` cells.
--- @param state {armed: boolean, discarded: integer, selection: table?}
--- @param item table? the queue item of the selection
--- @param width integer
--- @return string
function M.footer(state, item, width)
  local selected = state.selection
  if selected and item then
    local what
    if selected.kind == 'network' then
      local opened = M.opened(item.request, selected.every_port, math.max(text.NAME_MIN, width - 40))
      what = 'allow ' .. opened[1] .. ', ' .. scope_words(selected.action, selected.minutes)
    else
      what = (selected.kind == 'edit' and 'run instead: ' or 'run: ') .. shell.quote(selected.argv or list(item.escalation.argv))
    end
    return (text.cut(' <CR> confirms (see the top): ' .. what, math.max(20, width - 2))) .. ' '
  end
  local n = state.discarded or 0
  return string.format(' %s (%d key%s discarded) ', state.armed and 'ARMED' or 'DISARMED: keys are discarded until 1 s without a key', n,
    n == 1 and '' or 's')
end

--- `1 pending escalation`, `2 pending network requests`, `1 pending
--- escalation and 1 network request`.
local function summary(commands, networks)
  local function count(n, what)
    return string.format('%d %s%s', n, what, n == 1 and '' or 's')
  end
  if networks == 0 then
    return count(commands, 'pending escalation')
  elseif commands == 0 then
    return count(networks, 'pending network request')
  end
  return count(commands, 'pending escalation') .. ' and ' .. count(networks, 'network request')
end

--- The line saying whether keys answer yet, and how many keys were
--- discarded since the window opened.
--- @param state {armed: boolean, discarded: integer}
function M.arming_line(state)
  local n = state.discarded or 0
  local discarded = string.format('(%d key%s discarded)', n, n == 1 and '' or 's')
  if state.armed then
    return 'ARMED: keys answer the request under the cursor ' .. discarded
  end
  return string.format('DISARMED: keys are discarded until %g s without a key %s', arming.DELAY_MS / 1000, discarded)
end

--- The window's lines and their highlights (pure: for tests too).
--- @param items table[] queue items, oldest first
--- @param opts {width: integer?, problems: table[]?, settling: boolean?, arming: table?}?
---   `arming`: {armed, discarded, selection (with its `key`), every_port (the key of the request it is on for)}
--- @return string[] lines
--- @return table[] marks {line (0-based), group}
--- @return table<integer, string> keys line (1-based) -> queue key
function M.render_lines(items, opts)
  opts = opts or {}
  local width = opts.width or 120
  local problems = opts.problems or {}
  local state = opts.arming or { armed = false, discarded = 0 }
  local keys = config.options.keys
  local lines, marks, line_to_key = {}, {}, {}
  local function add(line, group, key)
    lines[#lines + 1] = line
    if group then
      marks[#marks + 1] = { #lines - 1, group }
    end
    if key then
      line_to_key[#lines] = key
    end
  end
  local room = math.max(30, width - LABEL)
  local n = #items
  local networks = 0
  for _, item in ipairs(items) do
    if item.kind == 'network' then
      networks = networks + 1
    end
  end
  local counted = summary(n - networks, networks)
  if #problems > 0 then
    add(
      n == 0 and 'Lazaret: cannot tell what is pending: a coordinator could not be asked'
        or string.format('Lazaret: %s listed, but a coordinator could not be asked', counted),
      'LazaretProblem'
    )
    -- The plugin's own words (agent text in them is inert): wrapped, not cut.
    for _, problem in ipairs(problems) do
      for i, line in ipairs(text.wrap(problem.where .. ': ' .. problem.what, width - 4)) do
        add((i == 1 and '  ! ' or '    ') .. line, 'LazaretProblem')
      end
      for i, line in ipairs(text.wrap(problem.fix, width - 9)) do
        add((i == 1 and '    fix: ' or '         ') .. line, 'LazaretHint')
      end
    end
  elseif n == 0 and opts.settling then
    add('Lazaret: asking the coordinators…', 'LazaretTitle')
  elseif n == 0 then
    add('Lazaret: no pending escalations or network requests', 'LazaretTitle')
  else
    add('Lazaret: ' .. counted, 'LazaretTitle')
  end
  -- The plugin's own words: wrapped to the window when it is narrow, at
  -- the double spaces between their parts first.
  local function say(line, group)
    if vim.fn.strdisplaywidth(line) <= width then
      return add(line, group)
    end
    local indent = line:match('^ *')
    local room = math.max(20, width - #indent - 4)
    local parts, current = {}, nil
    for _, part in ipairs(vim.split(line:sub(#indent + 1), '  +')) do
      local candidate = current and (current .. '  ' .. part) or part
      if current and vim.fn.strdisplaywidth(candidate) > room then
        parts[#parts + 1] = current
        current = part
      else
        current = candidate
      end
    end
    parts[#parts + 1] = current
    local first = true
    for _, part in ipairs(parts) do
      local pieces = vim.fn.strdisplaywidth(part) <= room and { part } or text.wrap(part, room)
      for _, piece in ipairs(pieces) do
        add(indent .. (first and '' or '    ') .. piece, group)
        first = false
      end
    end
  end
  say(M.arming_line(state), state.armed and 'LazaretArmed' or 'LazaretDisarmed')
  local selected = state.selection
  if selected then
    for _, item in ipairs(items) do
      if item.key == selected.key then
        for _, line in ipairs(M.selection_lines(item, selected, width)) do
          say(line, 'LazaretConfirm')
        end
      end
    end
  end
  local k = vim.tbl_map(text.inert, keys)
  say(string.format('%s approve  %s deny  %s edit  %s whole request  %s close   (the request under the cursor)',
    k.approve, k.deny, k.edit, k.full, k.close), 'LazaretHint')
  say(string.format('%s and %s, and every network allow, select the answer: the window names it, <CR> confirms it', k.approve, k.edit),
    'LazaretHint')
  if networks > 0 then
    say(string.format('network: %s allow (this session)  %s allow for minutes  %s allow (profile)  %s deny (this session)  %s deny (profile)',
      k.approve, k.allow_minutes, k.allow_profile, k.deny, k.deny_profile), 'LazaretHint')
    say(string.format('an address: %s switches the allow keys to every protocol and port of it (the request is for one)', k.every_port),
      'LazaretHint')
  end
  say('Closing this window answers nothing: the requests stay pending until answered or timed out.', 'LazaretHint')
  local now = domains.now_ms()
  local function command_lines(i, item)
    local e, key = item.escalation, item.key
    local d = domains.domains[item.domain]
    local was_cut = false
    local function value(s, cells)
      local shown, cut = text.cut(text.inert(s), cells or room)
      was_cut = was_cut or cut > 0
      return shown
    end
    add('', nil, nil)
    local number = string.format('[%d] ', i)
    local command, cut = text.cut(shell.quote(list(e.argv)), math.max(30, width - #number))
    was_cut = was_cut or cut > 0
    add(number .. command, 'LazaretCommand', key)
    local status = d and d.status or {}
    local where = text.inert(e.profile or status.profile or '?') .. ' @ ' .. text.inert(status.workspace or '?') .. ' ('
      .. text.inert(e.domainHash or status.domainHash or '?') .. ')'
    add('    domain   ' .. (text.cut(where, room)), 'LazaretLabel', key)
    add('    cwd      ' .. value(e.cwd or '?'), nil, key)
    add('    why      ' .. (type(e.justification) == 'string' and value(e.justification) or '(no justification given)'), nil, key)
    local reasons = list(e.reasons)
    if #reasons == 0 then
      add('    reasons  (none)', nil, key)
    end
    for r, reason in ipairs(reasons) do
      add((r == 1 and '    reasons  ' or '             ') .. value(reason), nil, key)
    end
    local risks = list(e.riskNotes)
    if #risks == 0 then
      add('    risk     (none)', nil, key)
    end
    for r, note in ipairs(risks) do
      add((r == 1 and '    risk     ' or '             ') .. value(note), 'LazaretRisk', key)
    end
    if tonumber(e.expiresAtMs) then
      add(string.format('    expires  in %d s (then denied)', math.max(0, math.floor((e.expiresAtMs - now) / 1000))), 'LazaretLabel', key)
    end
    add('    id       ' .. value(e.requestId), 'LazaretLabel', key)
    if was_cut then
      add('    (cut)    ' .. text.inert(keys.full) .. ' opens the whole request, read-only', 'LazaretHint', key)
    end
  end
  for i, item in ipairs(items) do
    if item.kind == 'network' then
      M.network_lines(i, item, add, { room = room, width = width, now = now, every_port = state.every_port == item.key })
    else
      command_lines(i, item)
    end
  end
  return lines, marks, line_to_key
end

--- The lines of one network request (through `add(line, group, key)`):
--- the destination (agent text: inert, cut in the middle) and, for an
--- address, the protocol and port it tried (`10.9.0.7/32 tcp/8081`); the
--- domain; the record types of a name, or what an allow of the address
--- opens; how often it was asked again, the sessions live then, when it
--- expires.
--- @param i integer its number in the window
--- @param item table a queue item of kind 'network'
--- @param add fun(line: string, group: string?, key: string?)
--- @param opts {room: integer, width: integer, now: integer, every_port: boolean?}
function M.network_lines(i, item, add, opts)
  local r, key = item.request, item.key
  local keys = config.options.keys
  local d = domains.domains[item.domain]
  add('', nil, nil)
  local number = string.format('[%d] network  ', i)
  local service = M.is_address(r) and (' ' .. text.inert(r.service)) or ''
  local cells = math.max(text.NAME_MIN, opts.width - vim.fn.strdisplaywidth(number) - vim.fn.strdisplaywidth(service))
  local destination, cut = text.name(r.destination or '?', cells)
  add(number .. destination .. service, 'LazaretCommand', key)
  local status = d and d.status or {}
  local where = text.inert(r.profile or status.profile or '?') .. ' @ ' .. text.inert(status.workspace or '?') .. ' ('
    .. text.inert(r.domainHash or status.domainHash or '?') .. ')'
  add('    domain   ' .. (text.cut(where, opts.room)), 'LazaretLabel', key)
  if M.is_address(r) then
    local inert, service = text.inert(keys.every_port), text.inert(r.service)
    if opts.every_port then
      add('    opens    ' .. M.opened(r, true, math.max(text.NAME_MIN, opts.room - 27))[1], 'LazaretRisk', key)
      add('             (wider than the request: ' .. service .. '; ' .. inert .. ': only ' .. service .. ')', 'LazaretRisk', key)
    else
      add('    opens    ' .. service .. ' only (' .. inert .. ': every protocol and port of the address)', nil, key)
    end
  else
    local types = list(r.recordTypes)
    local words = #types > 0 and table.concat(vim.tbl_map(text.inert, types), ' ') or '?'
    add('    records  ' .. (text.cut(words, opts.room)), nil, key)
  end
  local repeats = tonumber(r.repeats) or 0
  add(
    string.format('    asked    %d time%s (%d repeat%s while waiting)', repeats + 1, repeats == 0 and '' or 's', repeats, repeats == 1 and '' or 's'),
    nil,
    key
  )
  add(string.format('    sessions %d live when first asked', #list(r.sessionIds)), 'LazaretLabel', key)
  if tonumber(r.expiresAtMs) then
    add(
      string.format('    expires  in %d s (then it stays refused)', math.max(0, math.floor((r.expiresAtMs - opts.now) / 1000))),
      'LazaretLabel',
      key
    )
  end
  add('    id       ' .. (text.cut(text.inert(r.requestId), opts.room)), 'LazaretLabel', key)
  if cut > 0 then
    add('    (cut)    ' .. text.inert(keys.full) .. ' opens the whole request, read-only', 'LazaretHint', key)
  end
end

--- The whole request as lines (pure: for tests too): every argv word on its
--- own line, nothing cut, everything inert.
--- @param item table a queue item
--- @return string[]
function M.full_lines(item)
  local d = domains.domains[item.domain]
  if item.kind == 'network' then
    local r = item.request
    local out = {
      'Lazaret: the whole network request (read-only; ' .. text.inert(config.options.keys.close) .. ' closes; answer it in the pending window)',
      '',
      'domain       ' .. (d and domains.name(d) or text.inert(item.domain)),
      'id           ' .. text.inert(r.requestId),
      'destination  ' .. text.inert(r.destination),
    }
    if M.is_address(r) then
      out[#out + 1] = 'service      ' .. text.inert(r.service) .. ' (an allow opens only this; every port is a separate answer)'
    else
      out[#out + 1] = 'records      ' .. table.concat(vim.tbl_map(text.inert, list(r.recordTypes)), ' ')
    end
    out[#out + 1] = 'repeats      ' .. text.inert(r.repeats)
    for s, session in ipairs(list(r.sessionIds)) do
      out[#out + 1] = (s == 1 and 'sessions     ' or '             ') .. text.inert(session)
    end
    return out
  end
  local e = item.escalation
  local argv = list(e.argv)
  local out = {
    'Lazaret: the whole request (read-only; ' .. text.inert(config.options.keys.close) .. ' closes; answer it in the pending window)',
    '',
    'domain   ' .. (d and domains.name(d) or text.inert(item.domain)),
    'id       ' .. text.inert(e.requestId),
    'program  ' .. text.inert(argv[1] or '(none)'),
    string.format('argv     %d word%s:', #argv, #argv == 1 and '' or 's'),
  }
  for i, word in ipairs(argv) do
    out[#out + 1] = string.format('  [%d] ', i) .. text.inert(word)
  end
  out[#out + 1] = 'command  ' .. shell.quote(argv)
  out[#out + 1] = 'cwd      ' .. text.inert(e.cwd or '?')
  out[#out + 1] = 'why      ' .. (type(e.justification) == 'string' and text.inert(e.justification) or '(no justification given)')
  for r, reason in ipairs(list(e.reasons)) do
    out[#out + 1] = (r == 1 and 'reasons  - ' or '         - ') .. text.inert(reason)
  end
  for r, note in ipairs(list(e.riskNotes)) do
    out[#out + 1] = (r == 1 and 'risk     - ' or '         - ') .. text.inert(note)
  end
  return out
end

return M
