-- Record this dispatcher's fitness figure with Redis's clock; return every fresh figure (name, round trip
-- in µs), dropping stale ones on the way (workers/fitness.py).
-- KEYS[1] = the figures' hash; ARGV[1] = this dispatcher's name, ARGV[2] = its round trip (µs),
-- ARGV[3] = how old a figure may be and still count (ms), ARGV[4] = the hash's expiry (ms).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2] .. ':' .. now)
redis.call('PEXPIRE', KEYS[1], ARGV[4])
local all = redis.call('HGETALL', KEYS[1])
local out = {}
for i = 1, #all, 2 do
  local v = all[i + 1]
  local sep = string.find(v, ':', 1, true)
  local at = sep and tonumber(string.sub(v, sep + 1)) or 0
  if now - at > tonumber(ARGV[3]) then
    redis.call('HDEL', KEYS[1], all[i])
  else
    out[#out + 1] = all[i]
    out[#out + 1] = string.sub(v, 1, sep - 1)
  end
end
return out
