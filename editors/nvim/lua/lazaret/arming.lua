--- Deliberate answers in the pending window (DECISIONS D20), as a pure
--- state machine: the time comes in as an argument (ms, any monotonic
--- clock), so the tests drive it with a fake one. The agent sees every key
--- the user types and chooses when its request appears; the pending window
--- takes the keyboard when it opens by itself. So:
---   - the window starts *disarmed*, and disarms again whenever the request
---     under the cursor changes (another request moved into its place, a
---     render, the cursor moved onto another one or off it);
---   - while disarmed every key typed in the window is discarded, counted,
---     and restarts the delay (DELAY_MS): it arms only after a second
---     without a key, so a sentence typed at any speed answers nothing;
---   - armed, a denial is one key; an approving answer (approve, an edited
---     command, every network allow) is a key that *selects* it, the window
---     then names exactly what will run or open, and <CR> confirms it; any
---     other key cancels the selection, is discarded and disarms;
---   - armed, a key that is none of the window's is discarded and disarms
---     too (the first key of a sentence, typed on an armed window).
--- A selection made with its <CR> already waiting behind it (a paste, keys
--- read at once) is `burst`: no <CR> confirms it, the next key cancels it.
local M = {}

--- How long (ms) without a key the window waits before a key may answer.
M.DELAY_MS = 1000

local State = {}
State.__index = State

--- A window that just took the keyboard at `now`: disarmed, nothing shown yet.
--- @param now number ms
function M.new(now)
  return setmetatable({ shown = nil, quiet_since = now, discarded = 0, selection = nil, every_port = false }, State)
end

--- Restarts the delay: no key answers before `now + DELAY_MS`; a selection
--- is forgotten.
function State:disarm(now)
  self.quiet_since = now
  self.selection = nil
end

--- Whether a key may answer at `now`.
function State:armed(now)
  return now - self.quiet_since >= M.DELAY_MS
end

--- How long (ms) until a key may answer (0 when armed).
function State:arms_in(now)
  return math.max(0, M.DELAY_MS - (now - self.quiet_since))
end

--- The request under the cursor is `key` (nil: none). Another one than
--- before disarms, and forgets the every-port choice.
--- @return boolean changed
function State:show(key, now)
  if key == self.shown then
    return false
  end
  self.shown = key
  self.every_port = false
  self:disarm(now)
  return true
end

--- A key not taken: counted (when `counted`, default true: a key the user
--- typed), and the window disarms.
function State:discard(now, counted)
  if counted ~= false then
    self.discarded = self.discarded + 1
  end
  self:disarm(now)
end

--- One key typed in the window at `now`, by kind:
---   'confirm'  the confirming key (<CR>)
---   'window'   one of the window's own keys (answers, moves, close)
---   'other'    anything else
--- Returns 'pass' (the key acts: its mapping runs), 'confirm' and the
--- selection (send it; the key is taken), or 'discard' (the key is taken,
--- counted when `counted`, and the window disarms).
--- @param kind 'confirm'|'window'|'other'
--- @param now number
--- @param counted boolean? false for a key Neovim made (a mapping's), not typed
--- @return string verdict
--- @return table? selection
function State:key(kind, now, counted)
  if not self:armed(now) then
    self:discard(now, counted)
    return 'discard'
  end
  local selection = self.selection
  if selection then
    if kind == 'confirm' and not selection.burst and selection.key == self.shown then
      -- Confirmed: the request leaves; the next one is shown disarmed.
      self:disarm(now)
      return 'confirm', selection
    end
    self:discard(now, counted)
    return 'discard'
  end
  if kind == 'other' then
    self:discard(now, counted)
    return 'discard'
  end
  return 'pass'
end

--- Selects an approving answer for the request shown (`selection.key`):
--- only armed, and only for that request. `burst`: a <CR> was already
--- waiting behind the selecting key.
--- @param selection table {key, kind = 'approve'|'edit'|'network', ...}
--- @return boolean selected
function State:select(selection, now, burst)
  if not self:armed(now) or selection.key == nil or selection.key ~= self.shown then
    return false
  end
  selection.burst = burst or nil
  self.selection = selection
  return true
end

--- Switches the allow keys of the address request shown between its one
--- protocol and port and every protocol and port (only armed).
--- @return boolean switched
function State:toggle_every_port(now)
  if not self:armed(now) then
    return false
  end
  self.every_port = not self.every_port
  return true
end

return M
