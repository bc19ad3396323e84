--- The review of the agent branch: `:LazaretDiff` opens a tab with the
--- changed files (D4 warnings first, also as the quickfix list) and shows a
--- file's base and agent head side by side in diff mode, from read-only
--- scratch buffers filled by `branch/fileContents` for exactly the commits
--- the list shows; `:LazaretMerge` merges the commit that was reviewed (never
--- the branch name) with `lazaret merge --expect`, after a confirmation
--- naming that commit and repeating its warnings.
---
--- File names and reasons are agent text: shown inert everywhere (the list,
--- the quickfix text, buffer names), and in the window bars with `%` doubled
--- too: 'winbar' is statusline syntax, and a file named
--- `docs/notes.md<spaces>%{system('...')}` once ran code on the host when
--- its row was opened.
local protocol = require('lazaret.protocol')
local config = require('lazaret.config')
local domains = require('lazaret.domains')
local rpc = require('lazaret.rpc')
local text = require('lazaret.text')
local window = require('lazaret.window')

local M = {}

local ns = vim.api.nvim_create_namespace('lazaret.diff')
--- The review tab, if open: {tab, list_win, list_buf, left_win, right_win, domain, diff, rows}.
M.view = nil

local function list(value)
  return type(value) == 'table' and value or {}
end

local function short(commit)
  return type(commit) == 'string' and text.inert(commit:sub(1, 7)) or '(none)'
end

--- A commit id as the merge confirmation names it (12 hex digits, as `lazaret merge` does).
local function short12(commit)
  return type(commit) == 'string' and text.inert(commit:sub(1, 12)) or '(none)'
end

--- A path for a list line or a title (inert; the full path, never cut: the
--- list scrolls sideways, and the window bar cuts it at the window).
local function shown_path(path)
  return text.inert(path)
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
  add(text.inert(diff.branch or 'agent branch') .. '  ' .. short(diff.base) .. '..' .. short(diff.head), 'LazaretSection')
  add(text.inert(string.format('%s diff  %s refresh  %s close', keys.open, keys.refresh, keys.close)), 'LazaretHint')
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
      add('  ! ' .. shown_path(w.path) .. ': ' .. text.inert(w.reason or ''), 'LazaretWarning', {
        path = w.path,
        uncommitted = not committed[w.path] and uncommitted[w.path] == true,
      })
    end
  end
  local function counts(f)
    if f.additions == nil and f.deletions == nil then
      return ''
    end
    return '  +' .. text.inert(f.additions or 0) .. ' -' .. text.inert(f.deletions or 0)
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
      string.format('  %-2s ', text.inert(f.status or '?')) .. shown_path(f.path) .. counts(f) .. (warned[f.path] and '  !' or ''),
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
        string.format('  %-2s ', text.inert(f.status or '?')) .. shown_path(f.path) .. counts(f) .. (warned[f.path] and '  !' or ''),
        warned[f.path] and 'LazaretWarning' or nil,
        { path = f.path, uncommitted = true }
      )
    end
  end
  return lines, rows, marks
end

--- The quickfix items of a BranchDiff: warnings first. `filename` is the
--- path under the workspace (to jump to the host's copy) when the path is
--- inert text; a path with control, bidi or invisible characters gets no
--- `filename` (it would become a buffer name, shown raw in 'statusline' and
--- :ls) and is named, escaped, in `text` instead.
--- @param diff table
--- @param workspace string
--- @return table[]
function M.qf_items(diff, workspace)
  local items = {}
  local function item(path, fields)
    if type(path) == 'string' and text.is_inert(path) and workspace then
      fields.filename = workspace .. '/' .. path
    else
      fields.text = shown_path(path) .. ': ' .. fields.text
    end
    fields.lnum = 1
    items[#items + 1] = fields
  end
  for _, w in ipairs(list(diff.warnings)) do
    item(w.path, { type = 'W', text = 'warning: ' .. text.inert(w.reason or '') })
  end
  for _, f in ipairs(list(diff.files)) do
    item(f.path, { text = text.inert(f.status or '?') .. ' agent branch' })
  end
  if type(diff.uncommitted) == 'table' then
    for _, f in ipairs(list(diff.uncommitted.files)) do
      item(f.path, { text = text.inert(f.status or '?') .. ' uncommitted in the sandbox' })
    end
  end
  return items
end

local function view_valid()
  local v = M.view
  return v and vim.api.nvim_tabpage_is_valid(v.tab) and vim.api.nvim_win_is_valid(v.list_win)
end

--- A read-only scratch buffer named `name` (inert text: callers build it
--- from inert parts) holding `lines` (file text: shown as Neovim shows any
--- buffer, control characters as ^X and <200f>, modelines off).
local function scratch(name, lines, path)
  -- A buffer already named so (the same file shown again) is still in its
  -- window: it gives up the name and is wiped when replaced ('bufhidden').
  window.forget_buffer(name)
  local buf = vim.api.nvim_create_buf(false, true)
  vim.api.nvim_buf_set_name(buf, name)
  vim.bo[buf].modeline = false
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
    -- Statusline syntax: the title (raw parts) made inert, every `%` doubled;
    -- then our own `%<`: a title too long for the window loses its end, not
    -- its start.
    vim.wo[win].winbar = text.statusline(spec.title) .. '%<'
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
  local hash = text.inert((v.domain.status and v.domain.status.domainHash) or 'domain')
  local path = shown_path(file.path)
  -- Pinned to the commits the list shows: the agent may have moved the
  -- branch since, and the review must show what its title names.
  local params = { path = file.path }
  if type(v.diff.head) == 'string' then
    params.headCommit = v.diff.head
    params.baseCommit = type(v.diff.base) == 'string' and v.diff.base or nil
  end
  v.domain.conn:request(protocol.methods.branch_file_contents, params, function(err, contents)
    if not view_valid() then
      return
    end
    local left, right
    if err or type(contents) ~= 'table' then
      local message = text.inert(err and rpc.message(err) or 'no answer')
      vim.notify('Lazaret: cannot show ' .. (text.cut(path, 200)) .. ': ' .. (text.cut(message, 300)), vim.log.levels.ERROR)
      local lines = { 'Cannot show ' .. path .. ':', message }
      left = { buf = scratch('lazaret://' .. hash .. '/error/base/' .. path, lines), title = 'error: ' .. file.path }
      right = { buf = scratch('lazaret://' .. hash .. '/error/head/' .. path, lines), title = 'error: ' .. file.path }
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
        buf = scratch('lazaret://' .. hash .. '/' .. a_name .. '/' .. path, a_lines, file.path),
        title = a_name .. ' ' .. a_rev .. ': ' .. file.path .. (a_note ~= '' and (' (' .. a_note .. ')') or ''),
      }
      right = {
        buf = scratch('lazaret://' .. hash .. '/' .. b_name .. '/' .. path, b_lines, file.path),
        title = b_name .. ' ' .. b_rev .. ': ' .. file.path .. (b_note ~= '' and (' (' .. b_note .. ')') or ''),
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
    title = 'Lazaret: agent changes (' .. text.inert(diff.branch or '?') .. ')',
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
    if err or type(diff) ~= 'table' then
      return vim.notify('Lazaret: branch/diff failed: ' .. text.inert(rpc.message(err or 'no answer')), vim.log.levels.ERROR)
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
  local hash = text.inert((d.status and d.status.domainHash) or 'domain')
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

--- Files listed by name in the merge confirmation (as `lazaret merge`).
local LISTED_FILES = 20
--- Cells of one path or reason in the confirmation.
local PROMPT_CELLS = 200

--- The confirmation text of a merge (pure: for tests too): the commit by
--- its id, the files, and first the warnings (D4) of exactly that commit.
--- @param diff table BranchDiff fetched with `head` = the commit to merge
--- @param workspace string
--- @return string
function M.merge_prompt(diff, workspace)
  local files = list(diff.files)
  local lines = {
    string.format(
      'Merge %s at commit %s (%d file%s since %s) into %s?',
      text.inert(diff.branch or 'the agent branch'),
      short12(diff.head),
      #files,
      #files == 1 and '' or 's',
      short12(diff.base),
      (text.cut(text.inert(workspace or '?'), PROMPT_CELLS))
    ),
  }
  -- Only the committed files' warnings: uncommitted sandbox files are not merged.
  local committed = {}
  for _, f in ipairs(files) do
    committed[f.path] = true
  end
  local warnings = vim.tbl_filter(function(w)
    return committed[w.path] == true
  end, list(diff.warnings))
  if #warnings > 0 then
    lines[#lines + 1] = string.format('WARNING: %d file%s that make hosts run code:', #warnings, #warnings == 1 and '' or 's')
    for _, w in ipairs(warnings) do
      lines[#lines + 1] = '  ! ' .. (text.cut(shown_path(w.path), PROMPT_CELLS)) .. ': ' .. text.inert(w.reason or '')
    end
  end
  for i, f in ipairs(files) do
    if i > LISTED_FILES then
      lines[#lines + 1] = string.format('  … and %d more (:LazaretDiff lists them all)', #files - LISTED_FILES)
      break
    end
    lines[#lines + 1] = string.format('  %-2s ', text.inert(f.status or '?')) .. (text.cut(shown_path(f.path), PROMPT_CELLS))
  end
  if type(diff.uncommitted) == 'table' and #list(diff.uncommitted.files) > 0 then
    lines[#lines + 1] = string.format('(%d uncommitted sandbox change(s) are not part of the merge)', #diff.uncommitted.files)
  end
  return table.concat(lines, '\n')
end

--- Lines of `lazaret merge` output a notification shows, and their cells
--- (more would scroll into a hit-enter prompt: the review lists every file).
local OUTPUT_LINES = 8
local OUTPUT_CELLS = 120

--- Output of `lazaret merge` for a notification: inert lines, each cut, the
--- last ones (git's result and lazaret's verdict) kept when there are many.
local function output_lines(out)
  local lines = {}
  for _, stream in ipairs({ out.stdout or '', out.stderr or '' }) do
    for _, line in ipairs(vim.split(stream, '\n', { plain = true, trimempty = true })) do
      lines[#lines + 1] = (text.cut(text.inert(line), OUTPUT_CELLS))
    end
  end
  if #lines > OUTPUT_LINES then
    local skipped = #lines - OUTPUT_LINES
    lines = vim.list_slice(lines, skipped + 1)
    table.insert(lines, 1, string.format('(%d earlier line%s of lazaret merge not shown)', skipped, skipped == 1 and '' or 's'))
  end
  return table.concat(lines, '\n')
end

--- The branch is not at the commit that was reviewed: say so (nothing was
--- merged) and offer to review it again.
local function moved(d, branch, reviewed, now, detail)
  local message = 'Lazaret: the agent branch ' .. text.inert(branch) .. ' moved since the review: you reviewed ' .. short12(reviewed)
    .. (now and (', it is now at ' .. short12(now)) or '') .. '. Nothing was merged.'
  vim.notify(message .. (detail and detail ~= '' and ('\n' .. detail) or ''), vim.log.levels.WARN)
  vim.ui.select({ 'Review it again', 'Not now' }, { prompt = message .. ' Review it again?' }, function(choice)
    if choice == 'Review it again' then
      M.open_for(d)
    end
  end)
end

--- Merges the agent branch into the workspace, pinned: the commit of the
--- open review of this domain (else the branch's head now, which the
--- confirmation then names), with `lazaret merge --expect <commit> --yes`
--- after the confirmation. If the branch moved meanwhile nothing is merged.
--- @param d table a connected domain
--- @param callback fun(ok: boolean, output: string, code: integer?)?
function M.merge_for(d, callback)
  callback = callback or function() end
  local status = d.status or {}
  local workspace, profile = status.workspace, status.profile
  local v = M.view
  local reviewed = view_valid() and v.domain == d and v.diff and type(v.diff.head) == 'string' and v.diff.head or nil
  local function failed(what, err)
    local message = text.inert(rpc.message(err or 'no answer'))
    vim.notify('Lazaret: ' .. what .. ' failed: ' .. message, vim.log.levels.ERROR)
    callback(false, message)
  end
  if type(workspace) ~= 'string' or type(profile) ~= 'string' then
    vim.notify('Lazaret: cannot merge: the domain\'s status (workspace, profile) is not known yet; try again', vim.log.levels.ERROR)
    return callback(false, 'no status')
  end
  d.conn:request(protocol.methods.branch_diff, { patch = false }, function(err, current)
    if err or type(current) ~= 'table' then
      return failed('branch/diff', err)
    end
    if type(current.head) ~= 'string' then
      vim.notify('Lazaret: nothing to merge (no agent commit on ' .. text.inert(current.branch or '?') .. ')', vim.log.levels.INFO)
      return callback(false, 'nothing to merge')
    end
    if reviewed and reviewed ~= current.head then
      moved(d, current.branch or '?', reviewed, current.head)
      return callback(false, 'moved')
    end
    local commit = reviewed or current.head
    -- The warnings of exactly the commit the confirmation names.
    d.conn:request(protocol.methods.branch_diff, { patch = false, head = commit }, function(err2, diff)
      if err2 or type(diff) ~= 'table' then
        return failed('branch/diff of ' .. short12(commit), err2)
      end
      if #list(diff.files) == 0 then
        vim.notify('Lazaret: nothing to merge (' .. text.inert(diff.branch or '?') .. ' at ' .. short12(commit) .. ' is part of your HEAD)', vim.log.levels.INFO)
        return callback(false, 'nothing to merge')
      end
      vim.ui.select({ 'Merge', 'Cancel' }, { prompt = M.merge_prompt(diff, workspace) }, function(choice)
        if choice ~= 'Merge' then
          return callback(false, 'cancelled')
        end
        local argv = config.command('merge', '--workspace', workspace, '--profile', profile, '--expect', commit, '--yes')
        local ok, started = pcall(vim.system, argv, { text = true }, function(out)
          vim.schedule(function()
            local output = output_lines(out)
            if out.code == 0 then
              vim.notify('Lazaret: merged ' .. text.inert(diff.branch) .. ' at ' .. short12(commit) .. '\n' .. output, vim.log.levels.INFO)
            elseif out.code == 3 then
              moved(d, diff.branch or '?', commit, nil, output)
            else
              vim.notify('Lazaret: lazaret merge failed (exit status ' .. tostring(out.code) .. '); nothing was merged:\n' .. output, vim.log.levels.ERROR)
            end
            if view_valid() then
              M.refresh()
            end
            callback(out.code == 0, output, out.code)
          end)
        end)
        if not ok then
          local problem = require('lazaret.discovery').failure(argv, { code = 127, stderr = tostring(started) })
          vim.notify('Lazaret: cannot merge: ' .. problem.what .. ' (' .. problem.fix .. ')', vim.log.levels.ERROR)
          callback(false, problem.what)
        end
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
