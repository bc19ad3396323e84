--- Finding the coordinators: `lazaret editor-info --json --workspace DIR`
--- (socket root, running domains, the domain of the working directory), and
--- scanning `<socketRoot>/*/control.sock` for coordinators that start later.
local config = require('lazaret.config')
local text = require('lazaret.text')

local M = {}

--- The workspace of a directory: the top level of its git repository.
--- @param dir string?
--- @return string?
function M.workspace(dir)
  dir = dir or vim.fn.getcwd()
  return vim.fs.root(dir, '.git')
end

local function decode(text)
  local ok, value = pcall(vim.json.decode, text, { luanil = { object = true, array = true } })
  if ok and type(value) == 'table' then
    return value
  end
  return nil
end

local function run(argv, callback)
  local ok, err = pcall(vim.system, argv, { text = true }, function(out)
    vim.schedule(function()
      callback(out)
    end)
  end)
  if not ok then
    vim.schedule(function()
      callback({ code = 127, stdout = '', stderr = tostring(err) })
    end)
  end
end

--- Why `argv` failed, as what the user reads and how to fix it: a missing
--- binary is named as such (a client that could not ask must say so, not
--- show an empty queue). Inert text.
--- @param argv string[]
--- @param out table vim.system's result
--- @return {what: string, fix: string}
function M.failure(argv, out)
  local binary = argv[1]
  if vim.fn.executable(binary) == 0 then
    return {
      what = string.format('cannot find the lazaret binary `%s`', text.inert(binary)),
      fix = 'set `binary` in setup{} (or $LAZARET_BIN), or put lazaret on $PATH; :checkhealth lazaret',
      short = 'no lazaret binary',
    }
  end
  local stderr = vim.trim(out.stderr or '')
  local first = vim.split(stderr, '\n', { plain = true })[1] or ''
  if out.code == 0 then
    first = 'its answer is not the JSON this plugin expects (a lazaret from another release?)'
  end
  return {
    what = string.format(
      '`lazaret editor-info` failed: %s',
      (text.cut(text.inert(first ~= '' and first or ('exit status ' .. tostring(out.code))), 300))
    ),
    fix = ':checkhealth lazaret',
    short = 'lazaret editor-info failed',
  }
end

--- Runs `lazaret editor-info --json [--workspace DIR]...`.
--- A lazaret without `--workspace` (before protocol v1's additions) is asked
--- again without it, and each folder's domain is found with
--- `lazaret domain --json`; such an answer has `legacy = true`.
--- @param workspaces string[]
--- @param callback fun(info: table?, err: {what: string, fix: string, short: string}?)
function M.info(workspaces, callback)
  local argv = config.command('editor-info', '--json')
  for _, dir in ipairs(workspaces) do
    vim.list_extend(argv, { '--workspace', dir })
  end
  run(argv, function(out)
    local info = out.code == 0 and decode(out.stdout) or nil
    if info then
      info.folders = info.folders or {}
      return callback(info)
    end
    if #workspaces == 0 or not (out.stderr or ''):find('--workspace', 1, true) then
      return callback(nil, M.failure(argv, out))
    end
    M.info({}, function(legacy, err)
      if not legacy then
        return callback(nil, err)
      end
      legacy.legacy = true
      local remaining = #workspaces
      for i, dir in ipairs(workspaces) do
        run(config.command('domain', '--json', '--workspace', dir), function(res)
          local domain = res.code == 0 and decode(res.stdout) or nil
          if domain then
            legacy.folders[i] = {
              workspace = domain.workspace,
              profile = domain.profile,
              domainHash = domain.domain_hash,
              controlSocket = domain.control_socket,
              running = vim.uv.fs_stat(domain.control_socket) ~= nil,
            }
          end
          remaining = remaining - 1
          if remaining == 0 then
            legacy.folders = vim.tbl_values(legacy.folders)
            callback(legacy)
          end
        end)
      end
    end)
  end)
end

--- The same, waiting for the answer (health checks).
--- @return table? info
--- @return string? err
function M.info_sync(workspaces, timeout_ms)
  local done, info, err = false, nil, nil
  M.info(workspaces, function(i, e)
    done, info, err = true, i, e
  end)
  vim.wait(timeout_ms or 10000, function()
    return done
  end, 10)
  if not done then
    return nil, { what = '`lazaret editor-info` did not answer in time', fix = ':checkhealth lazaret', short = 'lazaret editor-info timed out' }
  end
  return info, err
end

--- Control sockets under the socket root: `<root>/<domainHash>/control.sock`.
--- @param root string
--- @return string[] paths, sorted
function M.scan(root)
  local sockets = {}
  local handle = vim.uv.fs_scandir(root)
  if not handle then
    return sockets
  end
  while true do
    local name, kind = vim.uv.fs_scandir_next(handle)
    if not name then
      break
    end
    if kind == 'directory' then
      local path = root .. '/' .. name .. '/control.sock'
      local stat = vim.uv.fs_stat(path)
      if stat and stat.type == 'socket' then
        sockets[#sockets + 1] = path
      end
    end
  end
  table.sort(sockets)
  return sockets
end

return M
