-- Unit tests of deliberate answers in the pending window (DECISIONS D20)
-- and of what an answer opens (D19), against a fake coordinator, with the
-- real key guard (vim.on_key) and a fake clock for the arming delay: keys
-- typed into a window that opened by itself are discarded, counted and
-- said; an approval, an edit and every allow are a selection the window
-- names and <CR> confirms; another request moving under the cursor disarms;
-- an address request shows its protocol and port and offers every port as
-- its own, named answer; a long name shows its end everywhere.
local dir = vim.fn.fnamemodify(arg[0], ':p:h')
local T = dofile(dir .. '/helper.lua')
local Fake = dofile(dir .. '/fake_coordinator.lua')
local config = require('lazaret.config')
local domains = require('lazaret.domains')
local approvals = require('lazaret.approvals')
local arming = require('lazaret.arming')
local rules = require('lazaret.rules')
local status = require('lazaret.status')
local net = require('lazaret.net')
local text = require('lazaret.text')

config.set({ auto_start = false, auto_open = true })
vim.o.columns = 160
domains.discover = function() end

local clock = 0
approvals.now = function()
  return clock
end
local function arm()
  approvals.armed()
  clock = clock + arming.DELAY_MS
end

local notes = {}
vim.notify = function(msg, level)
  table.insert(notes, { msg = msg, level = level })
end
local input_answer = nil
local prompts = {}
vim.ui.input = function(opts, on_confirm)
  table.insert(prompts, { kind = 'input', prompt = opts.prompt, default = opts.default })
  on_confirm(input_answer)
end
vim.ui.select = function(items, opts, on_choice)
  table.insert(prompts, { kind = 'select', prompt = opts.prompt, items = items })
  on_choice(items[#items]) -- Cancel
end

local corpus = vim.json.decode(table.concat(vim.fn.readfile(vim.fn.fnamemodify(arg[0], ':p:h:h:h:h') .. '/tests/hostile/strings.json'), '\n'))
local LONG, TAIL
for _, entry in ipairs(corpus.entries) do
  if entry.name == 'long-name-registrable-tail' then
    LONG, TAIL = entry.text, entry.tail
  end
end

local root = vim.fn.tempname()
vim.fn.mkdir(root .. '/abc123', 'p')
local path = root .. '/abc123/control.sock'

local function esc(id, argv, at)
  return { kind = 'command', requestId = id, argv = argv, display = table.concat(argv, ' '), profile = 'default', receivedAtMs = at,
    reasons = {}, riskNotes = {}, cwd = '/w', expiresAtMs = 4102444800000 }
end
local function address(id, destination, service, at)
  return Fake.network_item(id, destination, { service = service, recordTypes = { service }, receivedAtMs = at })
end

local pending = {}
local calls = {}
local policy = { allow = {}, deny = {}, learned = {}, upstreams = {}, rules = 0, privateAnswers = 'refuse', holdMs = 1000 }
local rules_state = { autoApprove = {}, network = {} }
local fake = Fake.new(path, {
  ['pending/list'] = function()
    return pending
  end,
  ['domain/status'] = function()
    return { apiVersion = require('lazaret.protocol').API_VERSION, domainHash = 'abc123', profile = 'default', workspace = '/w', containerState = 'running', sessions = {} }
  end,
  ['network/show'] = function()
    return policy
  end,
  ['escalation/respond'] = function(params)
    table.insert(calls, params)
    return true
  end,
  ['network/respond'] = function(params)
    table.insert(calls, params)
    return true
  end,
  ['rules/list'] = function()
    return rules_state
  end,
})
domains.info = { socketRoot = root, apiVersion = require('lazaret.protocol').API_VERSION }

local function window_lines()
  return approvals.is_open() and vim.api.nvim_buf_get_lines(approvals.buf, 0, -1, false) or {}
end
local function window_text()
  return table.concat(window_lines(), '\n')
end
local function cursor_to(needle)
  for row, line in ipairs(window_lines()) do
    if line:find(needle, 1, true) then
      vim.api.nvim_set_current_win(approvals.win)
      vim.api.nvim_win_set_cursor(approvals.win, { row, 0 })
      return row
    end
  end
  error('not shown: ' .. needle .. '\n' .. window_text())
end
--- The pending window's footer (its border, always in view).
local function footer()
  local f = vim.api.nvim_win_get_config(approvals.win).footer
  if type(f) == 'table' then
    return table.concat(vim.tbl_map(function(chunk)
      return chunk[1]
    end, f))
  end
  return f or ''
end
--- Types `keys` as one read (the guard sees them as typed keys).
local function press(keys)
  vim.api.nvim_feedkeys(vim.api.nvim_replace_termcodes(keys, true, false, true), 'mtx', false)
  vim.wait(20)
end
--- Types `sentence` a key at a time, `every` ms apart on the fake clock.
local function type_slowly(sentence, every)
  for i = 1, vim.fn.strchars(sentence) do
    press(vim.fn.strcharpart(sentence, i - 1, 1))
    clock = clock + every
  end
end
--- Lists `items` afresh (pending/list) and waits until the window shows `needle`.
local function listed(items, needle)
  pending = items
  domains.resync(domains.domains[path])
  T.wait(function()
    return window_text():find(needle, 1, true) ~= nil
  end, 3000, needle .. ' shown')
end

T.test('opened by itself, the window is disarmed: a sentence typed into it is discarded, counted and said', function()
  domains.tick()
  T.wait(function()
    return domains.domains[path] and domains.domains[path].listed
  end, 3000, 'connected and listed')
  T.ok(not approvals.is_open())
  fake:event({ seq = 1, kind = 'escalationPending', escalation = esc('c1', { 'touch', 'PWNED' }, 10) })
  T.wait(approvals.is_open, 3000, 'the window opened by itself')
  T.eq(vim.api.nvim_get_current_win(), approvals.win, 'it has the keyboard')
  T.ok(window_text():find('[1] touch PWNED', 1, true), window_text())
  T.eq(approvals.current_key() ~= nil, true, 'the cursor is on the request')
  -- Insert-mode and command-line keys too: `i`, `o`, `:` never leave normal mode.
  local sentence = 'ok: i will add a test, please run it again\r'
  type_slowly(sentence, 150)
  vim.wait(50)
  T.eq(calls, {}, 'nothing answered')
  T.eq(vim.api.nvim_get_mode().mode, 'n')
  T.eq(#prompts, 0, 'no prompt opened')
  T.eq(approvals.state.discarded, vim.fn.strchars(sentence), 'every key counted')
  T.eq(footer(), string.format(' DISARMED: keys are discarded until 1 s without a key (%d keys discarded) ', vim.fn.strchars(sentence)))
  T.ok(window_text():find(string.format('DISARMED: keys are discarded until 1 s without a key (%d keys discarded)\n',
    vim.fn.strchars(sentence)), 1, true), window_text())
  -- The last key restarted the delay.
  clock = clock - 150 + arming.DELAY_MS - 1
  T.eq(approvals.armed(), false)
  clock = clock + 1
  T.eq(approvals.armed(), true)
  approvals.render()
  T.ok(window_text():find('ARMED: keys answer the request under the cursor (' .. vim.fn.strchars(sentence) .. ' keys discarded)\n', 1, true),
    window_text())
end)

T.test('armed: a selects and names the command, <CR> approves once; a then another key answers nothing and disarms', function()
  cursor_to('[1] touch PWNED')
  arm()
  press('a')
  T.eq(calls, {}, 'a only selects')
  T.eq(footer(), ' <CR> confirms (see the top): run: touch PWNED ')
  local t = window_text()
  T.ok(t:find('CONFIRM with <CR> (any other key cancels and disarms):\n  approve: run on the host, in /w:\n    touch PWNED\n', 1, true), t)
  press('x')
  vim.wait(50)
  T.eq(calls, {}, 'cancelled')
  T.ok(not window_text():find('CONFIRM', 1, true) and window_text():find('DISARMED', 1, true), window_text())
  press('<CR>')
  press('a')
  vim.wait(50)
  T.eq(calls, {}, 'disarmed: <CR> and a are discarded')
  T.eq(approvals.state.selection, nil)
  arm()
  press('a')
  press('<CR>')
  T.wait(function()
    return #calls == 1
  end, 2000, 'approved')
  T.eq({ calls[1].requestId, calls[1].decision, calls[1].client }, { 'c1', 'approve', 'neovim' })
  vim.wait(100)
  T.eq(#calls, 1, 'once')
end)

T.test('a and <CR> read at once (a paste) approve nothing', function()
  listed({ esc('c2', { 'touch', 'pasted' }, 20) }, '[1] touch pasted')
  cursor_to('[1] touch pasted')
  arm()
  press('a<CR>')
  vim.wait(50)
  T.eq(#calls, 1, 'nothing sent')
  T.eq(approvals.state.selection, nil)
  T.eq(approvals.armed(), false, 'disarmed')
end)

T.test('edit: the edited command is named in the window and only <CR> runs it', function()
  cursor_to('[1] touch pasted')
  arm()
  input_answer = "touch 'edited marker' second"
  press('e')
  T.eq(prompts[#prompts].default, 'touch pasted', 'prefilled')
  T.ok(window_text():find('run on the host INSTEAD of the request, in /w:\n    touch \'edited marker\' second', 1, true), window_text())
  T.eq(#calls, 1, 'nothing sent yet')
  press('<CR>')
  T.wait(function()
    return #calls == 2
  end, 2000, 'edited')
  T.eq({ calls[2].requestId, calls[2].decision, calls[2].argv }, { 'c2', 'edit', { 'touch', 'edited marker', 'second' } })
end)

T.test('the request under the cursor withdrawn between a and <CR>: the next is shown disarmed and the keys answer nothing', function()
  listed({ esc('one', { 'touch', 'one' }, 30), esc('two', { 'touch', 'two' }, 31) }, '[2] touch two')
  cursor_to('[1] touch one')
  arm()
  press('a')
  T.ok(window_text():find('    touch one', 1, true), 'selected')
  fake:event({ seq = 2, kind = 'escalationResolved', requestId = 'one', outcome = 'withdrawn', decidedBy = 'coordinator' })
  T.wait(function()
    return not window_text():find('touch one', 1, true)
  end, 2000, 'withdrawn')
  T.ok(window_text():find('DISARMED', 1, true) and not window_text():find('CONFIRM', 1, true), window_text())
  local before = #calls
  press('<CR>')
  press('<Tab>')
  press('a')
  press('<CR>')
  vim.wait(50)
  T.eq(#calls, before, 'nothing answered')
  T.ok(window_text():find('[1] touch two', 1, true))
  -- Moving onto it is a change too: it waits the delay again.
  clock = clock + arming.DELAY_MS
  press('<Tab>')
  press('a')
  vim.wait(50)
  T.eq(approvals.state.selection, nil, 'the cursor moved onto another request: disarmed')
end)

T.test('focusing the open window from another window disarms it (it takes the keyboard again)', function()
  arm()
  T.ok(approvals.armed())
  vim.cmd('new')
  local split = vim.api.nvim_get_current_win()
  T.ok(split ~= approvals.win)
  approvals.open()
  T.eq(vim.api.nvim_get_current_win(), approvals.win)
  T.eq(approvals.armed(), false)
  vim.api.nvim_win_close(split, true)
end)

T.test('an address request shows its protocol and port; w makes the allow keys open every port, named as such', function()
  approvals.open()
  listed({ address('n1', '10.9.0.7/32', 'tcp/8081', 40) }, '[1] network  10.9.0.7/32 tcp/8081')
  local t = window_text()
  T.ok(t:find('    opens    tcp/8081 only (w: every protocol and port of the address)', 1, true), t)
  T.ok(t:find('an address: w switches the allow keys to every protocol and port of it', 1, true), t)
  local full = table.concat(approvals.full_lines(domains.queue:list()[1]), '\n')
  T.ok(full:find('service      tcp/8081 (an allow opens only this', 1, true), full)
  cursor_to('[1] network  10.9.0.7/32')
  arm()
  press('a')
  T.ok(window_text():find('\n  allow 10.9.0.7/32 tcp/8081 only\n  for this session (until the sandbox stops)\n', 1, true), window_text())
  press('<Esc>')
  arm()
  press('w')
  t = window_text()
  T.ok(t:find('    opens    EVERY protocol and port of 10.9.0.7/32\n             (wider than the request: tcp/8081; w: only tcp/8081)\n', 1, true), t)
  T.ok(approvals.armed(), 'w does not disarm')
  press('p')
  T.eq(footer(), ' <CR> confirms (see the top): allow EVERY protocol and port of 10.9.0.7/32, for the profile (kept until revoked) ')
  T.ok(window_text():find('\n  allow EVERY protocol and port of 10.9.0.7/32\n        (wider than the request: tcp/8081)\n  for the profile (kept until revoked)\n',
    1, true), window_text())
  local before = #calls
  press('<CR>')
  T.wait(function()
    return #calls == before + 1
  end, 2000, 'answered')
  T.eq({ calls[#calls].requestId, calls[#calls].decision, calls[#calls].scope }, { 'n1', 'allowEveryPort', { type = 'profile' } })
end)

T.test('the plain allow of an address opens its one service; w on a name answers nothing and says why', function()
  listed({ address('n2', '10.9.0.8/32', 'udp/53', 50), Fake.network_item('n3', 'grant.test', { receivedAtMs = 51 }) }, 'grant.test')
  cursor_to('[1] network  10.9.0.8/32 udp/53')
  arm()
  press('a')
  press('<CR>')
  T.wait(function()
    return calls[#calls].requestId == 'n2'
  end, 2000, 'answered')
  T.eq({ calls[#calls].decision, calls[#calls].scope }, { 'allow', { type = 'session' } })
  T.wait(function()
    return not window_text():find('10.9.0.8', 1, true)
  end, 2000, 'gone')
  cursor_to('network  grant.test')
  arm()
  local discarded = approvals.state.discarded
  press('w')
  T.ok(notes[#notes].msg:find('a name has no ports', 1, true), notes[#notes].msg)
  T.eq(approvals.state.discarded, discarded + 1, 'counted as discarded')
  T.eq(approvals.state.every_port, false)
end)

T.test('a long name shows its end in the window, the selection, the rules window and prompt, the status window and :LazaretNet', function()
  listed({ Fake.network_item('long', LONG, { receivedAtMs = 60 }) }, TAIL)
  local width = vim.api.nvim_win_get_width(approvals.win)
  local header = window_lines()[cursor_to(TAIL)]
  T.ok(vim.startswith(header, '[1] network  api.anthropic.com.') and vim.endswith(header, '.' .. TAIL), header)
  T.ok(header:find('characters cut)…', 1, true) and vim.fn.strdisplaywidth(header) <= width, header)
  for _, line in ipairs(window_lines()) do
    T.ok(text.is_inert(line), line)
  end
  T.ok(window_text():find('(cut)    <CR> opens the whole request', 1, true))
  T.ok(table.concat(approvals.full_lines(domains.queue:list()[1]), '\n'):find('destination  ' .. LONG, 1, true), 'the whole request: uncut')
  arm()
  press('a')
  local selection = vim.tbl_filter(function(line)
    return vim.startswith(line, '  allow api.')
  end, window_lines())[1]
  T.ok(selection and vim.endswith(selection, '.' .. TAIL) and selection:find('characters cut)…', 1, true), window_text())
  press('<Esc>')
  -- A grant of it: the rules window and the revoke confirmation.
  rules_state = { autoApprove = {}, network = {
    Fake.grant('g-long', LONG),
    Fake.grant('g-port', '10.9.0.7/32', { service = 'tcp/8081' }),
    Fake.grant('g-every', '10.9.0.9/32', { everyPort = true, scope = { type = 'profile' } }),
  } }
  rules.open()
  T.wait(function()
    return rules.is_open() and table.concat(vim.api.nvim_buf_get_lines(rules.buf, 0, -1, false), '\n'):find('every protocol', 1, true) ~= nil
  end, 2000, 'grants listed')
  local listing = vim.api.nvim_buf_get_lines(rules.buf, 0, -1, false)
  local rt = table.concat(listing, '\n')
  T.ok(rt:find('    allow  10.9.0.7/32 tcp/8081\n', 1, true), rt)
  T.ok(rt:find('    allow  10.9.0.9/32 every protocol and port\n           for the profile', 1, true), rt)
  local long_row
  for row, line in ipairs(listing) do
    if line:find('allow  api.', 1, true) then
      long_row = row
      T.ok(vim.endswith(line, '.' .. TAIL) and line:find('characters cut)…', 1, true), line)
    end
  end
  T.ok(long_row, rt)
  vim.api.nvim_win_set_cursor(rules.win, { long_row, 0 })
  press('x')
  T.ok(prompts[#prompts].prompt:find('.' .. TAIL .. ' (this session)?', 1, true), prompts[#prompts].prompt)
  rules.close()
  -- The policy: the status window's network line and :LazaretNet show.
  policy = { allow = { 'grant.test', LONG }, deny = {}, upstreams = {}, rules = 0, privateAnswers = 'refuse', holdMs = 1000,
    learned = { { address = '10.9.0.10', names = { LONG }, expiresInSeconds = 30 } } }
  fake:event({ seq = 3, kind = 'networkChanged' })
  T.wait(function()
    return domains.domains[path].policy == policy or vim.deep_equal(domains.domains[path].policy, policy)
  end, 2000, 'policy fetched')
  local network_line = vim.tbl_filter(function(line)
    return vim.startswith(line, '    network    ')
  end, status.lines())[1]
  T.ok(network_line:find('allow grant.test api.anthropi', 1, true) and network_line:find('.' .. TAIL .. ';', 1, true), network_line)
  local shown = net.policy_lines(policy)
  T.ok(shown[1]:find('.' .. TAIL, 1, true) and vim.startswith(shown[1], 'allow    grant.test api.'), shown[1])
  T.ok(shown[3]:find('.' .. TAIL .. '), 30 s left', 1, true), shown[3])
  for _, line in ipairs(shown) do
    T.ok(vim.fn.strdisplaywidth(line) <= 100, line)
  end
  -- The statusline has no name at all; vim.notify never named it.
  T.eq(require('lazaret').statusline(), '⛨ 1 pending')
  for _, note in ipairs(notes) do
    T.ok(not note.msg:find('typeahead', 1, true), note.msg)
  end
end)

approvals.close()
fake:close()
T.finish()
