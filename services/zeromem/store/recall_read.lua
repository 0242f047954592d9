-- A library, not a script: the read() function recall's scripts share. store/scripts.py
-- puts it in front of recall_survey.lua, recall_fetch.lua and recall_stage_two.lua.
--
-- Fields read of a memory's hash (store/keys.py): rc (the recall card), rl (the command
-- that wrote it), lc, fl, fd, fi, tk:{encoding} (the token field passed in), dl, d.
--
-- read(out, key, member, token_field) appends one memory to out as 8 values: the member,
-- 1 if the blob is its recall card (0: the memory whole, when no card matches its last
-- write), the blob, the feedback counts (liked, disliked, important), the cached token
-- count, the document length. A tombstone or a missing memory appends nothing.

local function read(out, key, member, token_field)
  local h = redis.call('HMGET', key, 'rc', 'rl', 'lc', 'fl', 'fd', 'fi',
                       token_field, 'dl')
  local from_card, blob = 1, h[1]
  if not blob or not h[2] or h[2] ~= h[3] then
    from_card, blob = 0, redis.call('HGET', key, 'd')
  end
  if not blob or blob == '' then
    return
  end
  local n = #out
  out[n + 1], out[n + 2], out[n + 3], out[n + 4] = member, from_card, blob, h[4]
  out[n + 5], out[n + 6], out[n + 7], out[n + 8] = h[5], h[6], h[7], h[8]
end
