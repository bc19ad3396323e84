--- The pending-escalation queue across domains (pure Lua: no editor state).
--- A request is keyed by (domain, request id), never by the id alone: ids
--- are minted by each coordinator, and two coordinators may hand out the
--- same one (or a coordinator from before DECISIONS D16 may take the
--- agent's); one domain's request must never replace or answer another's.
--- Entries come from `escalation/list` and `escalationPending` events and
--- leave on `escalationResolved`, on a fresh list without them, or when their
--- domain goes away. A request once resolved is never added back, so a list
--- answer that raced with the resolution cannot resurrect it.
--- tests/vectors/queue.json holds the cases both editors' tests run.
local Queue = {}
Queue.__index = Queue

--- How many resolved requests are remembered (oldest forgotten first).
local TOMBSTONES = 1024

--- The key of a request: its domain (control socket path) and its id.
--- @param domain string
--- @param id string
--- @return string
function Queue.key(domain, id)
  return domain .. '\0' .. id
end

--- @return lazaret.Queue
function Queue.new()
  return setmetatable({ items = {}, resolved = {}, resolved_order = {}, arrival = 0 }, Queue)
end

--- Adds (or refreshes) a pending request of `domain`.
--- @param domain string key of the domain (its control socket)
--- @param escalation table a PendingEscalation
--- @return string? key the request's key when it is new to the queue
function Queue:add(domain, escalation)
  local id = type(escalation) == 'table' and escalation.requestId or nil
  if type(id) ~= 'string' then
    return nil
  end
  local key = Queue.key(domain, id)
  if self.resolved[key] then
    return nil
  end
  local existing = self.items[key]
  if existing then
    existing.escalation = escalation
    return nil
  end
  self.arrival = self.arrival + 1
  self.items[key] = { key = key, domain = domain, escalation = escalation, arrival = self.arrival }
  return key
end

--- Removes a request for good (answered here or anywhere else).
--- @param domain string
--- @param id string
--- @return boolean removed true when it was in the queue
function Queue:resolve(domain, id)
  if type(id) ~= 'string' then
    return false
  end
  local key = Queue.key(domain, id)
  if not self.resolved[key] then
    self.resolved[key] = true
    table.insert(self.resolved_order, key)
    if #self.resolved_order > TOMBSTONES then
      self.resolved[table.remove(self.resolved_order, 1)] = nil
    end
  end
  local had = self.items[key] ~= nil
  self.items[key] = nil
  return had
end

--- Makes `list` the pending requests of `domain` (after `escalation/list`).
--- @param domain string
--- @param list table[]
--- @return string[] added keys of the requests that were not queued before
function Queue:replace(domain, list)
  local keep, added = {}, {}
  for _, escalation in ipairs(type(list) == 'table' and list or {}) do
    if type(escalation) == 'table' and type(escalation.requestId) == 'string' then
      keep[Queue.key(domain, escalation.requestId)] = true
      local key = self:add(domain, escalation)
      if key then
        added[#added + 1] = key
      end
    end
  end
  for key, item in pairs(self.items) do
    if item.domain == domain and not keep[key] then
      self.items[key] = nil
    end
  end
  return added
end

--- Forgets every request of a domain (its coordinator went away).
--- @param domain string
function Queue:drop_domain(domain)
  for key, item in pairs(self.items) do
    if item.domain == domain then
      self.items[key] = nil
    end
  end
end

--- @param key string from Queue.key / an item's `key`
--- @return table? item {key, domain, escalation, arrival}
function Queue:get(key)
  return self.items[key]
end

--- @param domain string
--- @param id string
--- @return table? item
function Queue:find(domain, id)
  return self.items[Queue.key(domain, id)]
end

--- When a request was received; 0 when its receivedAtMs is not a number.
local function received_at(item)
  local at = item.escalation.receivedAtMs
  return (type(at) == 'number' and at == at and math.abs(at) ~= math.huge) and at or 0
end

--- The queued requests, oldest first (receivedAtMs, then arrival).
--- @return table[] items {key, domain, escalation, arrival}
function Queue:list()
  local out = {}
  for _, item in pairs(self.items) do
    out[#out + 1] = item
  end
  table.sort(out, function(a, b)
    local ta, tb = received_at(a), received_at(b)
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
