--- Finding the coordinators: `lazaret editor-info --json --workspace DIR`
--- (socket root, running domains, the domain of the working directory), and
--- scanning `<socketRoot>/*/control.sock` for coordinators that start later.
--- A lazaret or a coordinator of another API version is a problem that says
--- what to update (`mismatch`), never a fallback.
local config = require('lazaret.config')
local protocol = require('lazaret.protocol')
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

--- Runs `argv`; `callback(out)` once, on the main loop. A command that has
--- not ended after `timeout_ms` is killed and reported with `timed_out`: a
--- hung `lazaret` (a config file on a dead network mount, ...) must not leave
--- discovery waiting for ever.
local function run(argv, timeout_ms, callback)
  local finished, timer = false, nil
  local function finish(out)
    if finished then
      return
    end
    finished = true
    if timer and not timer:is_closing() then
      timer:close()
    end
    vim.schedule(function()
      callback(out)
    end)
  end
  local ok, proc = pcall(vim.system, argv, { text = true }, finish)
  if not ok then
    return finish({ code = 127, stdout = '', stderr = tostring(proc) })
  end
  if finished then
    return
  end
  timer = assert(vim.uv.new_timer())
  timer:start(timeout_ms, 0, function()
    if not finished then
      pcall(proc.kill, proc, 9)
      finish({ code = 124, stdout = '', stderr = '', timed_out = true })
    end
  end)
end

--- Why `argv` failed, as what the user reads and how to fix it: a missing
--- binary is named as such (a client that could not ask must say so, not
--- show an empty queue). Inert text.
--- @param argv string[]
--- @param out table vim.system's result (`timed_out` when it was killed)
--- @return {what: string, fix: string, short: string}
function M.failure(argv, out)
  if out.timed_out then
    return {
      what = string.format(
        '`%s` did not answer within %g s (killed)',
        text.cut(text.inert(table.concat(argv, ' ')), 300),
        config.options.discovery_timeout_ms / 1000
      ),
      fix = 'run that command in a terminal to see where it hangs; `discovery_timeout_ms` in setup{} sets the limit; :checkhealth lazaret',
      short = 'lazaret editor-info timed out',
    }
  end
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

--- An `apiVersion` as received, in words (it may be absent or not a number).
local function version_words(value)
  if type(value) == 'number' and value == math.floor(value) and value >= 0 and value < 2 ^ 31 then
    return string.format('API %d', value)
  end
  return 'no API version this plugin can read'
end

--- What a peer of another API version means and what to update, or nil when
--- it speaks this plugin's `API_VERSION`. There is no fallback for another
--- version: answering a protocol this plugin does not speak is unsafe.
--- @param kind 'binary'|'coordinator'
--- @param who string the plugin's own words naming the peer (inert)
--- @param theirs any its `apiVersion` as received
--- @return {what: string, fix: string, short: string}?
function M.mismatch(kind, who, theirs)
  local ours = protocol.API_VERSION
  if theirs == ours then
    return nil
  end
  local what = string.format('%s speaks %s, this plugin speaks API %d', who, version_words(theirs), ours)
  local short = (kind == 'binary' and 'lazaret' or 'a coordinator') .. ' speaks another API'
  if type(theirs) == 'number' and theirs > ours then
    return {
      what = what,
      fix = string.format('update this plugin (editors/nvim) to the release of that lazaret (%s)', version_words(theirs)),
      short = short,
    }
  end
  if kind == 'binary' then
    return {
      what = what,
      fix = string.format('update lazaret (that binary) to the release of this plugin (API %d), or set `binary` in setup{} (or $LAZARET_BIN) to one', ours),
      short = short,
    }
  end
  return {
    what = what .. ': its requests are not asked for',
    fix = 'an older lazaret started this coordinator: answer its requests with that lazaret (`lazaret pending`), and end its sessions so that the next `lazaret run` starts a current one',
    short = short,
  }
end

--- Runs `lazaret editor-info --json [--workspace DIR]...` (at most
--- `discovery_timeout_ms`). Its answer must be the `EditorInfo` of this
--- plugin's API version; anything else is a failure saying what to update.
--- @param workspaces string[]
--- @param callback fun(info: table?, err: {what: string, fix: string, short: string}?)
function M.info(workspaces, callback)
  local argv = config.command('editor-info', '--json')
  for _, dir in ipairs(workspaces) do
    vim.list_extend(argv, { '--workspace', dir })
  end
  run(argv, config.options.discovery_timeout_ms, function(out)
    local info = out.code == 0 and decode(out.stdout) or nil
    if not info then
      return callback(nil, M.failure(argv, out))
    end
    local mismatch = M.mismatch('binary', string.format('the lazaret binary `%s`', text.inert(argv[1])), info.apiVersion)
    if mismatch then
      return callback(nil, mismatch)
    end
    if type(info.socketRoot) ~= 'string' or type(info.folders) ~= 'table' or type(info.domains) ~= 'table' then
      return callback(nil, M.failure(argv, { code = 0 }))
    end
    callback(info)
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
  -- M.info ends by itself after discovery_timeout_ms; this is a backstop.
  vim.wait(timeout_ms or (config.options.discovery_timeout_ms + 1000), function()
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
