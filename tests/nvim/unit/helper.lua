-- A tiny spec runner for `nvim -l`: test(name, fn) with plain assertions.
-- A test that asserts nothing counts as failed. Prints one line per test and
-- `unit <file>: N passed, N failed`; exits non-zero on any failure.
local root = vim.fn.fnamemodify(debug.getinfo(1, 'S').source:sub(2), ':p:h:h:h:h')
vim.opt.runtimepath:prepend(root .. '/editors/nvim')

local T = { passed = 0, failed = 0, asserts = 0, file = vim.fn.fnamemodify(arg and arg[0] or '?', ':t') }

function T.test(name, fn)
  local before = T.asserts
  local ok, err = xpcall(fn, debug.traceback)
  if ok and T.asserts == before then
    ok, err = false, 'the test asserted nothing'
  end
  if ok then
    T.passed = T.passed + 1
    io.stdout:write('ok     ' .. name .. '\n')
  else
    T.failed = T.failed + 1
    io.stdout:write('FAILED ' .. name .. '\n' .. tostring(err) .. '\n')
  end
end

function T.eq(got, want, message)
  T.asserts = T.asserts + 1
  if not vim.deep_equal(got, want) then
    error(string.format('%s\n  expected: %s\n       got: %s', message or 'values differ', vim.inspect(want), vim.inspect(got)), 2)
  end
end

function T.ok(value, message)
  T.asserts = T.asserts + 1
  if not value then
    error(message or 'expected a true value', 2)
  end
end

--- Waits (running the event loop) until fn() is true; fails after timeout_ms.
function T.wait(fn, timeout_ms, message)
  T.asserts = T.asserts + 1
  if not vim.wait(timeout_ms or 3000, fn, 10) then
    error('timed out: ' .. (message or 'condition'), 2)
  end
end

function T.finish()
  io.stdout:write(string.format('unit %s: %d passed, %d failed\n', T.file, T.passed, T.failed))
  os.exit(T.failed == 0 and T.passed > 0 and 0 or 1)
end

return T
