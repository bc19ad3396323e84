-- Unit tests of lazaret.events: event sequencing and lag handling.
local T = dofile(vim.fn.fnamemodify(arg[0], ':p:h') .. '/helper.lua')
local Sequencer = require('lazaret.events')

local function ev(seq, kind, extra)
  return vim.tbl_extend('force', { seq = seq, kind = kind or 'sessionRegistered' }, extra or {})
end

local function accept(s, e)
  return { s:accept(e) }
end

T.test('consecutive events are applied without resync', function()
  local s = Sequencer.new()
  for i = 1, 5 do
    T.eq(accept(s, ev(i)), { true, false })
  end
end)

T.test('a gap applies the event and asks for a resync', function()
  local s = Sequencer.new()
  T.eq(accept(s, ev(1)), { true, false })
  T.eq(accept(s, ev(4)), { true, true })
  T.eq(accept(s, ev(5)), { true, false })
  T.eq(s.gaps, 1)
end)

T.test('eventsLagged asks for a resync and is not applied', function()
  local s = Sequencer.new()
  s:accept(ev(1))
  T.eq(accept(s, ev(2, 'eventsLagged', { dropped = 42 })), { false, true })
  T.eq(s.lagged, 42)
  T.eq(accept(s, ev(3)), { true, false })
end)

T.test('repeated and older events are dropped', function()
  local s = Sequencer.new()
  s:accept(ev(1))
  s:accept(ev(2))
  T.eq(accept(s, ev(2)), { false, false })
  T.eq(accept(s, ev(1)), { false, false })
end)

T.test('a first event after 1 means events were lost before it', function()
  local s = Sequencer.new()
  T.eq(accept(s, ev(3)), { true, true })
end)

T.test('reset starts a new subscription at 1', function()
  local s = Sequencer.new()
  s:accept(ev(1))
  s:accept(ev(2))
  s:reset()
  T.eq(accept(s, ev(1)), { true, false })
end)

T.test('events without seq (older coordinators) are applied as they come', function()
  local s = Sequencer.new()
  T.eq(accept(s, { kind = 'escalationPending' }), { true, false })
  T.eq(accept(s, { kind = 'escalationPending' }), { true, false })
  T.eq(accept(s, { kind = 'eventsLagged', dropped = 1 }), { false, true })
end)

T.finish()
