--- The pending-escalation window (`:LazaretPending`): a float listing every
--- request with its argv, cwd, justification, reasons and risk notes, and
--- keys to approve, deny (with an optional reason) or edit it. It follows
--- the queue live: a request answered anywhere else disappears.
local config = require('lazaret.config')
local domains = require('lazaret.domains')
local shell = require('lazaret.shell')
local rpc = require('lazaret.rpc')

local M = {}

local ns = vim.api.nvim_create_namespace('lazaret.pending')
--- The window and buffer this module opened (and the only ones it closes).
M.win, M.buf = nil, nil
--- Line (1-based) -> request id, from the last render.
local line_ids = {}

local function highlights()
  local set = function(name, link)
    vim.api.nvim_set_hl(0, name, { link = link, default = true })
  end
  set('LazaretTitle', 'Title')
  set('LazaretCommand', 'Statement')
  set('LazaretLabel', 'Comment')
  set('LazaretRisk', 'DiagnosticWarn')
  set('LazaretHint', 'Comment')
end

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

--- The window's lines and their highlights (pure: for tests too).
--- @param items table[] queue items, oldest first
--- @return string[] lines
--- @return table[] marks {line (0-based), group}
--- @return table<integer, string> ids line (1-based) -> requestId
function M.render_lines(items)
  local keys = config.options.keys
  local lines, marks, ids = {}, {}, {}
  local function add(text, group, id)
    lines[#lines + 1] = text
    if group then
      marks[#marks + 1] = { #lines - 1, group }
    end
    if id then
      ids[#lines] = id
    end
  end
  local n = #items
  add(
    n == 0 and 'Lazaret: no pending escalations'
      or string.format('Lazaret: %d pending escalation%s', n, n == 1 and '' or 's'),
    'LazaretTitle'
  )
  add(
    string.format(
      '%s approve  %s deny (asks for a reason)  %s edit  %s close',
      keys.approve,
      keys.deny,
      keys.edit,
      keys.close
    ),
    'LazaretHint'
  )
  add('Closing this window answers nothing: the requests stay pending until answered or timed out.', 'LazaretHint')
  local now = domains.now_ms()
  for i, item in ipairs(items) do
    local e, id = item.escalation, item.escalation.requestId
    local d = domains.domains[item.domain]
    add('', nil, nil)
    add(string.format('[%d] %s', i, shell.quote(list(e.argv))), 'LazaretCommand', id)
    local status = d and d.status or {}
    add(
      string.format(
        '    domain   %s @ %s (%s)',
        e.profile or status.profile or '?',
        status.workspace or '?',
        e.domainHash or status.domainHash or '?'
      ),
      'LazaretLabel',
      id
    )
    add('    cwd      ' .. tostring(e.cwd or '?'), nil, id)
    add('    why      ' .. (type(e.justification) == 'string' and e.justification or '(no justification given)'), nil, id)
    local reasons = list(e.reasons)
    if #reasons == 0 then
      add('    reasons  (none)', nil, id)
    end
    for r, reason in ipairs(reasons) do
      add((r == 1 and '    reasons  ' or '             ') .. tostring(reason), nil, id)
    end
    local risks = list(e.riskNotes)
    if #risks == 0 then
      add('    risk     (none)', nil, id)
    end
    for r, note in ipairs(risks) do
      add((r == 1 and '    risk     ' or '             ') .. tostring(note), 'LazaretRisk', id)
    end
    if tonumber(e.expiresAtMs) then
      add(string.format('    expires  in %d s (then denied)', math.max(0, math.floor((e.expiresAtMs - now) / 1000))), 'LazaretLabel', id)
    end
    add(string.format('    id       %s', id), 'LazaretLabel', id)
  end
  return lines, marks, ids
end

--- The request under the cursor (else the first one).
--- @return string? id
function M.current_id()
  local items = domains.queue:list()
  if #items == 0 then
    return nil
  end
  if is_open() then
    local row = vim.api.nvim_win_get_cursor(M.win)[1]
    for r = row, 1, -1 do
      if line_ids[r] then
        return line_ids[r]
      end
    end
  end
  return items[1].escalation.requestId
end

--- Redraws the window from the queue, keeping the cursor on its request.
function M.render()
  if not is_open() or not vim.api.nvim_buf_is_valid(M.buf) then
    return
  end
  local keep = M.current_id()
  local lines, marks, ids = M.render_lines(domains.queue:list())
  vim.bo[M.buf].modifiable = true
  vim.api.nvim_buf_set_lines(M.buf, 0, -1, false, lines)
  vim.bo[M.buf].modifiable = false
  vim.api.nvim_buf_clear_namespace(M.buf, ns, 0, -1)
  for _, mark in ipairs(marks) do
    vim.api.nvim_buf_set_extmark(M.buf, ns, mark[1], 0, { end_row = mark[1] + 1, hl_group = mark[2], hl_eol = false })
  end
  line_ids = ids
  local target = nil
  for row = 1, #lines do
    if ids[row] and ids[row] == keep then
      target = row
      break
    end
  end
  for row = 1, #lines do
    if target == nil and ids[row] then
      target = row
    end
  end
  local width = 40
  for _, line in ipairs(lines) do
    width = math.max(width, vim.fn.strdisplaywidth(line) + 2)
  end
  local cfg = M.geometry(width, #lines)
  vim.api.nvim_win_set_config(M.win, cfg)
  vim.api.nvim_win_set_cursor(M.win, { target or 1, 0 })
end

function M.geometry(width, height)
  local columns, rows = vim.o.columns, vim.o.lines - vim.o.cmdheight - 2
  width = math.min(width, math.max(20, columns - 4))
  height = math.min(math.max(height, 3), math.max(3, rows - 2))
  return {
    relative = 'editor',
    width = width,
    height = height,
    row = math.max(0, math.floor((rows - height) / 2)),
    col = math.max(0, math.floor((columns - width) / 2)),
  }
end

local function after_answer(id, what)
  return function(err)
    if err and err.code == rpc.codes.not_pending then
      vim.notify('Lazaret: that request was already answered elsewhere', vim.log.levels.INFO)
    elseif err then
      vim.notify('Lazaret: ' .. what .. ' failed: ' .. rpc.message(err), vim.log.levels.ERROR)
    end
    M.render()
  end
end

function M.approve(id)
  id = id or M.current_id()
  if id then
    domains.respond(id, 'approve', nil, after_answer(id, 'approve'))
  end
end

function M.deny(id)
  id = id or M.current_id()
  if not id then
    return
  end
  vim.ui.input({ prompt = 'Deny; reason (optional, Esc cancels): ' }, function(reason)
    if reason == nil then
      return
    end
    reason = vim.trim(reason)
    domains.respond(id, 'deny', reason ~= '' and { reason = reason } or nil, after_answer(id, 'deny'))
  end)
end

function M.edit(id)
  id = id or M.current_id()
  local item = id and domains.queue:get(id)
  if not item then
    return
  end
  vim.ui.input({ prompt = 'Run on the host instead: ', default = shell.quote(list(item.escalation.argv)) }, function(line)
    if line == nil then
      return
    end
    local argv, err = shell.split(line)
    if not argv or #argv == 0 then
      return vim.notify('Lazaret: cannot edit to that command: ' .. (err or 'empty'), vim.log.levels.ERROR)
    end
    local shown = shell.quote(argv)
    vim.ui.select({ 'Run it', 'Cancel' }, { prompt = 'Run on the host: ' .. shown }, function(choice)
      if choice == 'Run it' then
        domains.respond(id, 'edit', { argv = argv }, after_answer(id, 'edit'))
      end
    end)
  end)
end

local function move(step)
  local items = domains.queue:list()
  if #items == 0 or not is_open() then
    return
  end
  local current = M.current_id()
  local index = 1
  for i, item in ipairs(items) do
    if item.escalation.requestId == current then
      index = i
    end
  end
  local wanted = items[((index - 1 + step) % #items) + 1].escalation.requestId
  for row = 1, vim.api.nvim_buf_line_count(M.buf) do
    if line_ids[row] == wanted then
      return vim.api.nvim_win_set_cursor(M.win, { row, 0 })
    end
  end
end

--- Closes the window this module opened (answers nothing).
function M.close()
  if is_open() then
    vim.api.nvim_win_close(M.win, true)
  end
  M.win = nil
end

--- Opens (or focuses) the pending window.
function M.open()
  domains.start()
  highlights()
  if is_open() then
    vim.api.nvim_set_current_win(M.win)
    return M.render()
  end
  M.buf = vim.api.nvim_create_buf(false, true)
  vim.bo[M.buf].bufhidden = 'wipe'
  vim.bo[M.buf].filetype = 'lazaret'
  vim.api.nvim_buf_set_name(M.buf, 'lazaret://pending')
  local cfg = M.geometry(60, 5)
  cfg.style, cfg.border, cfg.title, cfg.title_pos = 'minimal', config.options.border, ' Lazaret ', 'center'
  M.win = vim.api.nvim_open_win(M.buf, true, cfg)
  vim.wo[M.win].cursorline = true
  vim.wo[M.win].wrap = false
  local keys, buf = config.options.keys, M.buf
  local function map(lhs, fn, desc)
    vim.keymap.set('n', lhs, function()
      fn()
    end, { buffer = buf, nowait = true, silent = true, desc = desc })
  end
  map(keys.approve, M.approve, 'Lazaret: approve the request under the cursor')
  map(keys.deny, M.deny, 'Lazaret: deny it (asks for an optional reason)')
  map(keys.edit, M.edit, 'Lazaret: edit the command, then run the edited one')
  map(keys.close, M.close, 'Lazaret: close (the requests stay pending)')
  map(keys.next, function()
    move(1)
  end, 'Lazaret: next request')
  map(keys.prev, function()
    move(-1)
  end, 'Lazaret: previous request')
  vim.api.nvim_create_autocmd('BufWipeout', {
    buffer = buf,
    once = true,
    callback = function()
      M.win, M.buf = nil, nil
    end,
  })
  M.render()
end

domains.on_change(function()
  if is_open() then
    M.render()
  end
end)

return M
