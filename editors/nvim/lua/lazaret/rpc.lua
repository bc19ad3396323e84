--- One JSON-RPC connection to a Session Coordinator's control socket, over
--- `vim.lsp.rpc.connect(path)` (Content-Length framing). Callbacks and
--- notifications are delivered on the main loop (vim.schedule), in order.
local M = {}

local uv = vim.uv

local error_code = require('lazaret.protocol').error_code

--- Error codes: the coordinator's (generated into lazaret.protocol from the
--- protocol crate), JSON-RPC's own `method_not_found`, and `not_connected`,
--- which only this plugin gives (no coordinator to ask), outside every range
--- the coordinator uses.
M.codes = {
  method_not_found = -32601,
  not_connected = -1,
  shutting_down = error_code.SHUTTING_DOWN,
  not_pending = error_code.ESCALATION_NOT_PENDING,
  network_not_pending = error_code.NETWORK_REQUEST_NOT_PENDING,
  rule_not_found = error_code.RULE_NOT_FOUND,
  no_sidecar = error_code.NETWORK_FAILED,
}

--- Params as they must go out: Lua's empty table would be encoded as `[]`,
--- so "no params" is sent as an explicit empty object.
--- @param params table?
--- @return table
function M.params(params)
  if params == nil or (type(params) == 'table' and next(params) == nil) then
    return vim.empty_dict()
  end
  return params
end

--- A readable message for an RPC error (a table with code/message, or a string).
--- @param err any
--- @return string
function M.message(err)
  if type(err) == 'table' then
    local text = err.message or vim.inspect(err)
    if err.code then
      return string.format('%s (code %s)', text, err.code)
    end
    return text
  end
  return tostring(err)
end

--- Whether something listens on the Unix socket `path`. vim.lsp.rpc.connect
--- reports a refused connection only with a warning (and no on_exit), so a
--- stale socket left by a dead coordinator is probed first, quietly.
--- @param path string
--- @param callback fun(ok: boolean, err: string?)
function M.probe(path, callback)
  local pipe = uv.new_pipe(false)
  if not pipe then
    return callback(false, 'no pipe')
  end
  pipe:connect(path, function(err)
    pipe:close()
    vim.schedule(function()
      callback(err == nil, err)
    end)
  end)
end

--- @class lazaret.Connection
--- @field path string
--- @field client vim.lsp.rpc.PublicClient
--- @field closed boolean
local Connection = {}
Connection.__index = Connection

--- Connects to `path` (already probed) and returns the connection.
--- @param path string
--- @param handlers {notification: fun(method: string, params: table), exit: fun()}
--- @return lazaret.Connection
function M.connect(path, handlers)
  local self = setmetatable({ path = path, closed = false }, Connection)
  local exited = false
  self.client = vim.lsp.rpc.connect(path)({
    notification = function(method, params)
      vim.schedule(function()
        if not self.closed then
          handlers.notification(method, params)
        end
      end)
    end,
    on_exit = function()
      vim.schedule(function()
        if exited then
          return
        end
        exited = true
        self.closed = true
        if not self.deliberate then
          handlers.exit()
        end
      end)
    end,
    -- A transport error (a message that could not be read or written): said
    -- once per connection; the connection's end is reported by on_exit.
    on_error = function(code, err)
      vim.schedule(function()
        if self.error_reported then
          return
        end
        self.error_reported = true
        local name = vim.lsp.rpc.client_errors and vim.lsp.rpc.client_errors[code] or tostring(code)
        vim.notify(
          string.format('Lazaret: the connection to %s failed (%s): %s', require('lazaret.text').inert(path), tostring(name), require('lazaret.text').inert(tostring(err))),
          vim.log.levels.WARN
        )
      end)
    end,
    server_request = function()
      return nil, { code = -32601, message = 'Method not found' }
    end,
  })
  return self
end

--- Sends a request; `callback(err, result)` runs on the main loop.
--- @param method string
--- @param params table?
--- @param callback fun(err: table?, result: any)?
function Connection:request(method, params, callback)
  callback = callback or function() end
  if self.closed or self.client.is_closing() then
    vim.schedule(function()
      callback({ code = M.codes.not_connected, message = 'not connected' }, nil)
    end)
    return
  end
  local ok = self.client.request(method, M.params(params), function(err, result)
    vim.schedule(function()
      callback(err, result)
    end)
  end)
  if not ok then
    vim.schedule(function()
      callback({ code = M.codes.not_connected, message = 'not connected' }, nil)
    end)
  end
end

--- A request that waits for its answer (at most `timeout_ms`); for health
--- checks and commands that must finish before returning.
--- @return table? err
--- @return any result
function Connection:request_sync(method, params, timeout_ms)
  local done, err, result = false, nil, nil
  self:request(method, params, function(e, r)
    done, err, result = true, e, r
  end)
  if not vim.wait(timeout_ms or 5000, function()
    return done
  end, 10) then
    return { message = 'timed out after ' .. (timeout_ms or 5000) .. ' ms' }, nil
  end
  return err, result
end

function Connection:close()
  if not self.closed then
    self.closed, self.deliberate = true, true
    self.client.terminate()
  end
end

return M
