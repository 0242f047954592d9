#!lua flags=no-writes
-- Recall's survey: statistics, stage one and stage two's memories in one call.
--
-- KEYS: n owner-stats keys, n time index keys, n*m term keys (owner-major), n keys of the
-- owners' conversation turns (their type set of ``message`` memories). The memories'
-- hashes are found while running (item key prefix .. member), so they are not declared.
-- ARGV: postings limit, recent limit, stage-two size, k1, the posting score's tf scale,
-- explain ('1'/'0'), token field, item key prefix, owners n, terms m, neighbour expansion
-- (how many of the best stage-one candidates get their time-neighbours read), neighbour
-- gap (seconds), date range low and high ('' for none), dated limit, then m term factors
-- (a term's weight is multiplied by its factor: the speaker weight for a speaker term),
-- n owners.
--
-- The memories of the query's date range (at most the dated limit per owner, from the
-- time index) join the recent ones: always scored. The neighbours of a conversation turn
-- are the turns just before and after it in its owner's time index, within the gap; they
-- are read for stage two too, and reported as pairs. Only turns are expanded (ranking
-- shares scores between turns only): reading the neighbours of every candidate of an
-- owner of facts doubled the memories stage two read (60 -> 107 per recall at 10k in
-- scope) and put recall's p50 at 10k over its 3 ms target (bench/recall_latency.py).
--
-- Stage one estimates every posting's memory with BM25 at the average document length
-- (sum over the query terms of idf * (k1 + 1) * tf / (tf + k1)), and keeps the best
-- (ties: the most recently created, then the greater key byte for byte) and every recent
-- memory. Term frequencies the best postings did not carry are looked up for the recent
-- memories (they are always scored). Estimates add up in the order of the query terms, and
-- a memory's term frequencies are reported in the order they were found: the order
-- ranking then sums them in, so the same data always gives the same doubles.
--
-- A recent or dated memory with no query-term frequency is chosen but not read when the
-- query has terms and no explain view is asked for: it cannot score above zero, and a
-- query with terms keeps only memories that do (recall.service), so its card would
-- cross the network only to be dropped. A time-neighbour is read whatever its terms
-- (it may take a share of its neighbour's score). At 10k memories in scope this read 42
-- memories a recall instead of 60 (bench/recall_latency.py's queries).
--
-- Returns {owner stats (flat HGETALL per owner), df per (owner, term), the chosen memories'
-- rows (see read) but those left unread as above, their query-term frequencies (key,
-- {term index, tf, ...}), the cut memories with their estimates when explaining (key,
-- '%.17g'), the number chosen, neighbour pairs (key, neighbour key, ...)}.
--
-- read(): recall_read.lua, and neighbours(): recall_expand.lua, loaded in front of this
-- script (store/scripts.py).

local call, tonumber, floor = redis.call, tonumber, math.floor
local limit, nrecent, keep = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local k1, scale, explain = tonumber(ARGV[4]), tonumber(ARGV[5]), ARGV[6] == '1'
local token_field, prefix = ARGV[7], ARGV[8]
local n, m = tonumber(ARGV[9]), tonumber(ARGV[10])
local expand, gap = tonumber(ARGV[11]), tonumber(ARGV[12])
local date_low, date_high, dated = ARGV[13], ARGV[14], tonumber(ARGV[15])
local factor_at = 15
local owner_at = factor_at + m
local turns_at = 2 * n + n * m

local stats, dfs, recents, turns = {}, {}, {}, {}
local n_docs = 0
for o = 1, n do
  local flat = call('HGETALL', KEYS[o])
  stats[o] = flat
  for i = 1, #flat, 2 do
    if flat[i] == 'n' then n_docs = n_docs + tonumber(flat[i + 1]) end
  end
  turns[o] = call('SCARD', KEYS[turns_at + o])
  recents[o] = call('ZREVRANGE', KEYS[n + o], 0, nrecent - 1)
  if date_low ~= '' then
    local owned = recents[o]
    local seen = {}
    for _, member in ipairs(owned) do seen[member] = true end
    for _, member in ipairs(call('ZRANGEBYSCORE', KEYS[n + o], date_low,
                                 '(' .. date_high, 'LIMIT', 0, dated)) do
      if not seen[member] then owned[#owned + 1] = member end
    end
  end
end
local df = {}
for t = 1, m do df[t] = 0 end
for o = 1, n do
  for t = 1, m do
    local i = (o - 1) * m + t
    dfs[i] = call('ZCARD', KEYS[2 * n + i])
    df[t] = df[t] + dfs[i]
  end
end
-- BM25's idf as ranking.idf computes it, times (k1 + 1)
local docs = math.max(n_docs, 0)
local weight = {}
for t = 1, m do
  local d = math.min(math.max(df[t], 0), docs)
  weight[t] = math.log(1.0 + (docs - d + 0.5) / (d + 0.5)) * (k1 + 1.0)
              * tonumber(ARGV[factor_at + t])
end

-- Memories found in postings are numbered in the order found; per number: the estimate,
-- the creation time, the posting list first found in and the tf there, and the (term, tf)
-- pairs found after that. Arrays, not one table per memory: a recall finds hundreds.
local number, members = {}, {}
local est, made, first, first_t, first_f, more = {}, {}, {}, {}, {}, {}
local n_members = 0
-- append the pair (term, tf) to the list pairs[k] (a flat array, made on first use)
local function add_pair(pairs, k, t, f)
  local x = pairs[k]
  if x == nil then
    pairs[k] = {t, f}
  else
    x[#x + 1] = t
    x[#x + 1] = f
  end
end
for o = 1, n do
  for t = 1, m do
    local i = (o - 1) * m + t
    if dfs[i] > 0 then
      local flat = call('ZREVRANGE', KEYS[2 * n + i], 0, limit - 1, 'WITHSCORES')
      local w = weight[t]
      for j = 1, #flat, 2 do
        local member, score = flat[j], tonumber(flat[j + 1])
        local f = floor(score / scale)
        local k = number[member]
        if k == nil then
          n_members = n_members + 1
          k = n_members
          number[member] = k
          members[k] = member
          est[k] = w * f / (f + k1)
          made[k] = score - f * scale
          first[k] = i
          first_t[k] = t
          first_f[k] = f
        else
          est[k] = est[k] + w * f / (f + k1)
          add_pair(more, k, t, f)
        end
      end
    end
  end
end
-- a recent memory's frequency for a term whose best postings did not include it
local recent, n_recent, recent_only = {}, 0, {}
for o = 1, n do
  local owned = recents[o]
  for _, member in ipairs(owned) do
    if not recent[member] then
      recent[member] = true
      n_recent = n_recent + 1
    end
  end
  if #owned > 0 then
    for t = 1, m do
      local i = (o - 1) * m + t
      if dfs[i] > 0 then
        local scores = call('ZMSCORE', KEYS[2 * n + i], unpack(owned))
        for r, member in ipairs(owned) do
          local score = scores[r]
          if score then
            local f = floor(tonumber(score) / scale)
            local k = number[member]
            if k == nil then
              add_pair(recent_only, member, t, f)
            elseif first_t[k] ~= t then
              local known = false
              for p = 1, #(more[k] or {}), 2 do
                if more[k][p] == t then known = true break end
              end
              if not known then add_pair(more, k, t, f) end
            end
          end
        end
      end
    end
  end
end

-- The numbers of the keep best by (estimate, created, key), all descending. Estimates take
-- few distinct values (small term frequencies over a few terms), so the threshold comes
-- from counting them rather than from sorting.
local function best()
  local out = {}
  if n_members <= keep then
    for k = 1, n_members do out[k] = k end
    return out
  end
  local count, values = {}, {}
  for k = 1, n_members do
    local e = est[k]
    local c = count[e]
    if c == nil then
      values[#values + 1] = e
      count[e] = 1
    else
      count[e] = c + 1
    end
  end
  table.sort(values)
  local above, threshold = 0, 0
  for v = #values, 1, -1 do
    local c = count[values[v]]
    threshold = values[v]
    if above + c >= keep then break end
    above = above + c
  end
  local tied = {}
  for k = 1, n_members do
    local e = est[k]
    if e > threshold then out[#out + 1] = k
    elseif e == threshold then tied[#tied + 1] = k end
  end
  local room = keep - above
  if #tied > room then
    -- Ties go to the most recently created, then to the greater key. Memories first found
    -- in the same posting list with the same frequency were found in just that order (a
    -- list comes by score, then key, descending), which is the usual case.
    local list_, tf_ = first[tied[1]], first_f[tied[1]]
    local same = true
    for _, k in ipairs(tied) do
      if first[k] ~= list_ or first_f[k] ~= tf_ then same = false break end
    end
    if not same then
      table.sort(tied, function(a, b)
        local x, y = made[a], made[b]
        if x ~= y then return x > y end
        -- byte order, whatever the server's locale (Lua compares strings with strcoll)
        local p, q = members[a], members[b]
        for c = 1, math.min(#p, #q) do
          local u, v = string.byte(p, c), string.byte(q, c)
          if u ~= v then return u > v end
        end
        return #p > #q
      end)
    end
  end
  for j = 1, math.min(room, #tied) do out[#out + 1] = tied[j] end
  return out
end

local chosen, is_chosen = {}, {}
local everything = n_members + n_recent <= keep
for _, k in ipairs(best()) do
  local member = members[k]
  is_chosen[member] = true
  chosen[#chosen + 1] = member
end
for o = 1, n do
  for _, member in ipairs(recents[o]) do
    if not is_chosen[member] then
      is_chosen[member] = true
      chosen[#chosen + 1] = member
    end
  end
end
-- The time-neighbours of the best conversation turns (by estimate), read for stage two as
-- well. Only turns share with turns, so an owner without any reads nothing here.
local pairs_out = {}
local neighbour = {} -- member -> true for a time-neighbour read for stage two
local any_turns = false
for o = 1, n do any_turns = any_turns or turns[o] > 0 end
if expand > 0 and n_members > 0 and any_turns then
  local owner_index = {}
  for o = 1, n do owner_index[ARGV[owner_at + o]] = o end
  local best_first = {}
  for _, member in ipairs(chosen) do
    if number[member] then best_first[#best_first + 1] = number[member] end
  end
  neighbours(best_first, est, members, owner_index, turns, n, turns_at, expand, gap,
             pairs_out, function(other)
    neighbour[other] = true
    if not is_chosen[other] then
      is_chosen[other] = true
      chosen[#chosen + 1] = other
    end
  end)
end

local cut = {}
if explain and not everything then
  for k = 1, n_members do
    local member = members[k]
    if not is_chosen[member] then
      cut[#cut + 1] = member
      cut[#cut + 1] = string.format('%.17g', est[k])
    end
  end
end

local rows, tfs = {}, {}
local read_all = m == 0 or explain -- else a memory without a query term is not read
for _, member in ipairs(chosen) do
  local k = number[member]
  local tf
  if k ~= nil then
    tf = {first_t[k], first_f[k]}
    local x = more[k]
    if x ~= nil then
      for p = 1, #x do tf[p + 2] = x[p] end
    end
  else
    tf = recent_only[member]
  end
  if tf ~= nil then
    tfs[#tfs + 1] = member
    tfs[#tfs + 1] = tf
  end
  if tf ~= nil or read_all or neighbour[member] then
    read(rows, prefix .. member, member, token_field)
  end
end
return {stats, dfs, rows, tfs, cut, #chosen, pairs_out}
