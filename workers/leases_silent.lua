-- The hosts silent for more than ARGV[1] ms and their records; hosts silent for more than ARGV[2] ms are
-- forgotten (their leases have run out: the sweeper has their items).
-- KEYS[1] = the host registry; ARGV[3] = the records' key prefix.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - tonumber(ARGV[2]))
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now - tonumber(ARGV[1]))
local out = {}
for _, id in ipairs(ids) do
  out[#out + 1] = id
  out[#out + 1] = redis.call('GET', ARGV[3] .. id) or '[]'
end
return out
