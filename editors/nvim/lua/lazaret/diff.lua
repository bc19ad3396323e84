--- The review of the agent branch: `:LazaretDiff` opens a tab with the
--- changed files (D4 warnings first, also as the quickfix list) and shows a
--- file's base and agent head side by side in diff mode, from read-only
--- scratch buffers filled by `branch/fileContents`; `:LazaretMerge` merges
--- the branch into the workspace after a confirmation repeating the warnings.
local protocol = require('lazaret.protocol')
local config = require('lazaret.config')
local domains = require('lazaret.domains')
local rpc = require('lazaret.rpc')

local M = {}

local ns = vim.api.nvim_create_namespace('lazaret.diff')
--- The review tab, if open: {tab, list_win, list_buf, left_win, right_win, domain, diff, rows}.
M.view = nil

local function list(value)
  return type(value) == 'table' and value or {}
end

local function short(commit)
  return type(commit) == 'string' and commit:sub(1, 7) or '(none)'
end

local function highlights()
  vim.api.nvim_set_hl(0, 'LazaretWarning', { link = 'DiagnosticWarn', default = true })
  vim.api.nvim_set_hl(0, 'LazaretSection', { link = 'Title', default = true })
  vim.api.nvim_set_hl(0, 'LazaretHint', { link = 'Comment', default = true })
end

--- The file list of a BranchDiff (pure: for tests too).
--- @param diff table BranchDiff
--- @return string[] lines
--- @return table<integer, {path: string, uncommitted: boolean}> rows line (1-based) -> file
--- @return table[] marks {line (0-based), group}
function M.list_lines(diff)
  local lines, rows, marks = {}, {}, {}
  local function add(text, group, file)
    lines[#lines + 1] = text
    if group then
      marks[#marks + 1] = { #lines - 1, group }
    end
    rows[#lines] = file
  end
  local keys = config.options.diff_keys
  add(string.format('%s  %s..%s', diff.branch or 'agent branch', short(diff.base), short(diff.head)), 'LazaretSection')
  add(string.format('%s diff  %s refresh  %s close', keys.open, keys.refresh, keys.close), 'LazaretHint')
  local committed, uncommitted = {}, {}
  for _, f in ipairs(list(diff.files)) do
    committed[f.path] = true
  end
  local wip = type(diff.uncommitted) == 'table' and list(diff.uncommitted.files) or {}
  for _, f in ipairs(wip) do
    uncommitted[f.path] = true
  end
  local warned = {}
  local warnings = list(diff.warnings)
  if #warnings > 0 then
    add('')
    add(string.format('Warnings: %d file%s that make hosts run code', #warnings, #warnings == 1 and '' or 's'), 'LazaretWarning')
    for _, w in ipairs(warnings) do
      warned[w.path] = true
      add(string.format('  ! %s: %s', w.path, w.reason or ''), 'LazaretWarning', {
        path = w.path,
        uncommitted = not committed[w.path] and uncommitted[w.path] == true,
      })
    end
  end
  local function counts(f)
    if f.additions == nil and f.deletions == nil then
      return ''
    end
    return string.format('  +%s -%s', tostring(f.additions or 0), tostring(f.deletions or 0))
  end
  add('')
  local files = list(diff.files)
  if diff.head == nil then
    add('No agent commit has reached the host yet.', 'LazaretHint')
  else
    add(string.format('Committed on the agent branch: %d file%s', #files, #files == 1 and '' or 's'), 'LazaretSection')
  end
  for _, f in ipairs(files) do
    add(
      string.format('  %-2s %s%s%s', f.status or '?', f.path, counts(f), warned[f.path] and '  !' or ''),
      warned[f.path] and 'LazaretWarning' or nil,
      { path = f.path, uncommitted = false }
    )
  end
  add('')
  if type(diff.uncommitted) ~= 'table' then
    add('Uncommitted sandbox changes: unknown (the sandbox is not running)', 'LazaretHint')
  else
    add(string.format('Uncommitted in the sandbox: %d file%s', #wip, #wip == 1 and '' or 's'), 'LazaretSection')
    for _, f in ipairs(wip) do
      add(
        string.format('  %-2s %s%s%s', f.status or '?', f.path, counts(f), warned[f.path] and '  !' or ''),
        warned[f.path] and 'LazaretWarning' or nil,
        { path = f.path, uncommitted = true }
      )
    end
  end
  return lines, rows, marks
end

--- The quickfix items of a BranchDiff: warnings first.
--- @param diff table
--- @param workspace string
--- @return table[]
function M.qf_items(diff, workspace)
  local items = {}
  local function file(path)
    return workspace and (workspace .. '/' .. path) or path
  end
  for _, w in ipairs(list(diff.warnings)) do
    items[#items + 1] = { filename = file(w.path), lnum = 1, type = 'W', text = 'warning: ' .. (w.reason or '') }
  end
  for _, f in ipairs(list(diff.files)) do
    items[#items + 1] = { filename = file(f.path), lnum = 1, text = string.format('%s agent branch', f.status or '?') }
  end
  if type(diff.uncommitted) == 'table' then
    for _, f in ipairs(list(diff.uncommitted.files)) do
      items[#items + 1] = { filename = file(f.path), lnum = 1, text = string.format('%s uncommitted in the sandbox', f.status or '?') }
    end
  end
  return items
end

local function view_valid()
  local v = M.view
  return v and vim.api.nvim_tabpage_is_valid(v.tab) and vim.api.nvim_win_is_valid(v.list_win)
end

local function scratch(name, lines, path)
  local existing = vim.fn.bufnr('^' .. vim.pesc(name) .. '$')
  if existing > 0 then
    pcall(vim.api.nvim_buf_delete, existing, { force = true })
  end
  local buf = vim.api.nvim_create_buf(false, true)
  vim.api.nvim_buf_set_name(buf, name)
  vim.api.nvim_buf_set_lines(buf, 0, -1, false, lines)
  vim.bo[buf].bufhidden = 'wipe'
  vim.bo[buf].modifiable = false
  if path then
    local ft = vim.filetype.match({ filename = path, buf = buf })
    if ft then
      vim.bo[buf].filetype = ft
    end
  end
  return buf
end

--- The buffer text of one FileVersion, and a note for the window bar.
--- @param version table? FileVersion
--- @return string[] lines
--- @return string note
function M.version_lines(version)
  if type(version) ~= 'table' then
    return {}, 'not available (the sandbox is not running)'
  end
  if not version.exists then
    return {}, 'absent'
  end
  if version.binary or type(version.text) ~= 'string' then
    return { string.format('[binary file, %s bytes]', tostring(version.size)) }, 'binary'
  end
  local text = version.text
  if text:sub(-1) == '\n' then
    text = text:sub(1, -2)
  end
  local lines = vim.split(text, '\n', { plain = true })
  return lines, version.truncated and ('truncated at 1 MiB of ' .. tostring(version.size) .. ' bytes') or ''
end

local function show_pair(left, right)
  local v = M.view
  for _, side in ipairs({ { v.left_win, left }, { v.right_win, right } }) do
    local win, spec = side[1], side[2]
    vim.api.nvim_win_call(win, function()
      vim.cmd('diffoff')
    end)
    vim.api.nvim_win_set_buf(win, spec.buf)
    vim.wo[win].winbar = spec.title
  end
  for _, win in ipairs({ v.left_win, v.right_win }) do
    vim.api.nvim_win_call(win, function()
      vim.cmd('diffthis')
    end)
  end
end

--- Shows one file of the list in the two diff windows.
--- @param file {path: string, uncommitted: boolean}
function M.show(file)
  local v = M.view
  if not view_valid() or not v.domain.conn then
    return
  end
  local hash = (v.domain.status and v.domain.status.domainHash) or 'domain'
  v.domain.conn:request(protocol.methods.branch_file_contents, { path = file.path }, function(err, contents)
    if not view_valid() then
      return
    end
    local left, right
    if err then
      local message = err.code == rpc.codes.method_not_found
          and 'this coordinator has no branch/fileContents: update lazaret (protocol v1 additions)'
        or rpc.message(err)
      vim.notify('Lazaret: cannot show ' .. file.path .. ': ' .. message, vim.log.levels.ERROR)
      local lines = { 'Cannot show ' .. file.path .. ':', message }
      left = { buf = scratch('lazaret://' .. hash .. '/error/base/' .. file.path, lines), title = 'error' }
      right = { buf = scratch('lazaret://' .. hash .. '/error/head/' .. file.path, lines), title = 'error' }
    else
      local a_name, a, b_name, b
      if file.uncommitted then
        a_name, a, b_name, b = 'head', contents.head, 'working', contents.working
      else
        a_name, a, b_name, b = 'base', contents.base, 'head', contents.head
      end
      local a_lines, a_note = M.version_lines(a)
      local b_lines, b_note = M.version_lines(b)
      local a_rev = a_name == 'base' and short(v.diff.base) or a_name == 'head' and short(v.diff.head) or 'sandbox'
      local b_rev = b_name == 'head' and short(v.diff.head) or 'sandbox /workspace'
      left = {
        buf = scratch(string.format('lazaret://%s/%s/%s', hash, a_name, file.path), a_lines, file.path),
        title = string.format('%s %s: %s%s', a_name, a_rev, file.path, a_note ~= '' and (' (' .. a_note .. ')') or ''),
      }
      right = {
        buf = scratch(string.format('lazaret://%s/%s/%s', hash, b_name, file.path), b_lines, file.path),
        title = string.format('%s %s: %s%s', b_name, b_rev, file.path, b_note ~= '' and (' (' .. b_note .. ')') or ''),
      }
    end
    show_pair(left, right)
    v.shown = file
  end)
end

local function render(diff)
  local v = M.view
  v.diff = diff
  local lines, rows, marks = M.list_lines(diff)
  v.rows = rows
  vim.bo[v.list_buf].modifiable = true
  vim.api.nvim_buf_set_lines(v.list_buf, 0, -1, false, lines)
  vim.bo[v.list_buf].modifiable = false
  vim.api.nvim_buf_clear_namespace(v.list_buf, ns, 0, -1)
  for _, mark in ipairs(marks) do
    vim.api.nvim_buf_set_extmark(v.list_buf, ns, mark[1], 0, { end_row = mark[1] + 1, hl_group = mark[2] })
  end
  local workspace = v.domain.status and v.domain.status.workspace
  vim.fn.setqflist({}, ' ', {
    title = 'Lazaret: agent changes (' .. (diff.branch or '?') .. ')',
    items = M.qf_items(diff, workspace),
  })
  -- The cursor on the first file (a warning when there is one).
  for row = 1, #lines do
    if rows[row] then
      vim.api.nvim_win_set_cursor(v.list_win, { row, 0 })
      break
    end
  end
end

--- Fetches the branch diff again and redraws the list.
function M.refresh()
  local v = M.view
  if not view_valid() or not v.domain.conn then
    return
  end
  v.domain.conn:request(protocol.methods.branch_diff, { patch = false }, function(err, diff)
    if not view_valid() then
      return
    end
    if err then
      return vim.notify('Lazaret: branch/diff failed: ' .. rpc.message(err), vim.log.levels.ERROR)
    end
    render(diff)
  end)
end

--- Closes the review tab (only the tab this module opened).
function M.close()
  local v = M.view
  M.view = nil
  if v and vim.api.nvim_tabpage_is_valid(v.tab) then
    if #vim.api.nvim_list_tabpages() > 1 then
      vim.cmd.tabclose(vim.api.nvim_tabpage_get_number(v.tab))
    else
      vim.notify('Lazaret: the review tab is the last tab; leaving it open', vim.log.levels.INFO)
    end
  end
end

local function placeholder(name)
  return scratch(name, { 'Select a file in the list (' .. config.options.diff_keys.open .. ')' })
end

--- Opens the review tab for a domain.
--- @param d table a connected domain
function M.open_for(d)
  highlights()
  if view_valid() then
    M.close()
  end
  vim.cmd.tabnew()
  local tab = vim.api.nvim_get_current_tabpage()
  local list_win = vim.api.nvim_get_current_win()
  local empty = vim.api.nvim_get_current_buf()
  local hash = (d.status and d.status.domainHash) or 'domain'
  local list_buf = scratch('lazaret://' .. hash .. '/changes', { 'Loading the agent branch…' })
  vim.bo[list_buf].filetype = 'lazaret'
  vim.api.nvim_win_set_buf(list_win, list_buf)
  if vim.api.nvim_buf_is_valid(empty) and vim.api.nvim_buf_get_name(empty) == '' then
    pcall(vim.api.nvim_buf_delete, empty, {})
  end
  vim.cmd('rightbelow vsplit')
  local left_win = vim.api.nvim_get_current_win()
  vim.api.nvim_win_set_buf(left_win, placeholder('lazaret://' .. hash .. '/left'))
  vim.cmd('rightbelow vsplit')
  local right_win = vim.api.nvim_get_current_win()
  vim.api.nvim_win_set_buf(right_win, placeholder('lazaret://' .. hash .. '/right'))
  vim.api.nvim_set_current_win(list_win)
  vim.api.nvim_win_set_width(list_win, math.min(48, math.floor(vim.o.columns / 3)))
  vim.wo[list_win].wrap = false
  vim.wo[list_win].cursorline = true
  vim.wo[list_win].winfixwidth = true
  M.view = {
    tab = tab,
    list_win = list_win,
    list_buf = list_buf,
    left_win = left_win,
    right_win = right_win,
    domain = d,
    rows = {},
  }
  local keys = config.options.diff_keys
  vim.keymap.set('n', keys.open, function()
    local v = M.view
    local row = vim.api.nvim_win_get_cursor(0)[1]
    local file = v and v.rows[row]
    if file then
      M.show(file)
    end
  end, { buffer = list_buf, nowait = true, desc = 'Lazaret: show this file, base against agent head' })
  vim.keymap.set('n', keys.refresh, M.refresh, { buffer = list_buf, nowait = true, desc = 'Lazaret: refresh the list' })
  vim.keymap.set('n', keys.close, M.close, { buffer = list_buf, nowait = true, desc = 'Lazaret: close the review tab' })
  M.refresh()
end

--- `:LazaretDiff [domain]`
function M.open(arg)
  domains.start()
  domains.pick(arg, M.open_for)
end

--- The confirmation text of a merge (pure: for tests too).
--- @param diff table BranchDiff
--- @param workspace string
--- @return string
function M.merge_prompt(diff, workspace)
  local lines = {
    string.format('Merge %s (%s, %d file%s) into %s?', diff.branch, short(diff.head), #list(diff.files), #list(diff.files) == 1 and '' or 's', workspace),
  }
  local warnings = list(diff.warnings)
  if #warnings > 0 then
    lines[#lines + 1] = string.format('WARNING: %d file%s that make hosts run code:', #warnings, #warnings == 1 and '' or 's')
    for _, w in ipairs(warnings) do
      lines[#lines + 1] = string.format('  ! %s: %s', w.path, w.reason or '')
    end
  end
  if type(diff.uncommitted) == 'table' and #list(diff.uncommitted.files) > 0 then
    lines[#lines + 1] = string.format('(%d uncommitted sandbox change(s) are not part of the branch)', #diff.uncommitted.files)
  end
  return table.concat(lines, '\n')
end

--- Merges the agent branch into the workspace (`git merge --no-edit`).
--- @param d table a connected domain
--- @param callback fun(ok: boolean, output: string)?
function M.merge_for(d, callback)
  callback = callback or function() end
  local workspace = d.status and d.status.workspace
  d.conn:request(protocol.methods.branch_diff, { patch = false }, function(err, diff)
    if err then
      vim.notify('Lazaret: branch/diff failed: ' .. rpc.message(err), vim.log.levels.ERROR)
      return callback(false, rpc.message(err))
    end
    if diff.head == nil or #list(diff.files) == 0 then
      vim.notify('Lazaret: nothing to merge (no agent commit on ' .. tostring(diff.branch) .. ')', vim.log.levels.INFO)
      return callback(false, 'nothing to merge')
    end
    vim.ui.select({ 'Merge', 'Cancel' }, { prompt = M.merge_prompt(diff, workspace) }, function(choice)
      if choice ~= 'Merge' then
        return callback(false, 'cancelled')
      end
      vim.system({ 'git', '-C', workspace, 'merge', '--no-edit', diff.branch }, { text = true }, function(out)
        vim.schedule(function()
          local output = vim.trim((out.stdout or '') .. '\n' .. (out.stderr or ''))
          if out.code == 0 then
            vim.notify('Lazaret: merged ' .. diff.branch .. '\n' .. output, vim.log.levels.INFO)
          else
            vim.notify('Lazaret: git merge failed:\n' .. output, vim.log.levels.ERROR)
          end
          if view_valid() then
            M.refresh()
          end
          callback(out.code == 0, output)
        end)
      end)
    end)
  end)
end

--- `:LazaretMerge [domain]`
function M.merge(arg)
  domains.start()
  domains.pick(arg, function(d)
    M.merge_for(d)
  end)
end

return M
