-- The items of every host that beat within the last ARGV[1] ms.
-- KEYS[1] = the host registry; ARGV[2] = the records' key prefix.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], now - tonumber(ARGV[1]), '+inf')
local out = {}
for _, id in ipairs(ids) do
  out[#out + 1] = redis.call('GET', ARGV[2] .. id) or '[]'
end
return out
