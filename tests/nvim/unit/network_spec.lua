-- Unit tests of network requests (issue 29, items 3 and 4) against a fake
-- coordinator: pending/list with both kinds, the networkRequestPending
-- upsert and networkRequestResolved, the answering keys and the GrantScope
-- each sends, the minutes prompt's validation, a failed answer, the rules
-- window (rendering, rulesChanged, revoke), and hostile destinations that
-- must stay inert and out of the statusline, the winbar and vim.notify.
local dir = vim.fn.fnamemodify(arg[0], ':p:h')
local T = dofile(dir .. '/helper.lua')
local Fake = dofile(dir .. '/fake_coordinator.lua')
local config = require('lazaret.config')
local domains = require('lazaret.domains')
local approvals = require('lazaret.approvals')
local rules = require('lazaret.rules')
local text = require('lazaret.text')
local protocol = require('lazaret.protocol')
local arming = require('lazaret.arming')

config.set({ auto_start = false })
-- Wide enough for the window's key lines to stay one line each.
vim.o.columns = 160
-- A fake clock for the arming delay (DECISIONS D20): arm() lets it pass.
local clock = 0
approvals.now = function()
  return clock
end
local function arm()
  approvals.armed()
  clock = clock + arming.DELAY_MS
end
-- No `lazaret editor-info`: the socket root is set below.
domains.discover = function() end

local notes = {}
vim.notify = function(msg, level)
  table.insert(notes, { msg = msg, level = level })
end
--- The next vim.ui.input answer (nil: <Esc>) and select choice.
local input_answer, select_choice = nil, nil
local prompts = {}
vim.ui.input = function(opts, on_confirm)
  table.insert(prompts, { kind = 'input', prompt = opts.prompt })
  on_confirm(input_answer)
end
vim.ui.select = function(items, opts, on_choice)
  table.insert(prompts, { kind = 'select', prompt = opts.prompt, items = items })
  on_choice(select_choice)
end

local root = vim.fn.tempname()
vim.fn.mkdir(root .. '/abc123', 'p')
local path = root .. '/abc123/control.sock'

local function esc(id, at)
  return { kind = 'command', requestId = id, argv = { 'touch', id }, display = 'touch ' .. id, profile = 'default', receivedAtMs = at,
    reasons = {}, riskNotes = {}, cwd = '/w', expiresAtMs = 4102444800000 }
end
local pending = { esc('c1', 1), Fake.network_item('n1', 'grant.test', { receivedAtMs = 2 }) }
local answers = {}
--- What network/respond answers next (nil: success).
local respond_error = nil
local rules_state = {
  autoApprove = { { id = 'auto-0', entry = 'cargo check *', source = '[escalation] auto_approve' } },
  network = { Fake.grant('g1', 'kept.test', { scope = { type = 'minutes', minutes = 15 }, expiresAtMs = 0, hits = 3 }) },
}
local revoked = {}
local fake = Fake.new(path, {
  ['pending/list'] = function()
    return pending
  end,
  ['domain/status'] = function()
    return { apiVersion = require('lazaret.protocol').API_VERSION, domainHash = 'abc123', profile = 'default', workspace = '/w', containerState = 'running', sessions = {} }
  end,
  ['network/show'] = function()
    return { allow = {}, deny = {}, learned = {}, upstreams = {}, rules = 0, privateAnswers = 'refuse', holdMs = 1000 }
  end,
  ['network/respond'] = function(params)
    table.insert(answers, params)
    if respond_error then
      return nil, respond_error
    end
    return true
  end,
  ['rules/list'] = function()
    return rules_state
  end,
  ['rules/revoke'] = function(params)
    table.insert(revoked, params)
    local kept = {}
    for _, grant in ipairs(rules_state.network) do
      if grant.id ~= params.id then
        kept[#kept + 1] = grant
      end
    end
    if #kept == #rules_state.network then
      return nil, { code = protocol.error_code.RULE_NOT_FOUND, message = 'no rule or grant' }
    end
    rules_state.network = kept
    return true
  end,
})
domains.info = { socketRoot = root, apiVersion = require('lazaret.protocol').API_VERSION }

local function window_lines()
  return vim.api.nvim_buf_get_lines(approvals.buf, 0, -1, false)
end
local function window_text()
  return table.concat(window_lines(), '\n')
end
local function cursor_to(win, buf, needle)
  for row, line in ipairs(vim.api.nvim_buf_get_lines(buf, 0, -1, false)) do
    if line:find(needle, 1, true) then
      vim.api.nvim_win_set_cursor(win, { row, 0 })
      return row
    end
  end
  error('not shown: ' .. needle)
end
--- Types `keys` (as typed keys: the pending window's guard sees them).
local function press(keys)
  vim.api.nvim_feedkeys(vim.api.nvim_replace_termcodes(keys, true, false, true), 'mtx', false)
end

T.test('pending/list lists both kinds; the window shows destination, record types and repeats; the count includes it', function()
  domains.tick()
  T.wait(function()
    return domains.queue:count() == 2 and domains.domains[path] and domains.domains[path].status ~= nil
  end, 3000, 'listed')
  T.eq(#fake:calls('pending/list'), 1)
  T.eq(#fake:calls('escalation/list'), 0, 'pending/list answered: no escalation/list')
  T.eq(domains.queue:count('network'), 1)
  T.eq(require('lazaret').statusline(), '⛨ 2 pending')
  T.eq(vim.tbl_map(function(r)
    return r.destination
  end, require('lazaret').network_requests()), { 'grant.test' })
  T.eq(#require('lazaret').pending(), 1, 'pending() keeps to escalations')
  approvals.open()
  local t = window_text()
  T.ok(t:find('Lazaret: 1 pending escalation and 1 network request', 1, true), t)
  T.ok(t:find('[2] network  grant.test', 1, true), t)
  T.ok(t:find('    records  A AAAA', 1, true), t)
  T.ok(t:find('    asked    1 time (0 repeats while waiting)', 1, true), t)
  T.ok(t:find('network: a allow (this session)  t allow for minutes  p allow (profile)  d deny (this session)  D deny (profile)', 1, true), t)
  local note = notes[#notes].msg
  T.ok(note:find('network destination', 1, true) and not note:find('grant.test', 1, true), 'the notification names no destination: ' .. note)
end)

T.test('networkRequestPending again with the same id updates it in place (repeats); networkRequestResolved removes it', function()
  local before = #notes
  fake:event({ seq = 1, kind = 'networkRequestPending', request = Fake.network_request('n2', 'second.test', { receivedAtMs = 3 }) })
  T.wait(function()
    return domains.queue:count('network') == 2
  end, 2000, 'n2 queued')
  T.eq(#notes, before + 1, 'announced once')
  fake:event({ seq = 2, kind = 'networkRequestPending', request = Fake.network_request('n2', 'second.test', { receivedAtMs = 3, repeats = 4 }) })
  T.wait(function()
    return window_text():find('asked    5 times (4 repeats while waiting)', 1, true) ~= nil
  end, 2000, 'the repeat count shown')
  T.eq(domains.queue:count('network'), 2, 'an upsert, not a second request')
  T.eq(#notes, before + 1, 'a repeat is not announced again')
  -- A network request's id never resolves an escalation of the same id, nor the other way.
  fake:event({ seq = 3, kind = 'escalationResolved', requestId = 'n2', outcome = 'approved', decidedBy = 'rpc:cli' })
  vim.wait(100)
  T.eq(domains.queue:count('network'), 2)
  fake:event({ seq = 4, kind = 'networkRequestResolved', requestId = 'n2', outcome = 'networkGranted', decidedBy = 'rpc:cli',
    scope = { type = 'session' } })
  T.wait(function()
    return domains.queue:count('network') == 1 and not window_text():find('second.test', 1, true)
  end, 2000, 'n2 gone')
  -- Resolved stays resolved: a late event with its id does not bring it back.
  fake:event({ seq = 5, kind = 'networkRequestPending', request = Fake.network_request('n2', 'second.test') })
  vim.wait(100)
  T.eq(domains.queue:count('network'), 1)
end)

T.test('network_answer: each key action is its decision and GrantScope', function()
  T.eq({ approvals.network_answer('allow_session') }, { 'allow', { type = 'session' } })
  T.eq({ approvals.network_answer('allow_minutes', 15) }, { 'allow', { type = 'minutes', minutes = 15 } })
  T.eq({ approvals.network_answer('allow_profile') }, { 'allow', { type = 'profile' } })
  T.eq({ approvals.network_answer('deny_session') }, { 'deny', { type = 'session' } })
  T.eq({ approvals.network_answer('deny_profile') }, { 'deny', { type = 'profile' } })
  T.eq({ approvals.network_answer('allow_minutes', 0) }, {}, 'no timed answer outside 1..1440')
  T.eq({ approvals.network_answer('allow_minutes', 1441) }, {})
  T.eq({ approvals.network_answer('allow_minutes', 2.5) }, {})
end)

T.test('the minutes prompt takes a whole number from 1 to 1440 only', function()
  for _, ok in ipairs({ { '1', 1 }, { ' 15 ', 15 }, { '1440', 1440 }, { '0060', 60 } }) do
    T.eq(approvals.parse_minutes(ok[1]), ok[2], ok[1])
  end
  for _, bad in ipairs({ '0', '1441', '-5', '1.5', '', 'ten', '15m', '1e3', '0x10', '99999999999999999999' }) do
    local minutes, err = approvals.parse_minutes(bad)
    T.eq(minutes, nil, bad)
    T.ok(err and err:find('1 to 1440', 1, true), bad)
  end
end)

--- Puts a fresh network request `id` in the queue (pending/list answers it
--- too) and the cursor on it; returns its key.
local function fresh_request(id)
  pending = { Fake.network_item(id, id .. '.test', { receivedAtMs = 10 }) }
  domains.resync(domains.domains[path])
  T.wait(function()
    return window_text():find('network  ' .. id .. '.test', 1, true) ~= nil
  end, 2000, id .. ' shown')
  vim.api.nvim_set_current_win(approvals.win)
  cursor_to(approvals.win, approvals.buf, 'network  ' .. id .. '.test')
  return require('lazaret.queue').key(path, id, 'network')
end

local function answered_with(id)
  T.wait(function()
    return answers[#answers] and answers[#answers].requestId == id
  end, 2000, id .. ' answered')
  local a = answers[#answers]
  return { decision = a.decision, scope = a.scope, client = a.client }
end

T.test('the keys answer the network request under the cursor with its scope, as client neovim', function()
  local cases = {
    { 'a', nil, { decision = 'allow', scope = { type = 'session' }, client = 'neovim' } },
    { 't', '15', { decision = 'allow', scope = { type = 'minutes', minutes = 15 }, client = 'neovim' } },
    { 'p', nil, { decision = 'allow', scope = { type = 'profile' }, client = 'neovim' } },
    { 'd', nil, { decision = 'deny', scope = { type = 'session' }, client = 'neovim' } },
    { 'D', nil, { decision = 'deny', scope = { type = 'profile' }, client = 'neovim' } },
  }
  for i, case in ipairs(cases) do
    local id = 'k' .. i
    local key = fresh_request(id)
    arm()
    input_answer = case[2]
    local count = #answers
    press(case[1])
    if case[3].decision == 'allow' then
      -- An allow is selected, named, and sent by <CR> only.
      vim.wait(50)
      T.eq(#answers, count, 'key ' .. case[1] .. ' only selects')
      T.ok(window_text():find('CONFIRM with <CR>', 1, true) and window_text():find('\n  allow ' .. id .. '.test\n  for ', 1, true), window_text())
      press('<CR>')
    end
    T.eq(answered_with(id), case[3], 'key ' .. case[1])
    T.wait(function()
      return domains.queue:get(key) == nil
    end, 2000, 'answered: gone from the queue')
  end
  local asked = vim.tbl_filter(function(p)
    return p.kind == 'input'
  end, prompts)
  T.ok(#asked == 1 and asked[1].prompt:find('1-1440', 1, true), vim.inspect(asked))
end)

T.test('a bad number of minutes answers nothing and says so; <Esc> answers nothing', function()
  local key = fresh_request('m1')
  local count = #answers
  input_answer = '2000'
  arm()
  press('t')
  vim.wait(200)
  T.eq(#answers, count, 'nothing sent')
  T.ok(domains.queue:get(key) ~= nil, 'still pending')
  T.ok(notes[#notes].msg:find('2000 is not a whole number of minutes from 1 to 1440', 1, true), notes[#notes].msg)
  input_answer = nil
  press('t')
  vim.wait(200)
  T.eq(#answers, count)
  -- On an escalation the network-only keys answer nothing.
  pending = { esc('c9', 1) }
  domains.resync(domains.domains[path])
  T.wait(function()
    return window_text():find('[1] touch c9', 1, true) ~= nil
  end, 2000, 'c9 shown')
  cursor_to(approvals.win, approvals.buf, '[1] touch c9')
  arm()
  press('p')
  vim.wait(200)
  T.eq(#answers, count, 'p on a host command answers nothing')
  T.ok(notes[#notes].msg:find('answers network requests', 1, true), notes[#notes].msg)
end)

T.test('a failed answer keeps the request and says why; "not pending" removes it', function()
  local key = fresh_request('f1')
  respond_error = { code = protocol.error_code.NETWORK_FAILED, message = 'the sidecar refused' }
  arm()
  press('a')
  press('<CR>')
  answered_with('f1')
  T.wait(function()
    return notes[#notes].msg:find('the sidecar refused', 1, true) ~= nil
  end, 2000, 'said why')
  T.ok(notes[#notes].msg:find('stays pending', 1, true), notes[#notes].msg)
  T.ok(domains.queue:get(key) ~= nil, 'kept')
  T.ok(window_text():find('network  f1.test', 1, true), 'still shown')
  respond_error = { code = protocol.error_code.NETWORK_REQUEST_NOT_PENDING, message = 'not pending' }
  arm()
  press('a')
  press('<CR>')
  T.wait(function()
    return domains.queue:get(key) == nil
  end, 2000, 'gone once the coordinator says it is not pending')
  T.ok(notes[#notes].msg:find('already answered elsewhere', 1, true), notes[#notes].msg)
  respond_error = nil
  approvals.close()
end)

T.test('the rules window: auto-approve entries and grants (verdict, destination, scope, time left, hits, who)', function()
  local now = 1000000
  local sections = { {
    name = 'default @ /w (abc123)',
    domain = path,
    rules = {
      autoApprove = { { id = 'auto-0', entry = 'cargo check *', source = '[escalation] auto_approve' } },
      network = {
        Fake.grant('g1', 'timed.test', { scope = { type = 'minutes', minutes = 15 }, expiresAtMs = now + 14 * 60000 + 5000, hits = 2 }),
        Fake.grant('g2', 'refused.test', { verdict = 'deny', scope = { type = 'profile' }, decidedBy = 'rpc:cli', hits = 1 }),
      },
    },
  } }
  local lines, _, rows = rules.render_lines(sections, { now = now, width = 120 })
  local t = table.concat(lines, '\n')
  T.ok(t:find('x revoke the rule under the cursor  R refresh  q close', 1, true), t)
  T.ok(t:find('  auto-approve (1)\n    cargo check *   from [escalation] auto_approve', 1, true), t)
  T.ok(t:find('    allow  timed.test\n           for 15 min, 14 min 5 s left; 2 hits; by rpc:neovim', 1, true), t)
  T.ok(t:find('    deny   refused.test\n           for the profile; 1 hit; by rpc:cli', 1, true), t)
  local ids = {}
  for row, r in pairs(rows) do
    ids[#ids + 1] = r.id .. '@' .. row
  end
  table.sort(ids)
  T.eq(#ids, 5, 'one row per auto-approve entry, two per grant: ' .. table.concat(ids, ' '))
  T.eq(rules.render_lines({ { name = 'x', domain = path, error = 'boom (code 1)' } })[5], '  ! rules/list failed: boom (code 1)')
end)

T.test(':LazaretRules lists, refreshes on rulesChanged, and x revokes the rule under the cursor after a confirmation', function()
  vim.cmd('runtime plugin/lazaret.lua')
  T.ok(vim.fn.exists(':LazaretRules') == 2, 'the command exists')
  vim.cmd('LazaretRules')
  T.wait(function()
    return rules.is_open() and table.concat(vim.api.nvim_buf_get_lines(rules.buf, 0, -1, false), '\n'):find('kept.test', 1, true) ~= nil
  end, 2000, 'the grant shown')
  local lists = #fake:calls('rules/list')
  table.insert(rules_state.network, Fake.grant('g9', 'late.test'))
  fake:event({ seq = 100, kind = 'rulesChanged' })
  T.wait(function()
    return table.concat(vim.api.nvim_buf_get_lines(rules.buf, 0, -1, false), '\n'):find('late.test', 1, true) ~= nil
  end, 3000, 'fetched again on rulesChanged')
  T.ok(#fake:calls('rules/list') > lists)
  -- Cancel: nothing revoked.
  cursor_to(rules.win, rules.buf, 'kept.test')
  select_choice = 'Cancel'
  press('x')
  vim.wait(100)
  T.eq(#revoked, 0, 'cancelled')
  T.ok(prompts[#prompts].prompt:find('Revoke the network grant of kept.test', 1, true), prompts[#prompts].prompt)
  select_choice = 'Revoke it'
  press('x')
  T.wait(function()
    return #revoked == 1
  end, 2000, 'revoked')
  T.eq(revoked[1], { id = 'g1', client = 'neovim' })
  T.wait(function()
    return not table.concat(vim.api.nvim_buf_get_lines(rules.buf, 0, -1, false), '\n'):find('kept.test', 1, true)
  end, 2000, 'gone from the window')
  -- On a header line: nothing.
  vim.api.nvim_win_set_cursor(rules.win, { 1, 0 })
  press('x')
  vim.wait(100)
  T.eq(#revoked, 1)
  T.ok(notes[#notes].msg:find('no rule under the cursor', 1, true), notes[#notes].msg)
  rules.close()
end)

local corpus = vim.json.decode(table.concat(vim.fn.readfile(vim.fn.fnamemodify(arg[0], ':p:h:h:h:h') .. '/tests/hostile/strings.json'), '\n'))
local hostile = {}
for _, entry in ipairs(corpus.entries) do
  hostile[#hostile + 1] = (entry.text:rep(entry['repeat'] or 1):gsub('@MARKER@', '/tmp/unit-marker'))
end

T.test('hostile destinations: inert in the windows, never in the statusline, the winbar, a title or vim.notify', function()
  T.ok(#hostile > 10, 'the corpus')
  local statusline_entry
  for _, s in ipairs(hostile) do
    if s:find('%', 1, true) then
      statusline_entry = statusline_entry or s
    end
  end
  T.ok(statusline_entry, 'the corpus has a statusline-syntax entry')
  local items = {}
  for i, s in ipairs(hostile) do
    items[#items + 1] = Fake.network_item('h' .. i, s, { receivedAtMs = 100 + i, recordTypes = { s }, sessionIds = { s } })
  end
  local before = #notes
  pending = items
  domains.resync(domains.domains[path])
  T.wait(function()
    return domains.queue:count('network') == #items
  end, 3000, 'all listed')
  approvals.open()
  local lines = window_lines()
  local in_requests = false
  for i, line in ipairs(lines) do
    T.ok(text.is_inert(line), 'inert line ' .. i .. ': ' .. line:sub(1, 80))
    in_requests = in_requests or line == ''
    if in_requests then
      -- The requests' lines (agent text) are cut to the window (the help lines above are the plugin's).
      T.ok(vim.fn.strdisplaywidth(line) <= math.max(20, vim.o.columns - 4), 'cut to the window: ' .. line:sub(1, 80))
    end
  end
  T.ok(window_text():find('network  ' .. text.inert(hostile[1]):sub(1, 20), 1, true), 'the destination is shown, inert')
  for _, item in ipairs(domains.queue:list()) do
    for _, line in ipairs(approvals.full_lines(item)) do
      T.ok(text.is_inert(line), 'the full view is inert')
    end
  end
  -- The statusline component: only the count.
  T.eq(require('lazaret').statusline(), string.format('⛨ %d pending', #items))
  local evaluated = vim.api.nvim_eval_statusline(require('lazaret').statusline(), {}).str
  T.eq(evaluated, string.format('⛨ %d pending', #items))
  -- The window's own winbar/statusline/title hold no agent text.
  T.eq(vim.wo[approvals.win].winbar, '')
  T.eq(vim.wo[approvals.win].statusline, '')
  local title = vim.api.nvim_win_get_config(approvals.win).title
  T.eq(type(title) == 'table' and title[1][1] or title, ' Lazaret ')
  -- vim.notify: the announcements name no destination.
  T.ok(#notes > before, 'announced')
  for n = before + 1, #notes do
    for _, s in ipairs(hostile) do
      if #s >= 4 then
        T.ok(not notes[n].msg:find(s, 1, true) and not notes[n].msg:find(text.inert(s), 1, true), 'no destination in: ' .. notes[n].msg:sub(1, 80))
      end
    end
  end
  approvals.close()
  -- The rules window with hostile grants: inert, title fixed.
  local grants = {}
  for i, s in ipairs(hostile) do
    grants[#grants + 1] = Fake.grant('hg' .. i, s, { decidedBy = s, scope = { type = s } })
  end
  rules_state = { autoApprove = { { id = 'a', entry = hostile[1], source = hostile[2] } }, network = grants }
  rules.open()
  T.wait(function()
    return #vim.api.nvim_buf_get_lines(rules.buf, 0, -1, false) > #grants * 2
  end, 2000, 'hostile grants listed')
  for i, line in ipairs(vim.api.nvim_buf_get_lines(rules.buf, 0, -1, false)) do
    T.ok(text.is_inert(line), 'inert rules line ' .. i .. ': ' .. line:sub(1, 80))
  end
  T.eq(vim.wo[rules.win].winbar, '')
  T.eq(vim.fn.filereadable('/tmp/unit-marker'), 0, 'no statusline expression ran')
  rules.close()
end)

fake:close()
T.finish()
