-- Neovim configuration of the end-to-end tests: the plugin is installed the
-- plain-packpath way (a start package, as the docs describe), and every
-- vim.notify is recorded with its time so tests can measure latency.
local pack = assert(vim.env.LAZARET_TEST_PACKPATH, 'LAZARET_TEST_PACKPATH')
vim.opt.packpath:prepend(pack)
vim.opt.swapfile = false
vim.opt.shortmess:append('I')
_G.lazaret_test_notes = {}
local notify = vim.notify
vim.notify = function(msg, level, opts)
  local sec, usec = vim.uv.gettimeofday()
  table.insert(_G.lazaret_test_notes, { msg = msg, level = level, at = sec * 1000 + math.floor(usec / 1000) })
  return notify(msg, level, opts)
end
-- vim.ui.input / vim.ui.select stay the real ones; their prompts are recorded.
_G.lazaret_test_prompts = {}
local input, select = vim.ui.input, vim.ui.select
vim.ui.input = function(opts, on_confirm)
  table.insert(_G.lazaret_test_prompts, { kind = 'input', prompt = opts.prompt, default = opts.default })
  return input(opts, on_confirm)
end
vim.ui.select = function(items, opts, on_choice)
  local shown = {}
  for i, item in ipairs(items) do
    shown[i] = type(item) == 'string' and item or (opts.format_item and opts.format_item(item)) or tostring(item)
  end
  table.insert(_G.lazaret_test_prompts, { kind = 'select', prompt = opts.prompt, items = shown })
  return select(items, opts, on_choice)
end
-- When each network request's destination was first in the plugin's queue
-- (epoch ms; `User LazaretChanged` fires as the queue changes), for the bench.
_G.lazaret_test_network_seen = {}
vim.api.nvim_create_autocmd('User', {
  pattern = 'LazaretChanged',
  callback = function()
    local lazaret = package.loaded['lazaret']
    if not lazaret then
      return
    end
    for _, request in ipairs(lazaret.network_requests()) do
      if request.destination and not _G.lazaret_test_network_seen[request.destination] then
        local sec, usec = vim.uv.gettimeofday()
        _G.lazaret_test_network_seen[request.destination] = sec * 1000 + math.floor(usec / 1000)
      end
    end
  end,
})
