--- The pending window (`:LazaretPending`): a float listing every request
--- with its argv, cwd, justification, reasons and risk notes, and keys to
--- approve, deny (with an optional reason) or edit it; and every network
--- request (a DNS name the sandbox asked for that no allow entry covers)
--- with its destination, record types and repeat count, and keys to allow
--- or deny it for a scope (this session, a number of minutes, the profile).
--- It follows the queue live: a request answered anywhere else disappears.
---
--- Everything in a request is agent text and shown inert (lazaret.text):
--- a newline in a justification once made nvim_buf_set_lines throw and froze
--- the window. Long text is cut to the window with a note saying so, the
--- program and the start of the argv first; `keys.full` opens the whole
--- request. The answering keys act only on the request under the cursor:
--- on any other line they answer nothing.
local config = require('lazaret.config')
local domains = require('lazaret.domains')
local Queue = require('lazaret.queue')
local shell = require('lazaret.shell')
local rpc = require('lazaret.rpc')
local text = require('lazaret.text')
local window = require('lazaret.window')

local M = {}

local ns = vim.api.nvim_create_namespace('lazaret.pending')
--- The window and buffer this module opened (and the only ones it closes).
M.win, M.buf = nil, nil
--- The full-request view this module opened.
M.full_win, M.full_buf = nil, nil
--- Line (1-based) -> queue key of the request shown there, from the last render.
local line_keys = {}
--- The queue keys in the order of the last render.
local shown_order = {}
--- Set by open(): the next render puts the cursor on the first request.
local fresh = false

local function is_open()
  return M.win ~= nil and vim.api.nvim_win_is_valid(M.win)
end
M.is_open = is_open

local function list(value)
  if type(value) ~= 'table' then
    return {}
  end
  return value
end

--- The room of a value after its label (`    reasons  ` is 13 cells): a
--- longer value is cut with its note inside that room, so the note shows.
local LABEL = 13

--- The most minutes a timed network answer may last (the coordinator's bound).
M.MAX_MINUTES = 1440

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

--- The answer of a network-request key (pure: for tests too).
--- @param action 'allow_session'|'allow_minutes'|'allow_profile'|'deny_session'|'deny_profile'
--- @param minutes integer? for 'allow_minutes'
--- @return string? decision 'allow' or 'deny'
--- @return table? scope the GrantScope
function M.network_answer(action, minutes)
  if action == 'allow_session' then
    return 'allow', { type = 'session' }
  elseif action == 'allow_minutes' then
    if type(minutes) ~= 'number' or minutes ~= math.floor(minutes) or minutes < 1 or minutes > M.MAX_MINUTES then
      return nil, nil
    end
    return 'allow', { type = 'minutes', minutes = minutes }
  elseif action == 'allow_profile' then
    return 'allow', { type = 'profile' }
  elseif action == 'deny_session' then
    return 'deny', { type = 'session' }
  elseif action == 'deny_profile' then
    return 'deny', { type = 'profile' }
  end
  return nil, nil
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

--- The window's lines and their highlights (pure: for tests too).
--- @param items table[] queue items, oldest first
--- @param opts {width: integer?, problems: table[]?, settling: boolean?}?
--- @return string[] lines
--- @return table[] marks {line (0-based), group}
--- @return table<integer, string> keys line (1-based) -> queue key
function M.render_lines(items, opts)
  opts = opts or {}
  local width = opts.width or 120
  local problems = opts.problems or {}
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
  add(
    text.inert(
      string.format(
        '%s approve  %s deny  %s edit  %s whole request  %s close   (the request under the cursor)',
        keys.approve,
        keys.deny,
        keys.edit,
        keys.full,
        keys.close
      )
    ),
    'LazaretHint'
  )
  if networks > 0 then
    add(
      text.inert(
        string.format(
          'network: %s allow (this session)  %s allow for minutes  %s allow (profile)  %s deny (this session)  %s deny (profile)',
          keys.approve,
          keys.allow_minutes,
          keys.allow_profile,
          keys.deny,
          keys.deny_profile
        )
      ),
      'LazaretHint'
    )
  end
  add('Closing this window answers nothing: the requests stay pending until answered or timed out.', 'LazaretHint')
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
      M.network_lines(i, item, add, { room = room, width = width, now = now })
    else
      command_lines(i, item)
    end
  end
  return lines, marks, line_to_key
end

--- The lines of one network request (through `add(line, group, key)`):
--- the destination (agent text: inert, cut), the domain, the record types,
--- how often it was asked again, the sessions live then, when it expires.
--- @param i integer its number in the window
--- @param item table a queue item of kind 'network'
--- @param add fun(line: string, group: string?, key: string?)
--- @param opts {room: integer, width: integer, now: integer}
function M.network_lines(i, item, add, opts)
  local r, key = item.request, item.key
  local keys = config.options.keys
  local d = domains.domains[item.domain]
  local was_cut = false
  add('', nil, nil)
  local number = string.format('[%d] network  ', i)
  local destination, cut = text.cut(text.inert(r.destination or '?'), math.max(30, opts.width - vim.fn.strdisplaywidth(number)))
  was_cut = was_cut or cut > 0
  add(number .. destination, 'LazaretCommand', key)
  local status = d and d.status or {}
  local where = text.inert(r.profile or status.profile or '?') .. ' @ ' .. text.inert(status.workspace or '?') .. ' ('
    .. text.inert(r.domainHash or status.domainHash or '?') .. ')'
  add('    domain   ' .. (text.cut(where, opts.room)), 'LazaretLabel', key)
  local types = list(r.recordTypes)
  local words = #types > 0 and table.concat(vim.tbl_map(text.inert, types), ' ') or '?'
  add('    records  ' .. (text.cut(words, opts.room)), nil, key)
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
  if was_cut then
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
      'records      ' .. table.concat(vim.tbl_map(text.inert, list(r.recordTypes)), ' '),
      'repeats      ' .. text.inert(r.repeats),
    }
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

--- The queue key of the request under the cursor, or nil (a header, a
--- blank line, a closed window): never a fallback to some other request.
--- @return string? key
function M.current_key()
  if not is_open() or vim.api.nvim_win_get_buf(M.win) ~= M.buf then
    return nil
  end
  local row = vim.api.nvim_win_get_cursor(M.win)[1]
  local key = line_keys[row]
  if key and domains.queue:get(key) then
    return key
  end
  return nil
end

local function first_row(key)
  for row = 1, vim.api.nvim_buf_line_count(M.buf) do
    if line_keys[row] == key then
      return row
    end
  end
  return nil
end

--- Redraws the window from the queue. The cursor stays on its request; when
--- that request is gone it goes to the blank line before the one now in its
--- place (so a repeated key answers nothing it did not show); a cursor on no
--- request stays on no request.
function M.render()
  if not is_open() or not vim.api.nvim_buf_is_valid(M.buf) then
    return
  end
  local keep = M.current_key()
  local old_row = vim.api.nvim_win_get_cursor(M.win)[1]
  local old_index = nil
  for i, key in ipairs(shown_order) do
    if key == (keep or line_keys[old_row]) then
      old_index = i
    end
  end
  local items = domains.queue:list()
  local problems = domains.problems()
  local lines, marks, keys = M.render_lines(items, { width = window.text_width(), problems = problems, settling = domains.settling() })
  window.show(M.win, M.buf, lines, ns, marks)
  line_keys = keys
  shown_order = vim.tbl_map(function(item)
    return item.key
  end, items)
  local target
  if keep and domains.queue:get(keep) then
    target = first_row(keep)
  elseif fresh and #items > 0 then
    target = first_row(items[1].key)
  elseif old_index and #items > 0 then
    local row = first_row(items[math.min(old_index, #items)].key)
    target = row and math.max(1, row - 1)
  else
    target = math.min(old_row, #lines)
    if keys[target] then
      target = 1 -- the lines moved: still on no request
    end
  end
  fresh = false
  vim.api.nvim_win_set_cursor(M.win, { target or 1, 0 })
end

local function no_request()
  vim.notify('Lazaret: no request under the cursor: move onto one (' .. text.inert(config.options.keys.next) .. ' goes to the next)', vim.log.levels.INFO)
end

local function after_answer(what)
  return function(err)
    if err and err.code == rpc.codes.not_pending then
      vim.notify('Lazaret: that request was already answered elsewhere', vim.log.levels.INFO)
    elseif err then
      vim.notify('Lazaret: ' .. what .. ' failed: ' .. text.inert(rpc.message(err)), vim.log.levels.ERROR)
    end
    M.render()
  end
end

--- Answers the network request of `key` for `action` (see network_answer).
--- A failed answer keeps the request listed and says why.
--- @param key string
--- @param action string
--- @param minutes integer?
function M.answer_network(key, action, minutes)
  local decision, scope = M.network_answer(action, minutes)
  if not decision then
    return vim.notify('Lazaret: no such answer to a network request', vim.log.levels.ERROR)
  end
  domains.respond_network(key, decision, scope, function(err)
    if err and err.code == rpc.codes.network_not_pending then
      vim.notify('Lazaret: that network request was already answered elsewhere (or expired)', vim.log.levels.INFO)
    elseif err then
      vim.notify('Lazaret: ' .. decision .. ' failed (the request stays pending): ' .. text.inert(rpc.message(err)), vim.log.levels.ERROR)
    end
    M.render()
  end)
end

--- The network request under the cursor (or of `key`), or nil after saying
--- why (none there, or an escalation: these keys answer network requests).
local function network_key(key)
  key = key or M.current_key()
  local item = key and domains.queue:get(key)
  if not item then
    no_request()
    return nil
  end
  if item.kind ~= 'network' then
    vim.notify('Lazaret: that key answers network requests; this is a host command (' .. text.inert(config.options.keys.approve)
      .. ' approves, ' .. text.inert(config.options.keys.deny) .. ' denies)', vim.log.levels.INFO)
    return nil
  end
  return key
end

--- Allows the network request under the cursor for a number of minutes,
--- asked with vim.ui.input (1 to 1440).
function M.allow_minutes(key)
  key = network_key(key)
  if not key then
    return
  end
  vim.ui.input({ prompt = string.format('Allow for how many minutes (1-%d, Esc cancels): ', M.MAX_MINUTES) }, function(answer)
    if answer == nil then
      return
    end
    local minutes, err = M.parse_minutes(answer)
    if not minutes then
      return vim.notify('Lazaret: nothing answered: ' .. text.inert(vim.trim(answer)) .. ' is ' .. err, vim.log.levels.ERROR)
    end
    M.answer_network(key, 'allow_minutes', minutes)
  end)
end

--- Allows the network request under the cursor for the profile (kept
--- until revoked: :LazaretRules).
function M.allow_profile(key)
  key = network_key(key)
  if key then
    M.answer_network(key, 'allow_profile')
  end
end

--- Denies the network request under the cursor for the profile (a
--- remembered refusal, until revoked: :LazaretRules).
function M.deny_profile(key)
  key = network_key(key)
  if key then
    M.answer_network(key, 'deny_profile')
  end
end

--- Approves the request under the cursor (or the one of `key`); a network
--- request is allowed for this session.
--- @param key string? a queue key
function M.approve(key)
  key = key or M.current_key()
  if not key then
    return no_request()
  end
  local item = domains.queue:get(key)
  if item and item.kind == 'network' then
    return M.answer_network(key, 'allow_session')
  end
  domains.respond(key, 'approve', nil, after_answer('approve'))
end

--- Denies the request under the cursor (asking for an optional reason); a
--- network request is denied for this session (no reason asked).
function M.deny(key)
  key = key or M.current_key()
  if not key then
    return no_request()
  end
  local item = domains.queue:get(key)
  if item and item.kind == 'network' then
    return M.answer_network(key, 'deny_session')
  end
  vim.ui.input({ prompt = 'Deny; reason (optional, Esc cancels): ' }, function(reason)
    if reason == nil then
      return
    end
    reason = vim.trim(reason)
    domains.respond(key, 'deny', reason ~= '' and { reason = reason } or nil, after_answer('deny'))
  end)
end

--- How much of the edited command the confirmation shows.
local CONFIRM_CELLS = 400

--- Edits the request under the cursor: a prompt prefilled with its argv as
--- one line (shell words; a word with control, bidi or invisible
--- characters in `$'...'` with them escaped, so the prompt is inert and the
--- line still splits back to the same argv), then a confirmation.
function M.edit(key)
  key = key or M.current_key()
  local item = key and domains.queue:get(key)
  if not item then
    return no_request()
  end
  if item.kind == 'network' then
    return vim.notify('Lazaret: a network request has no command to edit', vim.log.levels.INFO)
  end
  local default = shell.quote(list(item.escalation.argv))
  vim.ui.input({ prompt = 'Run on the host instead: ', default = default }, function(line)
    if line == nil then
      return
    end
    local argv, err = shell.split(line)
    if not argv or #argv == 0 then
      return vim.notify('Lazaret: cannot edit to that command: ' .. text.inert(err or 'empty'), vim.log.levels.ERROR)
    end
    local shown = text.cut(shell.quote(argv), CONFIRM_CELLS)
    vim.ui.select({ 'Run it', 'Cancel' }, { prompt = 'Run on the host: ' .. shown }, function(choice)
      if choice == 'Run it' then
        domains.respond(key, 'edit', { argv = argv }, after_answer('edit'))
      end
    end)
  end)
end

--- Closes the full-request view.
function M.close_full()
  window.close(M.full_win)
  M.full_win, M.full_buf = nil, nil
  if is_open() then
    vim.api.nvim_set_current_win(M.win)
  end
end

--- Opens the whole request under the cursor in a read-only float (every
--- argv word on its own line, the justification uncut, all inert).
function M.full(key)
  key = key or M.current_key()
  local item = key and domains.queue:get(key)
  if not item then
    return no_request()
  end
  M.close_full()
  local lines = M.full_lines(item)
  local buf = vim.api.nvim_create_buf(false, true)
  local name = 'lazaret://request/' .. text.inert(Queue.payload(item).requestId)
  window.forget_buffer(name)
  vim.api.nvim_buf_set_name(buf, name)
  vim.api.nvim_buf_set_lines(buf, 0, -1, false, lines)
  vim.bo[buf].modeline = false
  vim.bo[buf].modifiable = false
  vim.bo[buf].bufhidden = 'wipe'
  vim.bo[buf].filetype = 'lazaret'
  local columns, rows = vim.o.columns, vim.o.lines - vim.o.cmdheight - 2
  local cfg = {
    relative = 'editor',
    width = math.max(20, columns - 8),
    height = math.max(3, rows - 4),
    row = 1,
    col = 3,
    style = 'minimal',
    border = config.options.border,
    title = ' Lazaret: request ',
    title_pos = 'center',
  }
  M.full_win, M.full_buf = vim.api.nvim_open_win(buf, true, cfg), buf
  vim.wo[M.full_win].wrap = true
  window.map(buf, config.options.keys.close, M.close_full, 'Lazaret: close the request view')
end

local function move(step)
  local items = domains.queue:list()
  if #items == 0 or not is_open() then
    return
  end
  local current = M.current_key()
  local row = vim.api.nvim_win_get_cursor(M.win)[1]
  local index
  for i, item in ipairs(items) do
    if item.key == current then
      index = ((i - 1 + step) % #items) + 1
    end
  end
  if not index then
    -- Off any request: the next one below the cursor (or above for -1).
    index = step > 0 and 1 or #items
    for i, item in ipairs(items) do
      local r = first_row(item.key) or 0
      if step > 0 and r > row then
        index = i
        break
      elseif step < 0 and r < row then
        index = i
      end
    end
  end
  local target = first_row(items[index].key)
  if target then
    vim.api.nvim_win_set_cursor(M.win, { target, 0 })
  end
end

--- Closes the window this module opened (answers nothing).
function M.close()
  M.close_full()
  window.close(M.win)
  M.win = nil
end

--- Opens (or focuses) the pending window.
function M.open()
  domains.start()
  window.highlights()
  if is_open() then
    vim.api.nvim_set_current_win(M.win)
    return M.render()
  end
  M.win, M.buf = window.open('lazaret://pending', ' Lazaret ', {
    cursorline = true,
    on_wipe = function()
      M.win, M.buf = nil, nil
      line_keys, shown_order = {}, {}
    end,
  })
  local keys, buf = config.options.keys, M.buf
  local function map(lhs, fn, desc)
    window.map(buf, lhs, fn, desc)
  end
  map(keys.approve, M.approve, 'Lazaret: approve the request under the cursor')
  map(keys.deny, M.deny, 'Lazaret: deny it (asks for an optional reason)')
  map(keys.edit, M.edit, 'Lazaret: edit the command, then run the edited one')
  map(keys.full, M.full, 'Lazaret: show the whole request, read-only')
  map(keys.allow_minutes, M.allow_minutes, 'Lazaret: allow the network request for a number of minutes')
  map(keys.allow_profile, M.allow_profile, 'Lazaret: allow the network request for the profile (until revoked)')
  map(keys.deny_profile, M.deny_profile, 'Lazaret: deny the network request for the profile (until revoked)')
  map(keys.close, M.close, 'Lazaret: close (the requests stay pending)')
  map(keys.next, function()
    move(1)
  end, 'Lazaret: next request')
  map(keys.prev, function()
    move(-1)
  end, 'Lazaret: previous request')
  fresh = true
  line_keys, shown_order = {}, {}
  M.render()
end

domains.on_change(function()
  if is_open() then
    M.render()
  end
end)

return M
