--- The pending-escalation queue across domains (pure Lua: no editor state).
--- Entries come from `escalation/list` and `escalationPending` events and
--- leave on `escalationResolved`, on a fresh list without them, or when their
--- domain goes away. A request once resolved is never added back, so a list
--- answer that raced with the resolution cannot resurrect it.
local Queue = {}
Queue.__index = Queue

--- How many resolved ids are remembered (oldest forgotten first).
local TOMBSTONES = 1024

--- @return lazaret.Queue
function Queue.new()
  return setmetatable({ items = {}, resolved = {}, resolved_order = {}, arrival = 0 }, Queue)
end

--- Adds (or refreshes) a pending request of `domain`.
--- @param domain string key of the domain (its control socket)
--- @param escalation table a PendingEscalation
--- @return boolean added true when the request is new to the queue
function Queue:add(domain, escalation)
  local id = escalation.requestId
  if type(id) ~= 'string' or self.resolved[id] then
    return false
  end
  local existing = self.items[id]
  if existing then
    existing.escalation = escalation
    existing.domain = domain
    return false
  end
  self.arrival = self.arrival + 1
  self.items[id] = { domain = domain, escalation = escalation, arrival = self.arrival }
  return true
end

--- Removes a request for good (answered here or anywhere else).
--- @param id string
--- @return boolean removed true when it was in the queue
function Queue:resolve(id)
  if not self.resolved[id] then
    self.resolved[id] = true
    table.insert(self.resolved_order, id)
    if #self.resolved_order > TOMBSTONES then
      self.resolved[table.remove(self.resolved_order, 1)] = nil
    end
  end
  local had = self.items[id] ~= nil
  self.items[id] = nil
  return had
end

--- Makes `list` the pending requests of `domain` (after `escalation/list`).
--- @param domain string
--- @param list table[]
--- @return string[] added ids that were not queued before
function Queue:replace(domain, list)
  local keep, added = {}, {}
  for _, escalation in ipairs(list or {}) do
    if type(escalation) == 'table' and escalation.requestId then
      keep[escalation.requestId] = true
      if self:add(domain, escalation) then
        added[#added + 1] = escalation.requestId
      end
    end
  end
  for id, item in pairs(self.items) do
    if item.domain == domain and not keep[id] then
      self.items[id] = nil
    end
  end
  return added
end

--- Forgets every request of a domain (its coordinator went away).
--- @param domain string
function Queue:drop_domain(domain)
  for id, item in pairs(self.items) do
    if item.domain == domain then
      self.items[id] = nil
    end
  end
end

--- @param id string
--- @return table? item {domain, escalation, arrival}
function Queue:get(id)
  return self.items[id]
end

--- The queued requests, oldest first (receivedAtMs, then arrival).
--- @return table[] items {domain, escalation, arrival}
function Queue:list()
  local out = {}
  for _, item in pairs(self.items) do
    out[#out + 1] = item
  end
  table.sort(out, function(a, b)
    local ta, tb = tonumber(a.escalation.receivedAtMs) or 0, tonumber(b.escalation.receivedAtMs) or 0
    if ta ~= tb then
      return ta < tb
    end
    return a.arrival < b.arrival
  end)
  return out
end

--- @return integer
function Queue:count()
  local n = 0
  for _ in pairs(self.items) do
    n = n + 1
  end
  return n
end

return Queue
