#!lua flags=no-writes
-- Recall's read of given memories for stage two.
--
-- KEYS: the memories' hashes.   ARGV[1] the token field   ARGV[2..] the memories' keys
-- (the members, in the order of KEYS).
-- Returns the rows read appends (8 values per memory still there).
--
-- read(): recall_read.lua, loaded in front of this script (store/scripts.py).

local rows = {}
for i = 1, #KEYS do
  read(rows, KEYS[i], ARGV[i + 1], ARGV[1])
end
return rows
