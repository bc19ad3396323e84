--- The pending window (`:LazaretPending`): a float listing every request
--- with its argv, cwd, justification, reasons and risk notes, and keys to
--- approve, deny (with an optional reason) or edit it; and every network
--- request (a DNS name, or one protocol and port of an address, the sandbox
--- tried that no allow entry covers) with keys to allow or deny it for a
--- scope (this session, a number of minutes, the profile), and for an
--- address every protocol and port of it instead. It follows the queue
--- live: a request answered anywhere else disappears. What it shows is
--- built by lazaret.pending_lines (agent text inert, names cut in the
--- middle).
---
--- Deliberate answers (DECISIONS D20, lazaret.arming): the window takes the
--- keyboard (when it opens by itself, the user may be typing to the agent),
--- so it starts disarmed and disarms whenever the request under the cursor
--- changes; while disarmed every key typed in it is discarded (vim.on_key,
--- before any mapping or Vim command sees it), counted and said, and
--- restarts the 1 s delay. Armed, a denial is one key; an approval, an
--- edited command and every network allow are a key that selects them, the
--- window names exactly what will run or open, and <CR> confirms; any other
--- key cancels and disarms. The keys act only on the request under the
--- cursor: on any other line they answer nothing.
local arming = require('lazaret.arming')
local config = require('lazaret.config')
local domains = require('lazaret.domains')
local lines = require('lazaret.pending_lines')
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
--- The arming state (lazaret.arming) of the open window.
M.state = nil
--- Line (1-based) -> queue key of the request shown there, from the last render.
local line_keys = {}
--- The queue keys in the order of the last render.
local shown_order = {}
--- Set by open(): the next render puts the cursor on the first request.
local fresh = false
--- Re-renders the window when it arms.
local arm_timer = nil
--- Keys (keytrans) of the window -> 'confirm' or 'window' (see classify()).
local key_kinds = {}

-- The pure parts, for callers and tests.
M.MAX_MINUTES = lines.MAX_MINUTES
M.parse_minutes = lines.parse_minutes
M.network_answer = lines.network_answer
M.render_lines = lines.render_lines
M.network_lines = lines.network_lines
M.full_lines = lines.full_lines

--- The clock of the arming delay (ms). Tests replace it with a fake one.
function M.now()
  return vim.uv.hrtime() / 1e6
end

local function is_open()
  return M.win ~= nil and vim.api.nvim_win_is_valid(M.win)
end
M.is_open = is_open

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

--- Tells the arming state which request is under the cursor now (another
--- one than before disarms). Returns whether it changed.
local function observe()
  return M.state ~= nil and M.state:show(M.current_key(), M.now())
end

--- Whether the window takes an answer now (after looking at the cursor).
--- @return boolean
function M.armed()
  observe()
  return M.state ~= nil and M.state:armed(M.now())
end

local function first_row(key)
  for row = 1, vim.api.nvim_buf_line_count(M.buf) do
    if line_keys[row] == key then
      return row
    end
  end
  return nil
end

--- Re-renders once the window arms (the line at the top says so).
local function schedule_arm()
  if not M.state or M.state:armed(M.now()) then
    return
  end
  arm_timer = arm_timer or assert(vim.uv.new_timer())
  arm_timer:stop()
  arm_timer:start(math.ceil(M.state:arms_in(M.now())) + 20, 0, vim.schedule_wrap(function()
    if is_open() then
      M.render()
    end
  end))
end

--- Redraws the window from the queue. The cursor stays on its request; when
--- that request is gone it goes to the blank line before the one now in its
--- place (so a repeated key answers nothing it did not show); a cursor on no
--- request stays on no request. The request under the cursor is told to the
--- arming state first: another one disarms.
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
  -- Where the cursor goes: onto a request, before one, or on no request.
  local target_key, before_key = nil, nil
  if keep then
    target_key = keep
  elseif fresh and #items > 0 then
    target_key = items[1].key
  elseif old_index and #items > 0 then
    before_key = items[math.min(old_index, #items)].key
  end
  fresh = false
  local now = M.now()
  local state = M.state
  if state then
    state:show(target_key, now)
  end
  local view = state and {
    armed = state:armed(now),
    discarded = state.discarded,
    selection = state.selection,
    every_port = state.every_port and state.shown or nil,
  }
  local shown, marks, keys = M.render_lines(items, {
    width = window.text_width(),
    problems = domains.problems(),
    settling = domains.settling(),
    arming = view,
  })
  window.show(M.win, M.buf, shown, ns, marks)
  line_keys = keys
  shown_order = vim.tbl_map(function(item)
    return item.key
  end, items)
  local target
  if target_key then
    target = first_row(target_key)
  elseif before_key then
    local row = first_row(before_key)
    target = row and math.max(1, row - 1)
  else
    target = math.min(old_row, #shown)
    if keys[target] then
      target = 1 -- the lines moved: still on no request
    end
  end
  vim.api.nvim_win_set_cursor(M.win, { target or 1, 0 })
  if view then
    -- The state in the border too, in view however the list scrolls (a
    -- border is needed for a footer); a selection brings the top into view.
    local selected = view.selection and domains.queue:get(view.selection.key)
    local border = config.options.border
    if border ~= 'none' and border ~= '' then
      pcall(vim.api.nvim_win_set_config, M.win, { footer = lines.footer(view, selected, vim.api.nvim_win_get_width(M.win)), footer_pos = 'center' })
    end
    if selected and (target or 1) <= vim.api.nvim_win_get_height(M.win) then
      vim.api.nvim_win_call(M.win, function()
        vim.fn.winrestview({ topline = 1 })
      end)
    end
  end
  schedule_arm()
end

--- A window key that answers nothing here (no request under the cursor, or
--- one of another kind): said, and the key counts as discarded.
local function refuse(message)
  if M.state then
    M.state:discard(M.now())
  end
  vim.notify('Lazaret: ' .. message, vim.log.levels.INFO)
  M.render()
end

local function no_request()
  refuse('no request under the cursor: move onto one (' .. text.inert(config.options.keys.next) .. ' goes to the next)')
end

--- The request under the cursor when the window is armed, else nil (the
--- key counted as discarded, or said why).
local function armed_item()
  local now = M.now()
  observe()
  if not M.state or not M.state:armed(now) then
    if M.state then
      M.state:discard(now)
    end
    M.render()
    return nil
  end
  local key = M.current_key()
  local item = key and domains.queue:get(key)
  if not item then
    no_request()
    return nil
  end
  return item
end

--- Selects an approving answer for the request of `selection.key`; the
--- window names it and <CR> confirms it. Refused unless the window is armed
--- and that request is still the one under the cursor.
local function select(selection)
  local now = M.now()
  observe()
  -- A <CR> already waiting behind the selecting key (a paste, a burst of
  -- keys read at once) does not confirm: the selection is `burst`.
  local burst = vim.fn.getcharstr(1) == '\r'
  if not M.state or not M.state:select(selection, now, burst) then
    if M.state then
      M.state:discard(now)
    end
    vim.notify('Lazaret: nothing selected: the request under the cursor changed (or keys were typed meanwhile); look again', vim.log.levels.INFO)
  end
  M.render()
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

--- Answers the network request of `key` for `action` (see network_answer;
--- `every_port`: an allow opens every protocol and port of the address).
--- A failed answer keeps the request listed and says why. No arming check:
--- the keys reach it through a confirmed selection or a denial.
--- @param key string
--- @param action string
--- @param minutes integer?
--- @param every_port boolean?
function M.answer_network(key, action, minutes, every_port)
  local item = domains.queue:get(key)
  local decision, scope = M.network_answer(action, minutes, every_port and item and lines.is_address(item.request))
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

--- Sends a confirmed selection, if its request is still pending and still
--- the one under the cursor.
--- @param selection table
function M.confirm(selection)
  local item = selection and domains.queue:get(selection.key)
  if not item then
    vim.notify('Lazaret: that request was already answered elsewhere (or withdrawn): nothing sent', vim.log.levels.INFO)
    return M.render()
  end
  if M.current_key() ~= selection.key then
    vim.notify('Lazaret: the request under the cursor changed: nothing sent', vim.log.levels.INFO)
    return M.render()
  end
  if selection.kind == 'network' then
    M.answer_network(selection.key, selection.action, selection.minutes, selection.every_port)
  elseif selection.kind == 'edit' then
    domains.respond(selection.key, 'edit', { argv = selection.argv }, after_answer('edit'))
  else
    domains.respond(selection.key, 'approve', nil, after_answer('approve'))
  end
end

--- The armed network request under the cursor, or nil after saying why.
local function network_item()
  local item = armed_item()
  if item and item.kind ~= 'network' then
    refuse('that key answers network requests; this is a host command (' .. text.inert(config.options.keys.approve)
      .. ' approves, ' .. text.inert(config.options.keys.deny) .. ' denies)')
    return nil
  end
  return item
end

--- Selects allowing the network request under the cursor (`action`).
local function select_allow(item, action, minutes)
  local every = M.state.every_port and lines.is_address(item.request) or false
  select({ key = item.key, kind = 'network', action = action, minutes = minutes, every_port = every })
end

--- Allows the network request under the cursor for a number of minutes,
--- asked with vim.ui.input (1 to 1440); then <CR> confirms.
function M.allow_minutes()
  local item = network_item()
  if not item then
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
    select_allow(item, 'allow_minutes', minutes)
  end)
end

--- Allows the network request under the cursor for the profile (kept
--- until revoked: :LazaretRules), after <CR>.
function M.allow_profile()
  local item = network_item()
  if item then
    select_allow(item, 'allow_profile')
  end
end

--- Switches the allow keys on the address request under the cursor between
--- the protocol and port it shows and every protocol and port of it.
function M.every_port()
  local item = network_item()
  if not item then
    return
  end
  if not lines.is_address(item.request) then
    return refuse('a name has no ports: ' .. text.inert(config.options.keys.every_port) .. ' applies to a request for an address')
  end
  M.state:toggle_every_port(M.now())
  M.render()
end

--- Denies the network request under the cursor for the profile (a
--- remembered refusal, until revoked: :LazaretRules). One key.
function M.deny_profile()
  local item = network_item()
  if item then
    M.answer_network(item.key, 'deny_profile')
  end
end

--- Selects approving the request under the cursor (a network request:
--- allowing it for this session); <CR> confirms.
function M.approve()
  local item = armed_item()
  if not item then
    return
  end
  if item.kind == 'network' then
    return select_allow(item, 'allow_session')
  end
  select({ key = item.key, kind = 'approve' })
end

--- Denies the request under the cursor (asking for an optional reason); a
--- network request is denied for this session (no reason asked). One key.
function M.deny()
  local item = armed_item()
  if not item then
    return
  end
  if item.kind == 'network' then
    return M.answer_network(item.key, 'deny_session')
  end
  vim.ui.input({ prompt = 'Deny; reason (optional, Esc cancels): ' }, function(reason)
    if reason == nil then
      return
    end
    reason = vim.trim(reason)
    domains.respond(item.key, 'deny', reason ~= '' and { reason = reason } or nil, after_answer('deny'))
  end)
end

--- Edits the request under the cursor: a prompt prefilled with its argv as
--- one line (shell words; a word with control, bidi or invisible
--- characters in `$'...'` with them escaped, so the prompt is inert and the
--- line still splits back to the same argv); the window then names the
--- edited command and <CR> runs it.
function M.edit()
  local item = armed_item()
  if not item then
    return
  end
  if item.kind == 'network' then
    return refuse('a network request has no command to edit')
  end
  local default = shell.quote(lines.list(item.escalation.argv))
  vim.ui.input({ prompt = 'Run on the host instead: ', default = default }, function(line)
    if line == nil then
      return
    end
    local argv, err = shell.split(line)
    if not argv or #argv == 0 then
      return vim.notify('Lazaret: cannot edit to that command: ' .. text.inert(err or 'empty'), vim.log.levels.ERROR)
    end
    select({ key = item.key, kind = 'edit', argv = argv })
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
  local buf = vim.api.nvim_create_buf(false, true)
  local name = 'lazaret://request/' .. text.inert(Queue.payload(item).requestId)
  window.forget_buffer(name)
  vim.api.nvim_buf_set_name(buf, name)
  vim.api.nvim_buf_set_lines(buf, 0, -1, false, M.full_lines(item))
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
  if observe() then
    M.render()
  end
end

--- Cursor moves and scrolling that are allowed on an armed window (they
--- never answer: moving onto another request disarms).
local MOVES = { 'j', 'k', '<Down>', '<Up>', '<C-D>', '<C-U>', '<C-F>', '<C-B>', '<PageDown>', '<PageUp>',
  '<LeftMouse>', '<LeftRelease>', '<ScrollWheelUp>', '<ScrollWheelDown>' }

local function keytrans(lhs)
  return vim.fn.keytrans(vim.api.nvim_replace_termcodes(lhs, true, true, true))
end

--- What a key typed in the window is, for lazaret.arming: 'confirm' (<CR>),
--- 'window' (one of the window's keys or a cursor move) or 'other'.
local function classify(keys)
  return key_kinds[vim.fn.keytrans(keys)] or 'other'
end

--- vim.on_key: every key while the pending window is the current one
--- (except on the command line: the reason, minutes and edit prompts) goes
--- through the arming state first. A key it takes (discarded, or <CR>
--- confirming a selection) never reaches a mapping or Vim. Any error takes
--- the key too: the guard fails closed.
local function guard(key, typed)
  if not is_open() or not M.state or vim.api.nvim_get_current_win() ~= M.win then
    return nil
  end
  if vim.api.nvim_get_mode().mode:sub(1, 1) == 'c' then
    return nil
  end
  local ok, verdict, selection = pcall(function()
    local now = M.now()
    observe()
    return M.state:key(classify(typed ~= '' and typed or key), now, typed ~= '')
  end)
  if ok and verdict == 'pass' then
    return nil
  end
  if ok and verdict == 'confirm' then
    vim.schedule(function()
      M.confirm(selection)
    end)
  end
  vim.schedule(M.render)
  return ''
end
vim.on_key(guard, vim.api.nvim_create_namespace('lazaret.pending.keys'))

--- Closes the window this module opened (answers nothing).
function M.close()
  M.close_full()
  window.close(M.win)
  M.win = nil
end

--- Opens (or focuses) the pending window. Opening it, or focusing it from
--- another window, takes the keyboard: it is disarmed (lazaret.arming).
function M.open()
  domains.start()
  window.highlights()
  if is_open() then
    if vim.api.nvim_get_current_win() ~= M.win then
      M.state:disarm(M.now())
      vim.api.nvim_set_current_win(M.win)
    end
    return M.render()
  end
  M.win, M.buf = window.open('lazaret://pending', ' Lazaret ', {
    cursorline = true,
    on_wipe = function()
      M.win, M.buf, M.state = nil, nil, nil
      line_keys, shown_order = {}, {}
      if arm_timer then
        arm_timer:stop()
      end
    end,
  })
  M.state = arming.new(M.now())
  local keys, buf = config.options.keys, M.buf
  key_kinds = {}
  for _, lhs in ipairs(MOVES) do
    key_kinds[keytrans(lhs)] = 'window'
  end
  for _, name in ipairs({ 'approve', 'deny', 'edit', 'full', 'close', 'next', 'prev', 'allow_minutes', 'allow_profile', 'deny_profile', 'every_port' }) do
    key_kinds[keytrans(keys[name])] = 'window'
  end
  key_kinds[keytrans('<CR>')] = 'confirm'
  local function map(lhs, fn, desc)
    window.map(buf, lhs, fn, desc)
  end
  map(keys.approve, M.approve, 'Lazaret: select approving the request under the cursor (<CR> confirms)')
  map(keys.deny, M.deny, 'Lazaret: deny it (asks for an optional reason)')
  map(keys.edit, M.edit, 'Lazaret: edit the command, then <CR> runs the edited one')
  map(keys.full, M.full, 'Lazaret: show the whole request, read-only')
  map(keys.allow_minutes, M.allow_minutes, 'Lazaret: select allowing the network request for a number of minutes')
  map(keys.allow_profile, M.allow_profile, 'Lazaret: select allowing the network request for the profile (until revoked)')
  map(keys.every_port, M.every_port, 'Lazaret: an address: the allow keys open every protocol and port of it (again: only the one asked)')
  map(keys.deny_profile, M.deny_profile, 'Lazaret: deny the network request for the profile (until revoked)')
  map(keys.close, M.close, 'Lazaret: close (the requests stay pending)')
  map(keys.next, function()
    move(1)
  end, 'Lazaret: next request')
  map(keys.prev, function()
    move(-1)
  end, 'Lazaret: previous request')
  vim.api.nvim_create_autocmd('CursorMoved', {
    buffer = buf,
    callback = function()
      if observe() then
        M.render()
      end
    end,
  })
  fresh = true
  line_keys, shown_order = {}, {}
  M.render()
end

domains.open_pending = M.open
domains.on_change(function()
  if is_open() then
    M.render()
  end
end)

return M
