--- Options of the plugin: defaults, `setup{}` merging, validation.
local M = {}

--- @class lazaret.Options
M.defaults = {
  --- The `lazaret` binary (`$LAZARET_BIN` when set).
  binary = nil,
  --- Passed as `--config PATH` to every `lazaret` call (nil: lazaret's default).
  config_file = nil,
  --- Start watching the coordinators when Neovim starts (else on the first command).
  auto_start = true,
  --- How often (ms) the socket directory is scanned for new or restarted coordinators.
  poll_ms = 1000,
  --- Announce a new pending request with vim.notify.
  notify = true,
  --- Level of that notification.
  notify_level = vim.log.levels.WARN,
  --- Open the pending window by itself when a request arrives (never while
  --- you type: it waits until you leave insert mode).
  auto_open = false,
  --- Name of this client in the audit trail (`decidedBy` rpc:<client>).
  client = 'neovim',
  --- Text before the count in `statusline()`.
  statusline_icon = '⛨',
  --- Border of the floating windows (see nvim_open_win()).
  border = 'rounded',
  --- Keys of the pending window.
  keys = { approve = 'a', deny = 'd', edit = 'e', close = 'q', next = '<Tab>', prev = '<S-Tab>' },
  --- Keys of the review tab's file list.
  diff_keys = { open = '<CR>', close = 'q', refresh = 'R' },
}

--- @type lazaret.Options
M.options = vim.deepcopy(M.defaults)

--- Merges user options over the defaults.
--- @param opts table?
--- @return lazaret.Options
function M.set(opts)
  vim.validate('opts', opts, 'table', true)
  M.options = vim.tbl_deep_extend('force', vim.deepcopy(M.defaults), opts or {})
  local o = M.options
  vim.validate('binary', o.binary, 'string', true)
  vim.validate('config_file', o.config_file, 'string', true)
  vim.validate('poll_ms', o.poll_ms, 'number')
  vim.validate('client', o.client, 'string')
  return o
end

--- The lazaret command line prefix: binary and `--config`.
--- @return string[]
function M.command(...)
  local o = M.options
  local binary = o.binary or vim.env.LAZARET_BIN
  if binary == nil or binary == '' then
    binary = 'lazaret'
  end
  local argv = { binary }
  for _, arg in ipairs({ ... }) do
    argv[#argv + 1] = arg
  end
  if o.config_file then
    table.insert(argv, 2, '--config')
    table.insert(argv, 3, o.config_file)
  end
  return argv
end

return M
