--- The floats of the plugin's windows (`:Lazaret`, `:LazaretPending`,
--- `:LazaretRules`): a scratch buffer in a float centred in the editor, its
--- lines and highlights set read-only, its size fitted to them, its keys.
--- The callers build the lines inert (lazaret.text).
local config = require('lazaret.config')

local M = {}

--- Links the plugin's highlight groups to standard ones (`default`: a
--- colorscheme or the user may set them first).
function M.highlights()
  local set = function(name, link)
    vim.api.nvim_set_hl(0, name, { link = link, default = true })
  end
  set('LazaretTitle', 'Title')
  set('LazaretCommand', 'Statement')
  set('LazaretLabel', 'Comment')
  set('LazaretRisk', 'DiagnosticWarn')
  set('LazaretHint', 'Comment')
  set('LazaretProblem', 'DiagnosticError')
  set('LazaretArmed', 'DiagnosticOk')
  set('LazaretDisarmed', 'DiagnosticWarn')
  set('LazaretConfirm', 'DiagnosticError')
end

--- The config of a float of `width` x `height` cells centred in the editor,
--- kept inside it (at least 20 x 3).
--- @param width integer
--- @param height integer
--- @return table
function M.geometry(width, height)
  local columns, rows = vim.o.columns, vim.o.lines - vim.o.cmdheight - 2
  width = math.min(width, math.max(20, columns - 4))
  height = math.min(math.max(height, 3), math.max(3, rows - 2))
  return {
    relative = 'editor',
    width = width,
    height = height,
    row = math.max(0, math.floor((rows - height) / 2)),
    col = math.max(0, math.floor((columns - width) / 2)),
  }
end

--- The text width a float can show.
--- @return integer
function M.text_width()
  return math.max(20, vim.o.columns - 4) - 2
end

--- Frees the name `name` (a buffer name must be unique) from a buffer of
--- ours that still has it: it is renamed, and wiped when hidden. An exact
--- comparison: bufnr() would read the name as a pattern.
--- @param name string
function M.forget_buffer(name)
  for _, buf in ipairs(vim.api.nvim_list_bufs()) do
    if vim.api.nvim_buf_is_valid(buf) and vim.api.nvim_buf_get_name(buf) == name then
      pcall(vim.api.nvim_buf_set_name, buf, name .. ' (replaced ' .. buf .. ')')
    end
  end
end

--- Opens a new scratch buffer named `name` (wiped when hidden) in a small
--- centred float titled `title`, without wrapping, and enters it; the caller
--- sets its lines and size (show()).
--- @param name string
--- @param title string
--- @param opts {cursorline: boolean?, on_wipe: fun()?}? `on_wipe` runs once when the buffer is wiped
--- @return integer win
--- @return integer buf
function M.open(name, title, opts)
  opts = opts or {}
  local buf = vim.api.nvim_create_buf(false, true)
  vim.bo[buf].bufhidden = 'wipe'
  vim.bo[buf].filetype = 'lazaret'
  M.forget_buffer(name)
  vim.api.nvim_buf_set_name(buf, name)
  local cfg = M.geometry(60, 5)
  cfg.style, cfg.border, cfg.title, cfg.title_pos = 'minimal', config.options.border, title, 'center'
  local win = vim.api.nvim_open_win(buf, true, cfg)
  if opts.cursorline then
    vim.wo[win].cursorline = true
  end
  vim.wo[win].wrap = false
  if opts.on_wipe then
    local on_wipe = opts.on_wipe
    vim.api.nvim_create_autocmd('BufWipeout', {
      buffer = buf,
      once = true,
      callback = function()
        on_wipe()
      end,
    })
  end
  return win, buf
end

--- Maps `lhs` in normal mode in `buf` to `fn` (called without arguments).
--- @param buf integer
--- @param lhs string
--- @param fn fun()
--- @param desc string
function M.map(buf, lhs, fn, desc)
  vim.keymap.set('n', lhs, function()
    fn()
  end, { buffer = buf, nowait = true, silent = true, desc = desc })
end

--- Sets the lines of the float `win` showing `buf` (left read-only), their
--- highlights in namespace `ns` when given (`marks`: {line (0-based), group}),
--- and fits the float to them: as wide as the widest line (at least 40
--- cells) and as tall as they are, inside the editor.
--- @param win integer
--- @param buf integer
--- @param lines string[]
--- @param ns integer?
--- @param marks table[]?
function M.show(win, buf, lines, ns, marks)
  vim.bo[buf].modifiable = true
  vim.api.nvim_buf_set_lines(buf, 0, -1, false, lines)
  vim.bo[buf].modifiable = false
  if ns then
    vim.api.nvim_buf_clear_namespace(buf, ns, 0, -1)
    for _, mark in ipairs(marks or {}) do
      vim.api.nvim_buf_set_extmark(buf, ns, mark[1], 0, { end_row = mark[1] + 1, hl_group = mark[2], hl_eol = false })
    end
  end
  local width = 40
  for _, line in ipairs(lines) do
    width = math.max(width, vim.fn.strdisplaywidth(line) + 2)
  end
  vim.api.nvim_win_set_config(win, M.geometry(width, #lines))
end

--- Closes the float `win` when it is still open.
--- @param win integer?
function M.close(win)
  if win ~= nil and vim.api.nvim_win_is_valid(win) then
    vim.api.nvim_win_close(win, true)
  end
end

return M
