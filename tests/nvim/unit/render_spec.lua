-- Unit tests of what the windows show: the pending list, the review list
-- (warnings first), the quickfix items, the merge confirmation, file
-- versions, and the network policy.
local T = dofile(vim.fn.fnamemodify(arg[0], ':p:h') .. '/helper.lua')
local approvals = require('lazaret.approvals')
local diff = require('lazaret.diff')
local net = require('lazaret.net')

local branch_diff = {
  branch = 'lazaret/agent-default',
  base = 'ac56fdc32f38aaaa',
  head = 'dac039389748bbbb',
  files = {
    { path = 'b.txt', status = 'A', additions = 1, deletions = 0 },
    { path = '.vscode/tasks.json', status = 'A', additions = 3, deletions = 0 },
  },
  patch = '',
  uncommitted = { files = { { path = '.envrc', status = '??' } }, patch = '' },
  warnings = {
    { path = '.vscode/tasks.json', reason = 'VS Code runs tasks' },
    { path = '.envrc', reason = 'direnv runs this file' },
  },
}

T.test('the pending window shows argv, cwd, justification, reasons and risk notes', function()
  local items = {
    {
      key = '/s\0id1',
      domain = '/s',
      escalation = {
        requestId = 'id1',
        argv = { 'rm', '-rf', 'build dir' },
        cwd = '/w',
        justification = 'clean up',
        reasons = { 'rm is not in auto_approve' },
        riskNotes = { 'deletes files', 'recursive' },
        profile = 'default',
      },
    },
    { key = '/s\0id2', domain = '/s', escalation = { requestId = 'id2', argv = { 'ls' }, cwd = '/w', reasons = {}, riskNotes = {} } },
  }
  local lines, marks, ids = approvals.render_lines(items)
  local text = table.concat(lines, '\n')
  T.ok(text:find("[1] rm -rf 'build dir'", 1, true), text)
  T.ok(text:find('cwd      /w', 1, true))
  T.ok(text:find('why      clean up', 1, true))
  T.ok(text:find('reasons  rm is not in auto_approve', 1, true))
  T.ok(text:find('risk     deletes files\n             recursive', 1, true), text)
  T.ok(text:find('(no justification given)', 1, true))
  T.ok(text:find('stay pending', 1, true), 'closing leaves requests pending: said in the window')
  T.ok(text:find('2 pending escalations', 1, true))
  local risk_marked = false
  for _, mark in ipairs(marks) do
    risk_marked = risk_marked or (mark[2] == 'LazaretRisk' and lines[mark[1] + 1]:find('deletes', 1, true) ~= nil)
  end
  T.ok(risk_marked, 'risk notes highlighted')
  T.eq(ids[7], '/s\0id1')
  T.eq({ ids[1], ids[2], ids[3], ids[4], ids[5], ids[6] }, {}, 'the header lines belong to no request')
  T.eq(lines[2], 'DISARMED: keys are discarded until 1 s without a key (0 keys discarded)')
end)

T.test('a selected approval names the command exactly (every space kept), in lines that fit; a long one says it was cut', function()
  local item = { key = 'k', domain = '/s', escalation = { requestId = 'k', argv = { 'echo', 'two  spaces', 'x' }, cwd = '/w' } }
  local lines = approvals.render_lines({ item }, { width = 74, arming = { armed = true, discarded = 2, selection = { key = 'k', kind = 'approve' } } })
  local t = table.concat(lines, '\n')
  T.ok(t:find("ARMED: keys answer the request under the cursor (2 keys discarded)\nCONFIRM with <CR> (any other key cancels and disarms):\n"
    .. "  approve: run on the host, in /w:\n    echo 'two  spaces' x\n", 1, true), t)
  local words = {}
  for i = 1, 300 do
    words[i] = 'word' .. i
  end
  item.escalation.argv = words
  local shown = approvals.render_lines({ item }, { width = 74, arming = { armed = true, discarded = 0, selection = { key = 'k', kind = 'edit', argv = { 'rm', '-rf', 'x  y' } } } })
  T.ok(table.concat(shown, '\n'):find("run on the host INSTEAD of the request, in /w:\n    rm -rf 'x  y'\n", 1, true), table.concat(shown, '\n'))
  lines = approvals.render_lines({ item }, { width = 74, arming = { armed = true, discarded = 0, selection = { key = 'k', kind = 'approve' } } })
  local command, cut = {}, nil
  for _, line in ipairs(lines) do
    if line:find('^    word') then
      command[#command + 1] = line:sub(5)
    end
    cut = cut or line:match('^    … %(cut: ([%d ]+) more characters')
  end
  T.ok(#command == 7 and cut, table.concat(lines, '\n'))
  local kept = table.concat(command)
  T.ok(vim.startswith(table.concat(words, ' '), kept), 'the start, every character')
  T.eq(#kept + tonumber((cut:gsub(' ', ''))), #table.concat(words, ' '), 'the note counts the rest exactly')
  for _, line in ipairs(lines) do
    if line:find('^    word') then
      T.ok(vim.fn.strdisplaywidth(line) <= 74, line)
    end
  end
end)

T.test('an empty queue says so', function()
  local lines = approvals.render_lines({})
  T.eq(lines[1], 'Lazaret: no pending escalations or network requests')
end)

T.test('the review list puts the warnings first, highlighted, and marks warned files', function()
  local lines, rows, marks = diff.list_lines(branch_diff)
  local first_warning, first_file
  for i, line in ipairs(lines) do
    if line:find('^  ! ') and not first_warning then
      first_warning = i
    end
    if line:find('^  A  b.txt') and not first_file then
      first_file = i
    end
  end
  T.ok(first_warning and first_file and first_warning < first_file, table.concat(lines, '\n'))
  T.eq(lines[first_warning], '  ! .vscode/tasks.json: VS Code runs tasks')
  T.eq(rows[first_warning], { path = '.vscode/tasks.json', uncommitted = false })
  T.eq(rows[first_warning + 1], { path = '.envrc', uncommitted = true })
  local text = table.concat(lines, '\n')
  T.ok(text:find('A  .vscode/tasks.json  +3 -0  !', 1, true), text)
  T.ok(text:find('Uncommitted in the sandbox: 1 file\n  ?? .envrc  !', 1, true), text)
  local warned = 0
  for _, mark in ipairs(marks) do
    if mark[2] == 'LazaretWarning' then
      warned = warned + 1
    end
  end
  T.eq(warned, 5, 'heading, 2 warnings, 2 warned files')
end)

T.test('before the first agent commit the list says so', function()
  local lines = diff.list_lines({ branch = 'lazaret/agent-x', files = {}, warnings = {}, uncommitted = { files = {} } })
  T.ok(table.concat(lines, '\n'):find('No agent commit has reached the host yet.', 1, true))
end)

T.test('the quickfix list has the warnings first, then committed, then uncommitted', function()
  local items = diff.qf_items(branch_diff, '/w')
  T.eq(#items, 5)
  T.eq({ items[1].filename, items[1].type }, { '/w/.vscode/tasks.json', 'W' })
  T.eq({ items[2].filename, items[2].type }, { '/w/.envrc', 'W' })
  T.eq(items[3].text, 'A agent branch')
  T.eq(items[5].text, '?? uncommitted in the sandbox')
end)

T.test('the merge confirmation names the commit and repeats the warnings of the committed files', function()
  local prompt = diff.merge_prompt(branch_diff, '/w')
  T.ok(prompt:find('Merge lazaret/agent-default at commit dac039389748 (2 files since ac56fdc32f38) into /w?', 1, true), prompt)
  T.ok(prompt:find('WARNING: 1 file that make hosts run code:\n  ! .vscode/tasks.json: VS Code runs tasks', 1, true), prompt)
  T.ok(not prompt:find('.envrc: direnv', 1, true), 'an uncommitted file is not merged: no warning for it: ' .. prompt)
  T.ok(prompt:find('  A  b.txt', 1, true), prompt)
  T.ok(prompt:find('(1 uncommitted sandbox change(s) are not part of the merge)', 1, true), prompt)
end)

T.test('file versions: text, absent, binary, truncated, unavailable', function()
  T.eq({ diff.version_lines({ exists = true, binary = false, truncated = false, size = 6, text = 'a\nb\n' }) }, { { 'a', 'b' }, '' })
  T.eq({ diff.version_lines({ exists = false, binary = false, truncated = false, size = 0 }) }, { {}, 'absent' })
  T.eq({ diff.version_lines({ exists = true, binary = true, truncated = false, size = 9 }) }, { { '[binary file, 9 bytes]' }, 'binary' })
  local _, note = diff.version_lines({ exists = true, binary = false, truncated = true, size = 2000000, text = 'x' })
  T.eq(note, 'truncated at 1 MiB of 2000000 bytes')
  T.eq(select(2, diff.version_lines(nil)), 'not available (the sandbox is not running)')
end)

T.test('the network policy in lines', function()
  local lines = net.policy_lines({
    allow = { '10.0.0.0/8', '*.npm.test' },
    deny = {},
    learned = { { address = '10.1.2.3', names = { 'r.npm.test' }, expiresInSeconds = 30 } },
    upstreams = { '10.0.0.53:53' },
    rules = 9,
    credentials = {
      { origin = 'https://api.anthropic.com', port = 17400, header = 'x-api-key', status2xx = 3, status4xx = 1, rejected = 1 },
    },
  })
  T.eq(lines, {
    'allow    10.0.0.0/8 *.npm.test',
    'deny     (nothing)',
    'learned  10.1.2.3 (r.npm.test), 30 s left',
    'dns      10.0.0.53:53',
    'keys     https://api.anthropic.com via 127.0.0.1:17400, x-api-key added; 4 requests, 1 refused',
    'rules    9 kernel rules in the sidecar',
  })
end)

T.test('the network policy in one line counts the API key endpoints', function()
  local status = require('lazaret.status')
  local endpoint = { origin = 'https://api.anthropic.com', port = 17400, header = 'x-api-key', rejected = 0 }
  T.eq(status.policy_text({ policy = { allow = { 'api.anthropic.com' }, deny = {}, learned = {}, credentials = { endpoint } } }),
    'allow api.anthropic.com; 1 API key endpoint (:LazaretNet show)')
  T.eq(status.policy_text({ policy = { allow = {}, deny = {}, learned = {}, credentials = { endpoint, endpoint } } }),
    'allow (nothing); 2 API key endpoints (:LazaretNet show)')
  T.eq(status.policy_text({ policy = { allow = { 'a.test' }, deny = {}, learned = {} } }), 'allow a.test')
end)

local root = vim.fn.fnamemodify(arg[0], ':p:h:h:h:h')
local corpus = vim.json.decode(table.concat(vim.fn.readfile(root .. '/tests/hostile/strings.json'), '\n'))
local hostile = {}
for _, entry in ipairs(corpus.entries) do
  hostile[#hostile + 1] = entry.text:rep(entry['repeat'] or 1):gsub('@MARKER@', '/tmp/unit-marker')
end

--- Whether a line holds a raw unsafe character.
local text = require('lazaret.text')
local function inert_lines(lines)
  for i, line in ipairs(lines) do
    if not text.is_inert(line) then
      return false, i
    end
  end
  return true
end

T.test('hostile argv, justification, cwd, reasons: every line inert, long text cut with a note', function()
  local items = {}
  for i, s in ipairs(hostile) do
    items[#items + 1] = {
      key = '/s\0h' .. i,
      domain = '/s',
      escalation = { requestId = 'h' .. i, argv = { s, 'arg', s }, cwd = s, justification = s, reasons = { s }, riskNotes = { s }, profile = s },
    }
  end
  local lines, _, keys = approvals.render_lines(items, { width = 100 })
  T.ok(inert_lines(lines))
  local buf = vim.api.nvim_create_buf(false, true)
  T.ok(pcall(vim.api.nvim_buf_set_lines, buf, 0, -1, false, lines), 'nvim_buf_set_lines takes every line')
  for _, line in ipairs(lines) do
    T.ok(vim.fn.strdisplaywidth(line) <= 100, 'fits the window: ' .. line:sub(1, 80))
  end
  local text_all = table.concat(lines, '\n')
  T.ok(text_all:find('[31] AAAAAAAAAA', 1, true), 'the long request starts with its program')
  T.ok(text_all:find('more characters)', 1, true), 'says it was cut')
  T.ok(text_all:find('(cut)    <CR> opens the whole request', 1, true), text_all:sub(1, 300))
  local count = 0
  for _ in pairs(keys) do
    count = count + 1
  end
  T.ok(count >= #items * 7, 'every request line has its key')
  for _, item in ipairs(items) do
    local full = approvals.full_lines(item)
    T.ok(inert_lines(full), 'the full view is inert')
    T.ok(pcall(vim.api.nvim_buf_set_lines, buf, 0, -1, false, full))
  end
  local full = table.concat(approvals.full_lines(items[31]), '\n')
  T.ok(full:find(('A'):rep(65536), 1, true), 'the full view cuts nothing')
end)

T.test('hostile file names: list, quickfix and merge confirmation are inert', function()
  local files, wip, warnings = {}, {}, {}
  for i, s in ipairs(hostile) do
    files[#files + 1] = { path = 'c' .. i .. s, status = 'A', additions = 1, deletions = 0 }
    wip[#wip + 1] = { path = 'u' .. i .. s, status = '??' }
    warnings[#warnings + 1] = { path = 'c' .. i .. s, reason = s }
  end
  local d = { branch = 'lazaret/agent-x', base = ('a'):rep(40), head = ('b'):rep(40), files = files, warnings = warnings,
    uncommitted = { files = wip, patch = '' } }
  local lines, rows = diff.list_lines(d)
  T.ok(inert_lines(lines))
  T.eq(rows[5].path, files[1].path, 'the row keeps the real path')
  for _, item in ipairs(diff.qf_items(d, '/w')) do
    T.ok(text.is_inert(item.text), item.text:sub(1, 60))
    T.ok(item.filename == nil or text.is_inert(item.filename), 'no raw unsafe character in a quickfix file name')
  end
  local prompt = diff.merge_prompt(d, '/w')
  T.ok(inert_lines(vim.split(prompt, '\n')), 'the confirmation is inert')
  T.ok(prompt:find('at commit bbbbbbbbbbbb', 1, true))
  T.ok(prompt:find(string.format('WARNING: %d files that make hosts run code', #hostile), 1, true), prompt:sub(1, 200))
end)

T.finish()
