--- The pending queue across domains (pure Lua: no editor state): host
--- command escalations (kind `command`, the item's `escalation`) and network
--- requests (kind `network`, a DNS name on no allow entry: the item's
--- `request`). A request is keyed by (domain, kind, request id), never by the id alone: ids
--- are minted by each coordinator, and two coordinators may hand out the
--- same one (or a coordinator from before DECISIONS D16 may take the
--- agent's); one domain's request must never replace or answer another's.
--- Entries come from `pending/list` (or `escalation/list`) and
--- `escalationPending` / `networkRequestPending` events (a repeated network
--- request is sent again with the same id: an upsert) and leave on
--- `escalationResolved` / `networkRequestResolved`, on a fresh list without them, or when their
--- domain goes away. A request once resolved is never added back, so a list
--- answer that raced with the resolution cannot resurrect it.
--- tests/vectors/queue.json holds the cases both editors' tests run.
local Queue = {}
Queue.__index = Queue

--- How many resolved requests are remembered (oldest forgotten first).
local TOMBSTONES = 1024

--- The kinds of pending items this client answers.
Queue.kinds = { command = true, network = true }

--- The key of a request: its domain (control socket path), its kind and its
--- id (a command's key is domain NUL id, as the shared vectors spell it).
--- @param domain string
--- @param id string
--- @param kind string? 'command' (default) or 'network'
--- @return string
function Queue.key(domain, id, kind)
  if kind == 'network' then
    return domain .. '\0network\0' .. id
  end
  return domain .. '\0' .. id
end

--- The wire object of an item: its PendingEscalation or PendingNetworkRequest.
--- @param item table
--- @return table
function Queue.payload(item)
  return item.kind == 'network' and item.request or item.escalation
end

--- @return lazaret.Queue
function Queue.new()
  return setmetatable({ items = {}, resolved = {}, resolved_order = {}, arrival = 0 }, Queue)
end

--- Adds (or refreshes: an upsert) a pending request of `domain`.
--- @param domain string key of the domain (its control socket)
--- @param escalation table a PendingEscalation (or a PendingNetworkRequest with kind 'network')
--- @param kind string? 'command' (default) or 'network'
--- @return string? key the request's key when it is new to the queue
function Queue:add(domain, escalation, kind)
  kind = kind or 'command'
  local id = type(escalation) == 'table' and escalation.requestId or nil
  if type(id) ~= 'string' or not Queue.kinds[kind] then
    return nil
  end
  local key = Queue.key(domain, id, kind)
  if self.resolved[key] then
    return nil
  end
  local field = kind == 'network' and 'request' or 'escalation'
  local existing = self.items[key]
  if existing then
    existing[field] = escalation
    return nil
  end
  self.arrival = self.arrival + 1
  self.items[key] = { key = key, domain = domain, kind = kind, [field] = escalation, arrival = self.arrival }
  return key
end

--- Removes a request for good (answered here or anywhere else).
--- @param domain string
--- @param id string
--- @param kind string? 'command' (default) or 'network'
--- @return boolean removed true when it was in the queue
function Queue:resolve(domain, id, kind)
  if type(id) ~= 'string' then
    return false
  end
  local key = Queue.key(domain, id, kind)
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

--- Makes `list` the pending requests of `domain` (after `pending/list`, a
--- list of PendingItem tagged by `kind`, or `escalation/list`, untagged
--- escalations). An item of a kind this client does not know is skipped.
--- @param domain string
--- @param list table[]
--- @return string[] added keys of the requests that were not queued before
function Queue:replace(domain, list)
  local keep, added = {}, {}
  for _, escalation in ipairs(type(list) == 'table' and list or {}) do
    local kind = type(escalation) == 'table' and (escalation.kind == nil and 'command' or escalation.kind) or nil
    if type(escalation) == 'table' and type(escalation.requestId) == 'string' and Queue.kinds[kind] then
      keep[Queue.key(domain, escalation.requestId, kind)] = true
      local key = self:add(domain, escalation, kind)
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
--- @return table? item {key, domain, kind, escalation or request, arrival}
function Queue:get(key)
  return self.items[key]
end

--- @param domain string
--- @param id string
--- @param kind string? 'command' (default) or 'network'
--- @return table? item
function Queue:find(domain, id, kind)
  return self.items[Queue.key(domain, id, kind)]
end

--- When a request was received; 0 when its receivedAtMs is not a number.
local function received_at(item)
  local at = Queue.payload(item).receivedAtMs
  return (type(at) == 'number' and at == at and math.abs(at) ~= math.huge) and at or 0
end

--- The queued requests, oldest first (receivedAtMs, then arrival).
--- @return table[] items {key, domain, kind, escalation or request, arrival}
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

--- How many requests are queued (of one kind when `kind` is given).
--- @param kind string?
--- @return integer
function Queue:count(kind)
  local n = 0
  for _, item in pairs(self.items) do
    if kind == nil or item.kind == kind then
      n = n + 1
    end
  end
  return n
end

return Queue
