-- A library, not a script: the neighbour expansion recall_survey.lua and
-- recall_neighbours.lua share. store/scripts.py puts it in front of them.
--
-- neighbours(best_first, est, members, owner_index, turns, time_at, turns_at, expand,
-- gap, pairs_out, found): sorts best_first (numbers into est and members) by estimate,
-- best first, and for the first ``expand`` of them that are conversation turns (members of
-- KEYS[turns_at + o], o their owner's place by owner_index, turns[o] the owner's count of
-- turns) reads the turns just before and after in the owner's time index
-- (KEYS[time_at + o]) within ``gap`` seconds: each such pair is appended to pairs_out both
-- ways (key, neighbour key, neighbour key, key) and found(neighbour) is called.

local function neighbours(best_first, est, members, owner_index, turns, time_at, turns_at,
                          expand, gap, pairs_out, found)
  table.sort(best_first, function(a, b) return est[a] > est[b] end)
  local expanded = 0
  for j = 1, #best_first do
    if expanded >= expand then break end
    local member = members[best_first[j]]
    local o = owner_index[string.match(member, '^[^:]*:[^:]*')]
    local turn_set = o and turns[o] > 0 and KEYS[turns_at + o]
    if turn_set and redis.call('SISMEMBER', turn_set, member) == 1 then
      expanded = expanded + 1
      local index = KEYS[time_at + o]
      local rank = redis.call('ZRANK', index, member)
      if rank then
        local around = redis.call('ZRANGE', index, math.max(rank - 1, 0), rank + 1,
                                  'WITHSCORES')
        local at = nil
        for i = 1, #around, 2 do
          if around[i] == member then at = tonumber(around[i + 1]) end
        end
        for i = 1, #around, 2 do
          local other = around[i]
          if other ~= member and math.abs(tonumber(around[i + 1]) - at) <= gap
              and redis.call('SISMEMBER', turn_set, other) == 1 then
            local p = #pairs_out
            pairs_out[p + 1], pairs_out[p + 2] = member, other
            pairs_out[p + 3], pairs_out[p + 4] = other, member
            found(other)
          end
        end
      end
    end
  end
end
