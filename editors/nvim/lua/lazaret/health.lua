--- `:checkhealth lazaret`: the `lazaret` binary and its version, the API
--- version, the socket directory, and whether each running domain answers;
--- unknown keys given to setup{}. Text from lazaret or a coordinator is
--- shown inert.
local protocol = require('lazaret.protocol')
local config = require('lazaret.config')
local discovery = require('lazaret.discovery')
local rpc = require('lazaret.rpc')
local text = require('lazaret.text')

local M = {}

--- The API version this plugin speaks.
M.API_VERSION = protocol.API_VERSION

local function probe_sync(path, timeout_ms)
  local done, ok, err = false, false, nil
  rpc.probe(path, function(o, e)
    done, ok, err = true, o, e
  end)
  vim.wait(timeout_ms, function()
    return done
  end, 10)
  return done and ok, err or (not done and 'timed out' or nil)
end

function M.check()
  local health = vim.health
  health.start('lazaret: Neovim')
  if vim.fn.has('nvim-0.11') == 1 then
    health.ok('Neovim ' .. tostring(vim.version()))
  else
    health.error('Neovim 0.11 or newer is needed (the plugin is tested on 0.11 only)')
  end

  health.start('lazaret: setup{}')
  if #config.unknown > 0 then
    health.warn(config.unknown_message(), { 'Fix the spelling in your setup{} call; :help lazaret-options lists every option' })
  else
    health.ok('no unknown option')
  end
  local conflicts = config.key_conflicts()
  for _, conflict in ipairs(conflicts) do
    health.warn(conflict, { 'Give each action of the pending window its own key (:help lazaret-options); <CR> confirms a selected answer' })
  end
  if #conflicts == 0 then
    health.ok('the pending window\'s keys are distinct; <CR> confirms a selected answer (:help lazaret-armed)')
  end

  health.start('lazaret: binary')
  local argv = config.command('--version')
  local binary = argv[1]
  local path = vim.fn.exepath(binary)
  if path == '' then
    health.error(string.format('`%s` not found or not executable', text.inert(binary)), {
      'Install lazaret (scripts/install or the Debian package), or set `binary` in setup{} or $LAZARET_BIN',
    })
    return
  end
  health.ok('binary: ' .. text.inert(path))
  local ok, out = pcall(function()
    return vim.system(argv, { text = true }):wait(10000)
  end)
  if ok and out.code == 0 then
    health.ok('version: ' .. text.inert(vim.trim(out.stdout)))
  else
    health.error('`' .. text.inert(table.concat(argv, ' ')) .. '` failed: ' .. text.inert(vim.trim(ok and (out.stderr or '') or tostring(out))))
  end

  health.start('lazaret: coordinators')
  local workspace = discovery.workspace()
  -- A lazaret of another API version is an error here (discovery.mismatch says which side to update).
  local info, err = discovery.info_sync(workspace and { workspace } or {})
  if not info then
    health.error(err and err.what or '`lazaret editor-info --json` failed', { err and err.fix or ':help lazaret-health' })
    return
  end
  health.ok(string.format('API version %d (the plugin expects %d)', info.apiVersion, M.API_VERSION))
  if info.framing ~= 'Content-Length' then
    health.error('framing ' .. tostring(info.framing) .. ' (expected Content-Length)')
  end
  local root = info.socketRoot
  local stat = root and vim.uv.fs_stat(root)
  if stat and stat.type == 'directory' then
    local mode = string.format('%o', bit.band(stat.mode, 511))
    if mode == '700' then
      health.ok('socket directory: ' .. text.inert(root) .. ' (mode 0700)')
    else
      health.warn('socket directory: ' .. text.inert(root) .. ' has mode 0' .. mode .. ' (expected 0700)')
    end
  else
    health.info('socket directory: ' .. text.inert(root) .. ' does not exist yet (no domain has run)')
  end
  local folder = info.folders and info.folders[1]
  if folder then
    health.info(string.format(
      'working directory: %s (profile %s, domain %s, %s)',
      text.inert(folder.workspace or '?'),
      text.inert(folder.profile or '?'),
      text.inert(folder.domainHash or '?'),
      folder.running and 'running' or 'not running'
    ))
  end
  local running = type(info.domains) == 'table' and info.domains or {}
  if #running == 0 then
    health.info('no running domain')
  end
  for _, domain in ipairs(running) do
    local name = text.inert(domain.profile or '?') .. ' @ ' .. text.inert(domain.workspace or '?') .. ' (' .. text.inert(domain.domainHash or '?') .. ')'
    local socket = domain.controlSocket
    if not socket or not probe_sync(socket, 2000) then
      health.error('domain ' .. name .. ': control socket ' .. text.inert(socket) .. ' does not answer')
    else
      local conn = rpc.connect(socket, { notification = function() end, exit = function() end })
      local e, status = conn:request_sync(protocol.methods.domain_status, nil, 5000)
      conn:close()
      local mismatch = not e and type(status) == 'table' and discovery.mismatch('coordinator', 'its coordinator', status.apiVersion)
      if e or type(status) ~= 'table' then
        health.error('domain ' .. name .. ': domain/status failed: ' .. text.inert(rpc.message(e)))
      elseif mismatch then
        health.error('domain ' .. name .. ': ' .. mismatch.what, { mismatch.fix })
      else
        health.ok(string.format(
          'domain %s reachable: container %s, %d session(s)',
          name,
          text.inert(status.containerState),
          type(status.sessions) == 'table' and #status.sessions or 0
        ))
      end
    end
  end
end

return M
