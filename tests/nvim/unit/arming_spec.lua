-- Unit tests of lazaret.arming (deliberate answers, DECISIONS D20) with a
-- fake clock: a sentence typed while a request appears answers nothing, each
-- discarded key restarts the delay, an approving answer is a selection that
-- only <CR> confirms, another request moving into place disarms and drops
-- the selection. The cases follow the terminal prompt's (crates/lazaret
-- src/prompt/state.rs), so both clients keep the same rules.
local T = dofile(vim.fn.fnamemodify(arg[0], ':p:h') .. '/helper.lua')
local arming = require('lazaret.arming')

local DELAY = arming.DELAY_MS

--- The window's keys as the pending window classifies them (default keys).
local WINDOW = { a = true, d = true, e = true, t = true, p = true, D = true, w = true, q = true, j = true, k = true }
local SELECTS = { a = 'approve', e = 'edit', t = 'network', p = 'network' }

local function kind(c)
  if c == '\r' then
    return 'confirm'
  end
  return WINDOW[c] and 'window' or 'other'
end

--- Types `sentence` one key every `every` ms from `from` on a window
--- showing request `shown`, the way the pending window does: a key its
--- state passes acts (a selecting key selects, `d` denies); returns what was
--- sent.
local function typed(state, shown, sentence, from, every)
  local sent = {}
  for i = 1, #sentence do
    local c, now = sentence:sub(i, i), from + (i - 1) * every
    state:show(shown, now)
    local verdict, selection = state:key(kind(c), now)
    if verdict == 'confirm' then
      sent[#sent + 1] = selection.kind
    elseif verdict == 'pass' and SELECTS[c] then
      state:select({ key = shown, kind = SELECTS[c] }, now)
    elseif verdict == 'pass' and (c == 'd' or c == 'D') then
      sent[#sent + 1] = 'deny'
    end
  end
  return sent
end

T.test('a window starts disarmed and arms after the delay without a key', function()
  local state = arming.new(0)
  state:show('r', 0)
  T.eq(state:armed(DELAY - 1), false)
  T.eq(state:arms_in(400), DELAY - 400)
  T.eq(state:armed(DELAY), true)
  T.eq(state:arms_in(DELAY + 5), 0)
end)

T.test('keys while the request appears are discarded, counted, and each restarts the delay', function()
  local state = arming.new(0)
  local sentence = 'ok run it again\r'
  T.eq(typed(state, 'r', sentence, 0, 150), {})
  T.eq(state.discarded, #sentence, 'every key is discarded and counted')
  local last = (#sentence - 1) * 150
  T.eq(state:armed(last + DELAY - 1), false, 'the last key restarted the delay')
  T.eq(state:armed(last + DELAY), true)
  -- At any speed: a key every 900 ms keeps it disarmed too.
  T.eq(typed(state, 'r', 'please add a test\r', last + DELAY - 100, 900), {})
  T.eq(state.discarded, #sentence + #'please add a test\r')
end)

T.test('typing on an armed window never approves: its first key may select, the next cancels', function()
  for _, sentence in ipairs({ 'ok run it again\r', 'all good\r', 'ee\r\r', 'edit it\r\r', 'please add a test\r', 'make a formula\r',
    'amend\r', 'ta\r', 'pp\r' }) do
    local state = arming.new(0)
    local sent = typed(state, 'r', sentence, 2000, 150)
    for _, what in ipairs(sent) do
      T.ok(what == 'deny', string.format('%q sent only denials: %s', sentence, vim.inspect(sent)))
    end
    T.eq(state.selection, nil, sentence)
  end
end)

T.test('armed: a selecting key and <CR> confirm once; any other key cancels, is counted and disarms', function()
  local state = arming.new(0)
  state:show('r', 0)
  T.eq(state:key('window', 1000), 'pass')
  T.ok(state:select({ key = 'r', kind = 'approve' }, 1000))
  local verdict, selection = state:key('confirm', 1150)
  T.eq({ verdict, selection and selection.kind }, { 'confirm', 'approve' })
  T.eq(state.selection, nil, 'confirmed once')
  T.eq(state:armed(1150), false, 'the next answer waits for the delay again')
  -- Cancelled by another key.
  T.ok(state:select({ key = 'r', kind = 'approve' }, 2200) == true)
  T.eq(state:key('other', 2300), 'discard')
  T.eq(state.selection, nil)
  T.eq(state.discarded, 1)
  T.eq(state:key('confirm', 2400), 'discard', '<CR> after a cancel: disarmed, nothing')
  T.eq(state:armed(3399), false)
  -- A window key also cancels a selection (d, q, Tab...).
  T.ok(state:select({ key = 'r', kind = 'approve' }, 3400))
  T.eq(state:key('window', 3500), 'discard')
  T.eq(state.selection, nil)
end)

T.test('armed with nothing selected: the window keys pass, any other key is discarded and disarms; <CR> passes (the whole request)', function()
  local state = arming.new(0)
  state:show('r', 0)
  T.eq(state:key('window', 1000), 'pass')
  T.eq(state:key('confirm', 1100), 'pass', 'nothing selected: <CR> opens the whole request')
  T.eq(state:key('other', 1200), 'discard')
  T.eq(state:armed(2199), false)
  T.eq(state:key('window', 2200), 'pass')
  T.eq(state.discarded, 1)
end)

T.test('a selection is refused disarmed, or for a request that is not the one shown', function()
  local state = arming.new(0)
  state:show('r', 0)
  T.eq(state:select({ key = 'r', kind = 'approve' }, 500), false, 'disarmed')
  T.eq(state:select({ key = 'other', kind = 'approve' }, 1500), false, 'not the request shown')
  T.eq(state:select({ key = nil, kind = 'approve' }, 1500), false)
  state:show(nil, 1500)
  T.eq(state:select({ key = 'r', kind = 'approve' }, 3000), false, 'nothing shown')
end)

T.test('another request moving into place (or the cursor moving) disarms and drops the selection', function()
  local state = arming.new(0)
  state:show('one', 0)
  T.ok(state:select({ key = 'one', kind = 'approve' }, 2000))
  -- The first is withdrawn just before the <CR> lands: the next is shown.
  T.eq(state:show('two', 2100), true)
  T.eq(state.selection, nil, 'the selection was for another request')
  T.eq(state:key('confirm', 2150), 'discard')
  T.eq(state:key('window', 2300), 'discard')
  T.eq(state:key('confirm', 2450), 'discard')
  T.eq(state.discarded, 3)
  T.eq(state:show('two', 3000), false, 'the same request: no change')
  T.eq(state:armed(3450), true)
end)

T.test('a selection with its <CR> already waiting (one read) is not confirmed', function()
  local state = arming.new(0)
  state:show('r', 0)
  T.ok(state:select({ key = 'r', kind = 'approve' }, 1500, true))
  T.eq(state:key('confirm', 1500), 'discard')
  T.eq(state.selection, nil)
  T.eq(state:armed(2000), false, 'cancelled and disarmed')
end)

T.test('every port: switched only armed, forgotten when the request shown changes', function()
  local state = arming.new(0)
  state:show('addr', 0)
  T.eq(state:toggle_every_port(500), false, 'disarmed')
  T.eq(state.every_port, false)
  T.ok(state:toggle_every_port(1000))
  T.eq(state.every_port, true)
  T.ok(state:toggle_every_port(1100))
  T.eq(state.every_port, false, 'the key switches back')
  state:toggle_every_port(1200)
  state:show('other', 1300)
  T.eq(state.every_port, false, 'another request: only the port it asked for')
end)

T.test('a key Neovim made (not typed) is taken when disarmed but not counted', function()
  local state = arming.new(0)
  state:show('r', 0)
  T.eq(state:key('other', 100, false), 'discard')
  T.eq(state.discarded, 0)
  T.eq(state:armed(1099), false, 'it still restarts the delay')
end)

T.finish()
