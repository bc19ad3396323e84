-- Unit tests of the review tab against a fake coordinator that speaks
-- branch/diff and branch/fileContents as protocol v1's additions define
-- them: base against head in diff mode, read-only scratch buffers, the
-- sandbox's working copy for uncommitted files, and only its own tab closed.
local dir = vim.fn.fnamemodify(arg[0], ':p:h')
local T = dofile(dir .. '/helper.lua')
local Fake = dofile(dir .. '/fake_coordinator.lua')
local domains = require('lazaret.domains')
local diff = require('lazaret.diff')

local root = vim.fn.tempname()
vim.fn.mkdir(root .. '/feed01', 'p')
local path = root .. '/feed01/control.sock'
local function version(text)
  return { exists = text ~= nil, binary = false, truncated = false, size = text and #text or 0, text = text }
end
local marker = vim.fn.tempname() .. '-marker'
local evil = 'docs/notes.md' .. (' '):rep(60) .. "%{system('id > " .. marker .. "')[0:-1]}\27[2J\u{202e}"
local contents = {
  ['src/lib.rs'] = { path = 'src/lib.rs', base = version('fn a() {}\nfn b() {}\n'), head = version('fn a() {}\nfn c() {}\n'), working = version('fn a() {}\nfn c() {}\n') },
  ['notes.txt'] = { path = 'notes.txt', base = version(nil), head = version(nil), working = version('scratch\n') },
  [evil] = { path = evil, base = version(nil), head = version('x\n'), working = version('x\n') },
}
local fake = Fake.new(path, {
  ['pending/list'] = function()
    return {}
  end,
  ['domain/status'] = function()
    return { apiVersion = require('lazaret.protocol').API_VERSION, domainHash = 'feed01', profile = 'default', workspace = '/w', containerState = 'running', sessions = {} }
  end,
  ['network/show'] = function()
    return nil, { code = require('lazaret.protocol').error_code.NETWORK_FAILED, message = 'no sidecar' }
  end,
  ['branch/diff'] = function()
    return {
      branch = 'lazaret/agent-default',
      base = 'aaaaaaaaaaaa',
      head = 'bbbbbbbbbbbb',
      files = { { path = 'src/lib.rs', status = 'M', additions = 1, deletions = 1 }, { path = evil, status = 'A', additions = 1, deletions = 0 } },
      patch = '',
      uncommitted = { files = { { path = 'notes.txt', status = '??' } }, patch = '' },
      warnings = {},
    }
  end,
  ['branch/fileContents'] = function(params)
    return contents[params.path]
  end,
})
local function calls(method)
  return fake:calls(method)
end
domains.info = { socketRoot = root, apiVersion = require('lazaret.protocol').API_VERSION }
domains.tick()
T.test('setup: the plugin connects to the fake coordinator', function()
  T.wait(function()
    return #domains.connected() == 1 and domains.connected()[1].status ~= nil
  end, 3000, 'connected')
end)

local function pane(win)
  local buf = vim.api.nvim_win_get_buf(win)
  return {
    name = vim.api.nvim_buf_get_name(buf):gsub('^.*lazaret://', 'lazaret://'),
    lines = vim.api.nvim_buf_get_lines(buf, 0, -1, false),
    diff = vim.wo[win].diff,
    modifiable = vim.bo[buf].modifiable,
    ft = vim.bo[buf].filetype,
    -- What the window bar shows (the option is statusline syntax).
    winbar = vim.api.nvim_eval_statusline(vim.wo[win].winbar, { winid = win, use_winbar = true, maxwidth = 1000 }).str,
  }
end

T.test('a committed file shows base against agent head in diff mode', function()
  local user_win = vim.api.nvim_get_current_win()
  diff.open_for(domains.connected()[1])
  T.wait(function()
    return diff.view and diff.view.diff ~= nil
  end, 2000, 'list loaded')
  T.ok(vim.api.nvim_get_current_win() ~= user_win)
  diff.show({ path = 'src/lib.rs', uncommitted = false })
  T.wait(function()
    return diff.view.shown ~= nil
  end, 2000, 'shown')
  local left, right = pane(diff.view.left_win), pane(diff.view.right_win)
  T.eq(left.name, 'lazaret://feed01/base/src/lib.rs')
  T.eq(left.lines, { 'fn a() {}', 'fn b() {}' })
  T.eq(right.lines, { 'fn a() {}', 'fn c() {}' })
  T.eq({ left.diff, right.diff, left.modifiable, right.modifiable, left.ft }, { true, true, false, false, 'rust' })
  T.eq(left.winbar, 'base aaaaaaa: src/lib.rs')
  T.eq(right.winbar, 'head bbbbbbb: src/lib.rs')
end)

T.test('showing the same file again works (its buffers are replaced)', function()
  for _ = 1, 2 do
    diff.view.shown = nil
    diff.show({ path = 'src/lib.rs', uncommitted = false })
    T.wait(function()
      return diff.view.shown ~= nil
    end, 2000, 'shown')
  end
  T.eq(pane(diff.view.right_win).lines, { 'fn a() {}', 'fn c() {}' })
  T.ok(vim.api.nvim_win_is_valid(diff.view.left_win) and vim.api.nvim_win_is_valid(diff.view.right_win), 'both windows are still there')
end)

T.test('branch/fileContents is pinned to the base and head the list shows', function()
  local call = calls('branch/fileContents')[#calls('branch/fileContents')]
  T.eq(call.params, { path = 'src/lib.rs', baseCommit = 'aaaaaaaaaaaa', headCommit = 'bbbbbbbbbbbb' })
end)

T.test('a file name with %{system()} is shown inert: the winbar evaluates to the text, nothing runs', function()
  diff.view.shown = nil
  diff.show({ path = evil, uncommitted = false })
  T.wait(function()
    return diff.view.shown ~= nil
  end, 2000, 'shown')
  for _, win in ipairs({ diff.view.left_win, diff.view.right_win }) do
    local bar = vim.wo[win].winbar
    local evaluated = vim.api.nvim_eval_statusline(bar, { winid = win, use_winbar = true, maxwidth = 10000 }).str
    T.ok(evaluated:find("%{system('id > " .. marker .. "')[0:-1]}\\e[2J\\u{202e}", 1, true), evaluated)
    T.ok(require('lazaret.text').is_inert(vim.api.nvim_buf_get_name(vim.api.nvim_win_get_buf(win))), 'buffer name inert')
  end
  T.ok(not vim.uv.fs_stat(marker), 'the marker is absent: nothing ran')
  local lines = vim.api.nvim_buf_get_lines(diff.view.list_buf, 0, -1, false)
  T.ok(table.concat(lines, '\n'):find("  A  docs/notes.md" .. (' '):rep(60) .. "%{system(", 1, true), table.concat(lines, '\n'))
end)

T.test('an uncommitted file shows agent head against the sandbox working copy', function()
  diff.view.shown = nil
  diff.show({ path = 'notes.txt', uncommitted = true })
  T.wait(function()
    return diff.view.shown ~= nil
  end, 2000, 'shown')
  local left, right = pane(diff.view.left_win), pane(diff.view.right_win)
  T.eq(left.lines, { '' })
  T.eq(left.winbar, 'head bbbbbbb: notes.txt (absent)')
  T.eq(right.lines, { 'scratch' })
  T.eq(right.name, 'lazaret://feed01/working/notes.txt')
end)

T.test('q closes the review tab and nothing else', function()
  local tabs = #vim.api.nvim_list_tabpages()
  vim.api.nvim_set_current_win(diff.view.list_win)
  vim.api.nvim_feedkeys('q', 'x', false)
  T.eq(#vim.api.nvim_list_tabpages(), tabs - 1)
  T.eq(diff.view, nil)
end)

domains.stop()
fake:close()
T.finish()
