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
    { domain = '/s', escalation = { requestId = 'id2', argv = { 'ls' }, cwd = '/w', reasons = {}, riskNotes = {} } },
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
  T.eq(ids[5], 'id1')
end)

T.test('an empty queue says so', function()
  local lines = approvals.render_lines({})
  T.eq(lines[1], 'Lazaret: no pending escalations')
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

T.test('the merge confirmation repeats the warnings', function()
  local prompt = diff.merge_prompt(branch_diff, '/w')
  T.ok(prompt:find('Merge lazaret/agent-default (dac0393, 2 files) into /w?', 1, true), prompt)
  T.ok(prompt:find('WARNING: 2 files that make hosts run code', 1, true), prompt)
  T.ok(prompt:find('! .envrc: direnv runs this file', 1, true), prompt)
  T.ok(prompt:find('1 uncommitted', 1, true), prompt)
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
  })
  T.eq(lines, {
    'allow    10.0.0.0/8 *.npm.test',
    'deny     (nothing)',
    'learned  10.1.2.3 (r.npm.test), 30 s left',
    'dns      10.0.0.53:53',
    'rules    9 kernel rules in the sidecar',
  })
end)

T.finish()
