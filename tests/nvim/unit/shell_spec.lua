-- Unit tests of lazaret.shell: argv quoting and splitting.
local T = dofile(vim.fn.fnamemodify(arg[0], ':p:h') .. '/helper.lua')
local shell = require('lazaret.shell')

T.test('safe words stay as they are', function()
  T.eq(shell.quote({ 'cargo', 'build', '--release', 'src/main.rs', 'a=b', 'x@y:1,2%' }), 'cargo build --release src/main.rs a=b x@y:1,2%')
end)

T.test('unsafe words are single-quoted, quotes inside escaped', function()
  T.eq(shell.quote({ 'echo', 'a b', '', "it's", '$HOME', 'a;b', '*' }), [[echo 'a b' '' 'it'\''s' '$HOME' 'a;b' '*']])
end)

T.test('split reads quotes and backslashes as sh does, without expansion', function()
  T.eq(shell.split([[touch 'a b' "c \"d\" \$e" f\ g $HOME '' ""]]), { 'touch', 'a b', 'c "d" $e', 'f g', '$HOME', '', '' })
  T.eq(shell.split('  spaced\tout \n words '), { 'spaced', 'out', 'words' })
  T.eq(shell.split([["keep \n literal"]]), { [[keep \n literal]] })
  T.eq(shell.split('ab"cd"\'ef\''), { 'abcdef' })
  T.eq(shell.split(''), {})
end)

T.test('split reports unfinished quoting', function()
  local argv, err = shell.split("echo 'open")
  T.eq(argv, nil)
  T.eq(err, 'unterminated single quote')
  T.eq(select(2, shell.split('echo "open')), 'unterminated double quote')
  T.eq(select(2, shell.split('echo \\')), 'trailing backslash')
end)

T.test('quote then split gives the same argv back (random argv)', function()
  local alphabet = { 'a', 'Z', '0', ' ', "'", '"', '\\', '$', '`', '*', '\t', '\n', ';', '&', '|', 'é', '-', '=', '~', '#' }
  math.randomseed(42)
  for _ = 1, 500 do
    local argv = {}
    for i = 1, math.random(1, 5) do
      local word = {}
      for j = 1, math.random(0, 8) do
        word[j] = alphabet[math.random(#alphabet)]
      end
      argv[i] = table.concat(word)
    end
    T.eq(shell.split(shell.quote(argv)), argv, 'round trip of ' .. vim.inspect(argv))
  end
end)

T.test('quote agrees with the real sh', function()
  local argv = { 'printf', '<%s>', "it's", 'a b', '$HOME', '`x`', '\\', '' }
  local out = vim.system({ 'sh', '-c', shell.quote(argv) }):wait()
  T.eq(out.stdout, "<it's><a b><$HOME><`x`><\\><>")
end)

T.finish()
