-- A fake Session Coordinator for unit tests: a Unix-socket JSON-RPC server
-- with Content-Length framing, running on this Neovim's event loop. It
-- records every request (and its raw JSON) and answers from `methods`.
local uv = vim.uv
local Fake = {}
Fake.__index = Fake
--- A handler returning Fake.SILENT never answers (a stopped coordinator).
Fake.SILENT = {}

function Fake.new(path, methods)
  local self = setmetatable({ path = path, methods = methods or {}, requests = {}, raw = {}, clients = {} }, Fake)
  self:listen()
  return self
end

function Fake:listen()
  os.remove(self.path)
  self.server = assert(uv.new_pipe(false))
  assert(self.server:bind(self.path))
  self.server:listen(16, function()
    local client = assert(uv.new_pipe(false))
    self.server:accept(client)
    table.insert(self.clients, client)
    local buffer = ''
    client:read_start(function(err, data)
      if err or not data then
        client:close()
        return
      end
      buffer = buffer .. data
      while true do
        local header_end = buffer:find('\r\n\r\n', 1, true)
        if not header_end then
          break
        end
        local length = tonumber(buffer:sub(1, header_end):match('Content%-Length: *(%d+)'))
        if #buffer < header_end + 3 + length then
          break
        end
        local body = buffer:sub(header_end + 4, header_end + 3 + length)
        buffer = buffer:sub(header_end + 4 + length)
        vim.schedule(function()
          self:handle(client, body)
        end)
      end
    end)
  end)
end

function Fake:write(client, message)
  local body = vim.json.encode(message)
  if not client:is_closing() then
    client:write(string.format('Content-Length: %d\r\n\r\n%s', #body, body))
  end
end

function Fake:handle(client, body)
  local message = vim.json.decode(body)
  table.insert(self.raw, body)
  table.insert(self.requests, message)
  local handler = self.methods[message.method]
  if message.method == 'events/subscribe' and not handler then
    handler = function()
      return 'sub-1'
    end
  end
  if not handler then
    return self:write(client, { jsonrpc = '2.0', id = message.id, error = { code = -32601, message = 'Method not found' } })
  end
  local result, err = handler(message.params)
  if result == Fake.SILENT then
    return
  end
  if err then
    self:write(client, { jsonrpc = '2.0', id = message.id, error = err })
  else
    self:write(client, { jsonrpc = '2.0', id = message.id, result = result })
  end
end

--- Sends an event to every connected client.
function Fake:event(event)
  for _, client in ipairs(self.clients) do
    self:write(client, { jsonrpc = '2.0', method = 'events/event', params = { subscription = 'sub-1', result = event } })
  end
end

--- The requests of one method, in order.
function Fake:calls(method)
  return vim.tbl_filter(function(m)
    return m.method == method
  end, self.requests)
end

--- A PendingNetworkRequest as a coordinator sends it (`kind = 'network'`
--- in `pending/list`; the event carries it without `kind`), fields over
--- the defaults from `fields`.
function Fake.network_request(id, destination, fields)
  return vim.tbl_extend('force', {
    requestId = id,
    destination = destination,
    recordTypes = { 'A', 'AAAA' },
    sessionIds = { 'session-1' },
    repeats = 0,
    profile = 'default',
    domainHash = 'abc123',
    receivedAtMs = 1000,
    expiresAtMs = 4102444800000,
  }, fields or {})
end

--- The same tagged as a PendingItem of `pending/list`.
function Fake.network_item(id, destination, fields)
  return vim.tbl_extend('force', Fake.network_request(id, destination, fields), { kind = 'network' })
end

--- A NetworkGrant of `rules/list`.
function Fake.grant(id, destination, fields)
  return vim.tbl_extend('force', {
    id = id,
    destination = destination,
    verdict = 'allow',
    scope = { type = 'session' },
    decidedBy = 'rpc:neovim',
    grantedAtMs = 1000,
    hits = 0,
  }, fields or {})
end

--- Goes away like a coordinator that exits: connections closed, socket unlinked.
function Fake:close()
  for _, client in ipairs(self.clients) do
    if not client:is_closing() then
      client:close()
    end
  end
  self.clients = {}
  if not self.server:is_closing() then
    self.server:close()
  end
  os.remove(self.path)
end

return Fake
