--- Options of the plugin: defaults, a schema, `setup{}` merging and
--- validation. An unknown key (a misspelt option, nested ones too) is
--- reported with vim.notify WARN and in :checkhealth, naming the key: a
--- silently ignored `bianry = ...` once left a user with no binary and a
--- window saying nothing was pending.
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
  --- How long (ms) a coordinator may take to answer `pending/list`
  --- before it is reported as not answering.
  answer_timeout_ms = 5000,
  --- How long (ms) `lazaret editor-info` may run before it is killed and
  --- reported as not answering (discovery is tried again later).
  discovery_timeout_ms = 10000,
  --- Announce a new pending request with vim.notify.
  notify = true,
  --- Level of that notification.
  notify_level = vim.log.levels.WARN,
  --- Open the pending window by itself when a request arrives (never while
  --- you type in insert mode: it waits until you leave it). It opens
  --- disarmed: keys typed into it are discarded until 1 s passes without one.
  auto_open = false,
  --- Name of this client in the audit trail (`decidedBy` rpc:<client>).
  client = 'neovim',
  --- Text before the count in `statusline()`.
  statusline_icon = '⛨',
  --- Border of the floating windows (see nvim_open_win()).
  border = 'rounded',
  --- Keys of the pending window (`approve` and `deny` answer a network
  --- request for this session; the `*_minutes`/`*_profile` keys answer only
  --- network requests; `every_port` switches the allow keys of a request for
  --- an address between the one protocol and port it tried and every
  --- protocol and port of it) and of the rules window (`revoke`, `refresh`,
  --- `close`). An approval, an edit and every network allow are confirmed
  --- with <CR> (DECISIONS D20), which is not configurable.
  keys = {
    approve = 'a',
    deny = 'd',
    edit = 'e',
    full = '<CR>',
    close = 'q',
    next = '<Tab>',
    prev = '<S-Tab>',
    allow_minutes = 't',
    allow_profile = 'p',
    deny_profile = 'D',
    every_port = 'w',
    revoke = 'x',
    refresh = 'R',
  },
  --- Keys of the review tab's file list.
  diff_keys = { open = '<CR>', close = 'q', refresh = 'R' },
}

--- The type(s) of every option; a table describes a nested table's keys.
M.schema = {
  binary = { 'string', 'nil' },
  config_file = { 'string', 'nil' },
  auto_start = { 'boolean' },
  poll_ms = { 'number' },
  answer_timeout_ms = { 'number' },
  discovery_timeout_ms = { 'number' },
  notify = { 'boolean' },
  notify_level = { 'number' },
  auto_open = { 'boolean' },
  client = { 'string' },
  statusline_icon = { 'string' },
  border = { 'string', 'table' },
  keys = {
    approve = { 'string' },
    deny = { 'string' },
    edit = { 'string' },
    full = { 'string' },
    close = { 'string' },
    next = { 'string' },
    prev = { 'string' },
    allow_minutes = { 'string' },
    allow_profile = { 'string' },
    deny_profile = { 'string' },
    every_port = { 'string' },
    revoke = { 'string' },
    refresh = { 'string' },
  },
  diff_keys = { open = { 'string' }, close = { 'string' }, refresh = { 'string' } },
}

--- @type lazaret.Options
M.options = vim.deepcopy(M.defaults)
--- The unknown keys of the last setup{} (dotted: `keys.aprove`).
M.unknown = {}

local function is_leaf(spec)
  return spec[1] ~= nil
end

--- Checks `opts` against `schema`: unknown keys (dotted paths) and type
--- errors (messages).
--- @return string[] unknown
--- @return string[] errors
function M.check(opts, schema, prefix, unknown, errors)
  schema, prefix, unknown, errors = schema or M.schema, prefix or '', unknown or {}, errors or {}
  local names = vim.tbl_keys(opts)
  table.sort(names, function(a, b)
    return tostring(a) < tostring(b)
  end)
  for _, name in ipairs(names) do
    local value, spec = opts[name], type(name) == 'string' and schema[name] or nil
    local path = prefix .. tostring(name)
    if spec == nil then
      unknown[#unknown + 1] = path
    elseif is_leaf(spec) then
      if not vim.tbl_contains(spec, type(value)) then
        errors[#errors + 1] = string.format('%s: expected %s, got %s', path, table.concat(spec, ' or '), type(value))
      end
    elseif type(value) ~= 'table' then
      errors[#errors + 1] = string.format('%s: expected a table, got %s', path, type(value))
    else
      M.check(value, spec, path .. '.', unknown, errors)
    end
  end
  return unknown, errors
end

--- Merges user options over the defaults. A wrong type is an error; an
--- unknown key is a warning (vim.notify WARN, and :checkhealth lazaret).
--- @param opts table?
--- @return lazaret.Options
function M.set(opts)
  if opts ~= nil and type(opts) ~= 'table' then
    error('lazaret: setup{} takes a table of options, got ' .. type(opts), 2)
  end
  opts = opts or {}
  local unknown, errors = M.check(opts)
  if #errors > 0 then
    error('lazaret: setup{}: ' .. table.concat(errors, '; ') .. ' (see :help lazaret-options)', 2)
  end
  M.unknown = unknown
  M.options = vim.tbl_deep_extend('force', vim.deepcopy(M.defaults), opts)
  if #unknown > 0 then
    vim.notify(M.unknown_message(), vim.log.levels.WARN, { title = 'Lazaret' })
  end
  return M.options
end

--- The warning about unknown keys ('' when there are none).
--- @return string
function M.unknown_message()
  if #M.unknown == 0 then
    return ''
  end
  local names = vim.tbl_map(function(name)
    return '`' .. require('lazaret.text').inert(name) .. '`'
  end, M.unknown)
  return string.format(
    'Lazaret: setup{} ignored unknown option%s %s (misspelt? see :help lazaret-options)',
    #names == 1 and '' or 's',
    table.concat(names, ', ')
  )
end

--- The pending window's keys (the rules window's `revoke` and `refresh` are its own).
M.pending_keys = { 'approve', 'deny', 'edit', 'full', 'close', 'next', 'prev', 'allow_minutes', 'allow_profile', 'deny_profile', 'every_port' }

--- Keys of the pending window that clash (two actions on one key, or an
--- action on <CR>, the key that confirms a selected answer, other than
--- `full`), as messages; empty when none (:checkhealth lazaret).
--- @return string[]
function M.key_conflicts()
  local keys, seen, out = M.options.keys, {}, {}
  for _, name in ipairs(M.pending_keys) do
    local lhs = vim.fn.keytrans(vim.api.nvim_replace_termcodes(keys[name], true, true, true))
    if seen[lhs] then
      out[#out + 1] = string.format('keys.%s and keys.%s are both %s', seen[lhs], name, lhs)
    end
    seen[lhs] = seen[lhs] or name
    if lhs == '<CR>' and name ~= 'full' then
      out[#out + 1] = string.format('keys.%s is <CR>, the key that confirms a selected answer', name)
    end
  end
  return vim.tbl_map(require('lazaret.text').inert, out)
end

--- The binary lazaret calls use: `binary`, else $LAZARET_BIN, else `lazaret`.
--- @return string
function M.binary()
  local binary = M.options.binary or vim.env.LAZARET_BIN
  if binary == nil or binary == '' then
    binary = 'lazaret'
  end
  return binary
end

--- The lazaret command line prefix: binary and `--config`.
--- @return string[]
function M.command(...)
  local o = M.options
  local argv = { M.binary() }
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
