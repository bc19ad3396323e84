--- Event sequencing of one subscription (pure Lua: no editor state).
--- Events carry `seq` 1, 2, 3, ... per subscription; `eventsLagged` or a gap
--- means events were lost and the client must resync (list the queue and the
--- status again). A repeated or older seq is dropped. An event without `seq`
--- (no coordinator of this API version sends one; see the version check in
--- lazaret.domains) is applied as it comes, its handler ignoring what it
--- cannot read; only a JSON number is a seq. tests/vectors/sequencer.json holds the cases
--- both editors' tests run.
local Sequencer = {}
Sequencer.__index = Sequencer

--- @return lazaret.Sequencer
function Sequencer.new()
  return setmetatable({ last = nil, lagged = 0, gaps = 0 }, Sequencer)
end

--- Starts over (a new subscription numbers its events from 1 again).
function Sequencer:reset()
  self.last = nil
end

--- Decides what to do with one event.
--- @param event table the `result` of an `events/event` notification
--- @return boolean apply the event's own content is to be applied
--- @return boolean resync events were lost: list and status again
function Sequencer:accept(event)
  local seq = type(event) == 'table' and type(event.seq) == 'number' and event.seq or nil
  local lagged = type(event) == 'table' and event.kind == 'eventsLagged'
  if seq == nil then
    return not lagged, lagged
  end
  if self.last ~= nil and seq <= self.last then
    return false, false
  end
  local gap = (self.last == nil and seq > 1) or (self.last ~= nil and seq > self.last + 1)
  self.last = seq
  if lagged then
    self.lagged = self.lagged + (type(event.dropped) == 'number' and event.dropped or 0)
    return false, true
  end
  if gap then
    self.gaps = self.gaps + 1
  end
  return true, gap
end

return Sequencer
