-- The worker's read of a batch: the state of every memory it touches, what each tenant in
-- it stores (for quotas), and the stored results of commands that may be redeliveries.
--
-- KEYS: n memories' hashes, then q tenants' stored-totals hashes (RedisKeys.stored), then
--       the command result keys (RedisKeys.command)
-- ARGV[1] n   ARGV[2] q   ARGV[3..] the item fields to read (store.keys.ITEM_FIELDS)
-- Returns, in KEYS order: HMGET of the fields per memory, {n, b} per tenant, the stored
-- result (or nil) per command.
local n = tonumber(ARGV[1])
local q = tonumber(ARGV[2])
local fields = {}
for i = 3, #ARGV do fields[#fields + 1] = ARGV[i] end
local out = {}
for i = 1, n do
  out[#out + 1] = redis.call('HMGET', KEYS[i], unpack(fields))
end
for i = n + 1, n + q do
  out[#out + 1] = redis.call('HMGET', KEYS[i], 'n', 'b')
end
for i = n + q + 1, #KEYS do
  out[#out + 1] = redis.call('GET', KEYS[i])
end
return out
