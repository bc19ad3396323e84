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
