-- Unit tests of :help lazaret: the tags build without error and the help
-- documents every command, every option and every key of the windows.
local T = dofile(vim.fn.fnamemodify(arg[0], ':p:h') .. '/helper.lua')
local plugin = vim.api.nvim_get_runtime_file('doc/lazaret.txt', false)[1]
local text = table.concat(vim.fn.readfile(plugin), '\n')

T.test('helptags builds and :help lazaret opens the plugin help', function()
  local doc = vim.fn.tempname()
  vim.fn.mkdir(doc .. '/doc', 'p')
  vim.fn.writefile(vim.fn.readfile(plugin), doc .. '/doc/lazaret.txt')
  vim.opt.runtimepath:prepend(doc)
  local ok, err = pcall(vim.cmd.helptags, doc .. '/doc')
  T.ok(ok, tostring(err))
  vim.cmd.help('lazaret')
  T.eq(vim.fn.expand('%:t'), 'lazaret.txt')
  for _, tag in ipairs({ ':LazaretPending', 'lazaret-options', 'lazaret-statusline', 'lazaret-install' }) do
    T.ok(pcall(vim.cmd.help, tag), tag)
  end
end)

T.test('every command has a help tag', function()
  vim.cmd.runtime('plugin/lazaret.lua')
  for name in pairs(vim.api.nvim_get_commands({})) do
    if name:match('^Lazaret') then
      T.ok(text:find('*:' .. name .. '*', 1, true), name .. ' documented')
    end
  end
end)

T.test('every option and every key is documented', function()
  local defaults = require('lazaret.config').defaults
  for option, value in pairs(defaults) do
    T.ok(text:find(option .. ' = ', 1, true), 'option ' .. option)
    if type(value) == 'table' then
      for key, lhs in pairs(value) do
        T.ok(text:find(key .. ' = ' .. vim.inspect(lhs):gsub('"', "'"), 1, true), option .. '.' .. key)
      end
    end
  end
end)

T.finish()
