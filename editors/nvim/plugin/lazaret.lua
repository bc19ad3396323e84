--- Lazaret's commands. Loads nothing else: every module is required when a
--- command runs, or at VimEnter to start watching the coordinators.
if vim.g.loaded_lazaret then
  return
end
vim.g.loaded_lazaret = 1

if vim.fn.has('nvim-0.11') == 0 then
  vim.notify('lazaret.nvim needs Neovim 0.11 or newer (the version it is tested on)', vim.log.levels.ERROR)
  return
end

local command = vim.api.nvim_create_user_command

command('Lazaret', function()
  require('lazaret').open_status()
end, { desc = 'Lazaret: domains, sessions, agent branch and network policy' })

command('LazaretPending', function()
  require('lazaret').open_pending()
end, { desc = 'Lazaret: answer the pending host escalations and network requests' })

command('LazaretRules', function()
  require('lazaret').open_rules()
end, { desc = 'Lazaret: auto-approve rules and network grants; revoke them' })

command('LazaretDiff', function(opts)
  require('lazaret').diff(opts.fargs[1])
end, { nargs = '?', desc = "Lazaret: review the agent branch in a new tab" })

command('LazaretMerge', function(opts)
  require('lazaret').merge(opts.fargs[1])
end, { nargs = '?', desc = 'Lazaret: merge the agent branch into the workspace' })

command('LazaretNet', function(opts)
  require('lazaret').net(opts.fargs)
end, {
  nargs = '*',
  desc = 'Lazaret: show|allow RULE|deny RULE|reload the egress policy',
  complete = function(_, line)
    local words = vim.split(line, '%s+', { trimempty = false })
    if #words <= 2 then
      return { 'show', 'allow', 'deny', 'reload' }
    end
    return {}
  end,
})

vim.api.nvim_create_autocmd('VimEnter', {
  group = vim.api.nvim_create_augroup('lazaret.start', { clear = true }),
  once = true,
  callback = function()
    if vim.g.lazaret_auto_start == false then
      return
    end
    if require('lazaret.config').options.auto_start then
      require('lazaret').start()
    end
  end,
})
