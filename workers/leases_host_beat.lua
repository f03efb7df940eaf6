-- Record this process's items, stamped with Redis time; the record outlives the beat (a silent host's items
-- must stay known) for as long as a lease can.
-- KEYS[1] = the host registry, KEYS[2] = this process's record; ARGV[1] = its name, ARGV[2] = its items
-- (JSON), ARGV[3] = the record's expiry (ms).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[1], now, ARGV[1])
redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
return now
