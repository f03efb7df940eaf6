-- Renew the lock only if we still hold it (compare-and-expire in one step).
-- KEYS[1] = the lock; ARGV[1] = this process's token, ARGV[2] = the lock's expiry (ms).
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
