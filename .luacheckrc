-- luacheck's settings for the scripts' Lua (scheduler/store/scripts/lua/), which
-- tests/store/test_lua_files.py lints: each file alone, with the names it includes and
-- its arguments as globals, and each script's assembled text and the function library whole.
std = "lua51"
-- What Redis gives a script: its API, its libraries, its keys and arguments.
read_globals = {"redis", "cjson", "cmsgpack", "bit", "struct", "KEYS", "ARGV"}
max_line_length = 100
-- A function library's callback takes (KEYS, ARGV), whether the script reads ARGV or not.
ignore = {"212/ARGV"}
