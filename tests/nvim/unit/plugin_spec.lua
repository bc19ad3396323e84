-- Unit tests of plugin/lazaret.lua: it defines the commands and loads
-- nothing heavy; the statusline costs nothing before the plugin starts.
local T = dofile(vim.fn.fnamemodify(arg[0], ':p:h') .. '/helper.lua')

local function loaded()
  local names = {}
  for name in pairs(package.loaded) do
    if name:match('^lazaret') then
      names[#names + 1] = name
    end
  end
  table.sort(names)
  return names
end

T.test('sourcing the plugin file defines every command and requires no module', function()
  vim.cmd.runtime('plugin/lazaret.lua')
  local commands = vim.api.nvim_get_commands({})
  for _, name in ipairs({ 'Lazaret', 'LazaretPending', 'LazaretDiff', 'LazaretMerge', 'LazaretNet', 'LazaretRules' }) do
    T.ok(commands[name], name .. ' is defined')
  end
  T.eq(loaded(), {})
  T.eq(vim.fn.getcompletion('LazaretNet ', 'cmdline'), { 'show', 'allow', 'deny', 'reload' })
end)

T.test('the statusline is empty and loads only the entry module before start', function()
  T.eq(require('lazaret').statusline(), '')
  T.eq(loaded(), { 'lazaret' })
end)

T.test('setup{} merges options over the defaults and validates them', function()
  require('lazaret').setup({ auto_start = false, keys = { approve = 'y' }, client = 'nvim-test' })
  local o = require('lazaret.config').options
  T.eq({ o.keys.approve, o.keys.deny, o.client, o.poll_ms }, { 'y', 'd', 'nvim-test', 1000 })
  T.ok(not pcall(require('lazaret').setup, { poll_ms = 'often' }), 'a wrong type is refused')
  require('lazaret').setup({})
  T.eq(require('lazaret.config').options.keys.approve, 'a', 'setup{} again starts from the defaults')
end)

T.test('setup{} warns about unknown keys, nested ones too, naming them', function()
  local notes = {}
  local notify = vim.notify
  vim.notify = function(msg, level)
    table.insert(notes, { msg = msg, level = level })
  end
  require('lazaret').setup({ auto_start = false, bianry = '/x/lazaret', keys = { aprove = 'y', deny = 'n' }, diff_keys = { refresh = 'r' } })
  vim.notify = notify
  T.eq(#notes, 1)
  T.eq(notes[1].level, vim.log.levels.WARN)
  T.ok(notes[1].msg:find('`bianry`, `keys.aprove`', 1, true), notes[1].msg)
  T.eq(require('lazaret.config').unknown, { 'bianry', 'keys.aprove' })
  local o = require('lazaret.config').options
  T.eq({ o.keys.deny, o.diff_keys.refresh }, { 'n', 'r' }, 'the known keys still apply')
  T.ok(not pcall(require('lazaret').setup, { keys = 'a' }), 'a table option given a string is refused')
  T.ok(not pcall(require('lazaret').setup, { keys = { approve = 1 } }), 'a nested wrong type is refused')
  notes = {}
  vim.notify = function(msg, level)
    table.insert(notes, { msg = msg, level = level })
  end
  require('lazaret').setup({ auto_start = false })
  vim.notify = notify
  T.eq(#notes, 0, 'no warning without unknown keys')
  T.eq(require('lazaret.config').unknown, {})
end)

T.test('pending-window keys that clash are reported (:checkhealth): two actions on one key, an action on <CR>', function()
  local config = require('lazaret.config')
  config.set({ auto_start = false })
  T.eq(config.key_conflicts(), {}, 'the defaults are distinct')
  config.set({ auto_start = false, keys = { every_port = 'p', approve = '<CR>', full = 'f' } })
  T.eq(config.key_conflicts(), {
    'keys.approve is <CR>, the key that confirms a selected answer',
    'keys.allow_profile and keys.every_port are both p',
  })
  config.set({ auto_start = false })
end)

T.test('the lazaret command line honours $LAZARET_BIN and config_file', function()
  local config = require('lazaret.config')
  vim.env.LAZARET_BIN = '/opt/x/lazaret'
  T.eq(config.command('pending'), { '/opt/x/lazaret', 'pending' })
  config.set({ binary = '/usr/bin/lazaret', config_file = '/c.toml' })
  T.eq(config.command('editor-info', '--json'), { '/usr/bin/lazaret', '--config', '/c.toml', 'editor-info', '--json' })
  config.set({})
end)

T.finish()
