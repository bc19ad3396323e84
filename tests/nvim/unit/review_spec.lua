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
local contents = {
  ['src/lib.rs'] = { path = 'src/lib.rs', base = version('fn a() {}\nfn b() {}\n'), head = version('fn a() {}\nfn c() {}\n'), working = version('fn a() {}\nfn c() {}\n') },
  ['notes.txt'] = { path = 'notes.txt', base = version(nil), head = version(nil), working = version('scratch\n') },
}
local fake = Fake.new(path, {
  ['escalation/list'] = function()
    return {}
  end,
  ['domain/status'] = function()
    return { apiVersion = 1, domainHash = 'feed01', profile = 'default', workspace = '/w', containerState = 'running', sessions = {} }
  end,
  ['network/show'] = function()
    return nil, { code = 1008, message = 'no sidecar' }
  end,
  ['branch/diff'] = function()
    return {
      branch = 'lazaret/agent-default',
      base = 'aaaaaaaaaaaa',
      head = 'bbbbbbbbbbbb',
      files = { { path = 'src/lib.rs', status = 'M', additions = 1, deletions = 1 } },
      patch = '',
      uncommitted = { files = { { path = 'notes.txt', status = '??' } }, patch = '' },
      warnings = {},
    }
  end,
  ['branch/fileContents'] = function(params)
    return contents[params.path]
  end,
})
domains.info = { socketRoot = root, apiVersion = 1 }
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
    winbar = vim.wo[win].winbar,
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
