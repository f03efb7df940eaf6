-- Take the dispatcher's lock and open a new term in one step (workers/leadership.py).
-- KEYS[1] = the lock, KEYS[2] = the term; ARGV[1] = this process's token, ARGV[2] = the lock's expiry (ms).
-- The term exceeds every earlier one and Redis's clock in ms, so it keeps growing across a Redis that
-- restarted empty. Returns 0 when another process holds the lock.
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return 0
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local term = math.max(tonumber(redis.call('GET', KEYS[2]) or '0') + 1, now)
redis.call('SET', KEYS[2], term)
return term
