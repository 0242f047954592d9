#!lua flags=no-writes
-- Recall's read of given memories for stage two.
--
-- KEYS: the memories' hashes.   ARGV[1] the token field   ARGV[2..] the memories' keys
-- (the members, in the order of KEYS).
-- Returns the rows read appends (8 values per memory still there).
--
-- read(): recall_read.lua, loaded in front of this script (store/scripts.py).
  if not blob or blob == '' then
    return
  end
  local n = #out
  out[n + 1], out[n + 2], out[n + 3], out[n + 4] = member, from_card, blob, h[4]
  out[n + 5], out[n + 6], out[n + 7], out[n + 8] = h[5], h[6], h[7], h[8]
end

local rows = {}
for i = 1, #KEYS do
  read(rows, KEYS[i], ARGV[i + 1], ARGV[1])
end
return rows
